// The worker's Prometheus metrics (docs/metrics.md): per executed step its time, forward time,
// tokens and sequences (histograms the step stream's thread observes), and, read at render time,
// steps, KV pages and the weight version from the executor's own counters. Every family has the
// label `model` (the model's name, as Info reports it).
#pragma once

#include <string>

#include "astr/v1/worker.pb.h"
#include "common/metrics/registry.h"
#include "worker/service/executor.h"

namespace astr {

class WorkerMetrics {
 public:
  // Registers the families on `registry`; the callbacks read `executor` and `info`'s pool size,
  // so both must outlive the registry's renders.
  WorkerMetrics(metrics::Registry* registry, const v1::InfoResponse& info,
                const WorkerExecutor* executor);

  // One plan the executor ran (not a refused one): `result` holds its timings.
  void ObserveStep(const v1::StepPlan& plan, const v1::StepResult& result);

 private:
  metrics::Histogram* step_time_seconds_;
  metrics::Histogram* forward_time_seconds_;
  metrics::Histogram* tokens_per_step_;
  metrics::Histogram* batch_size_;
};

}  // namespace astr
