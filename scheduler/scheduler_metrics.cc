#include "scheduler/scheduler_metrics.h"

namespace astr::sched {
namespace {

// vLLM's bounds, with finer ones below 10 ms: a small model (or a fast GPU) decodes in a few ms.
const std::vector<double>& TimeToFirstTokenBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                        0.25,  0.5,   0.75, 1,    2.5,  5,    7.5,  10,
                                        20,    40,    80,   160,  640,  2560};
  return b;
}
const std::vector<double>& InterTokenBuckets() {
  static const std::vector<double> b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                        0.15,  0.2,    0.3,   0.4,  0.5,   0.75, 1,     2.5,
                                        5,     7.5,    10,    20,   40,    80};
  return b;
}
// Request phases (queue, prefill, decode, end to end): vLLM's, from 5 ms.
const std::vector<double>& RequestSecondsBuckets() {
  static const std::vector<double> b = {0.005, 0.01, 0.025, 0.05, 0.1, 0.3, 0.5,  0.8, 1,
                                        1.5,   2,    2.5,   5,    10,  15,  20,   30,  40,
                                        50,    60,   120,   240,  480, 960, 1920, 7680};
  return b;
}

}  // namespace

SchedulerMetrics::SchedulerMetrics(metrics::Registry* registry, const std::string& model,
                                   const std::vector<std::string>& worker_addresses,
                                   int32_t max_context_tokens)
    : model_(model) {
  metrics::Registry& r = *registry;
  prompt_tokens = &r.AddCounter("astr:prompt_tokens_total",
                                "Prompt tokens of the requests that produced a first token "
                                "(counted once per request, when its first token arrives).",
                                {"model"})
                       .WithLabels({model});
  generation_tokens =
      &r.AddCounter("astr:generation_tokens_total",
                    "Tokens generated and accepted by the scheduler, every sample counted.",
                    {"model"})
           .WithLabels({model});
  metrics::CounterFamily& success = r.AddCounter(
      "astr:request_success_total",
      "Samples that ended, by reason: stop (stop string or stop token id), length (max_tokens or "
      "the context), eos (an end-of-sequence token), abort (cancelled, deadline, pause in abort "
      "mode, worker failures, shutdown).",
      {"model", "finished_reason"});
  finished_samples[v1::FINISH_REASON_STOP] = &success.WithLabels({model, "stop"});
  finished_samples[v1::FINISH_REASON_LENGTH] = &success.WithLabels({model, "length"});
  finished_samples[v1::FINISH_REASON_EOS] = &success.WithLabels({model, "eos"});
  finished_samples[v1::FINISH_REASON_ABORT] = &success.WithLabels({model, "abort"});
  finished_samples[v1::FINISH_REASON_UNSPECIFIED] = finished_samples[v1::FINISH_REASON_ABORT];

  auto histogram = [&](const char* name, const char* help, const std::vector<double>& bounds) {
    return &r.AddHistogram(name, help, {"model"}, bounds).WithLabels({model});
  };
  time_to_first_token_seconds = histogram(
      "astr:time_to_first_token_seconds",
      "From a request's arrival to its first generated token, seconds.", TimeToFirstTokenBuckets());
  inter_token_latency_seconds = histogram(
      "astr:inter_token_latency_seconds",
      "Between two consecutive tokens of one sample, as the scheduler loop accepts them, seconds.",
      InterTokenBuckets());
  inter_token_latency = metrics::HistogramBuffer(inter_token_latency_seconds);
  e2e_request_latency_seconds =
      histogram("astr:e2e_request_latency_seconds",
                "From a started request's arrival to its end, seconds.", RequestSecondsBuckets());
  request_queue_time_seconds =
      histogram("astr:request_queue_time_seconds",
                "From a started request's arrival to its first sequence's start on a worker, "
                "seconds.",
                RequestSecondsBuckets());
  request_prefill_time_seconds =
      histogram("astr:request_prefill_time_seconds",
                "From a request's first start on a worker to its first token, seconds.",
                RequestSecondsBuckets());
  request_decode_time_seconds =
      histogram("astr:request_decode_time_seconds",
                "From a request's first token to its end, seconds.", RequestSecondsBuckets());
  const double max_tokens = max_context_tokens > 0 ? max_context_tokens : 1 << 20;
  request_prompt_tokens =
      histogram("astr:request_prompt_tokens", "Prompt tokens of each started request.",
                metrics::OneTwoFiveBuckets(max_tokens));
  request_generation_tokens =
      histogram("astr:request_generation_tokens",
                "Tokens generated for each started request, all its samples together.",
                metrics::OneTwoFiveBuckets(max_tokens));

  step_time_ = &r.AddHistogram(
      "astr:step_time_seconds",
      "The loop's wall time of one step of a worker: from planning to the result applied, "
      "seconds.",
      {"model", "worker"}, metrics::ExponentialBuckets(0.0005, 2, 16));
  batch_size_ =
      &r.AddHistogram("astr:batch_size", "Sequences (plan entries) in one step sent to a worker.",
                     {"model", "worker"}, metrics::ExponentialBuckets(1, 2, 11));
  iteration_tokens_ =
      &r.AddHistogram("astr:iteration_tokens",
                     "Tokens (prefill chunks and decode rows) in one step sent to a "
                     "worker.",
                     {"model", "worker"}, metrics::ExponentialBuckets(1, 2, 15));
  for (const std::string& address : worker_addresses) workers.push_back(ForWorker(address));
}

SchedulerMetrics::Worker SchedulerMetrics::ForWorker(const std::string& address) const {
  return {.step_time_seconds = &step_time_->WithLabels({model_, address}),
          .batch_size = &batch_size_->WithLabels({model_, address}),
          .iteration_tokens = &iteration_tokens_->WithLabels({model_, address})};
}

metrics::Counter& SchedulerMetrics::finished(v1::FinishReason reason) const {
  const int i = static_cast<int>(reason);
  return *finished_samples[i >= 0 && i < static_cast<int>(finished_samples.size())
                               ? i
                               : v1::FINISH_REASON_ABORT];
}

}  // namespace astr::sched
