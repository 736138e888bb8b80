// The scheduler core's own Prometheus metrics (docs/metrics.md): the counters and histograms that
// the loop thread updates as it accepts tokens, finishes samples, closes requests and steps
// workers. Names follow vLLM's with the prefix `astr:`; every family has the label `model` (the
// served model's name), per-worker ones `worker` (its address) too.
//
// The gauges and the counters that Stats() already keeps in atomics (queue lengths, pages,
// worker health, admissions, preemptions, steps) are callback families that SchedulerLoop
// registers over those atomics, so that the loop counts each thing once.
//
// Every child is resolved here once; the loop updates them through these pointers (relaxed
// atomic adds: no lock, no allocation).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "astr/v1/generate.pb.h"
#include "common/metrics/registry.h"

namespace astr::sched {

struct SchedulerMetrics {
  // Per worker, in --workers order.
  struct Worker {
    metrics::Histogram* step_time_seconds = nullptr;
    metrics::Histogram* batch_size = nullptr;
    metrics::Histogram* iteration_tokens = nullptr;
  };

  // Registers the families on `registry` (which outlives this) with their children for `model`
  // and each of `worker_addresses`. `max_context_tokens` (0 = unknown) sizes the token-count
  // buckets.
  SchedulerMetrics(metrics::Registry* registry, const std::string& model,
                   const std::vector<std::string>& worker_addresses, int32_t max_context_tokens);

  // The per-worker children of a worker (one that joins later, or again: the same children).
  // Thread-safe.
  Worker ForWorker(const std::string& address) const;

  // The counter of samples that finished with `reason` (UNSPECIFIED counts as abort).
  metrics::Counter& finished(v1::FinishReason reason) const;

  metrics::Counter* prompt_tokens = nullptr;
  metrics::Counter* generation_tokens = nullptr;
  // [FinishReason]: stop, length, eos, abort (index UNSPECIFIED aliases abort).
  std::array<metrics::Counter*, 5> finished_samples{};
  metrics::Histogram* time_to_first_token_seconds = nullptr;
  metrics::Histogram* inter_token_latency_seconds = nullptr;
  // Observes into inter_token_latency_seconds per token without atomics; the loop flushes it once
  // per step result.
  metrics::HistogramBuffer inter_token_latency;
  metrics::Histogram* e2e_request_latency_seconds = nullptr;
  metrics::Histogram* request_queue_time_seconds = nullptr;
  metrics::Histogram* request_prefill_time_seconds = nullptr;
  metrics::Histogram* request_decode_time_seconds = nullptr;
  metrics::Histogram* request_prompt_tokens = nullptr;
  metrics::Histogram* request_generation_tokens = nullptr;
  std::vector<Worker> workers;  // of worker_addresses

 private:
  std::string model_;
  metrics::HistogramFamily* step_time_ = nullptr;
  metrics::HistogramFamily* batch_size_ = nullptr;
  metrics::HistogramFamily* iteration_tokens_ = nullptr;
};

}  // namespace astr::sched
