#include "worker/service/worker_metrics.h"

namespace astr {

WorkerMetrics::WorkerMetrics(metrics::Registry* registry, const v1::InfoResponse& info,
                             const WorkerExecutor* executor) {
  metrics::Registry& r = *registry;
  const std::string& model = info.model_name();
  const std::vector<double> seconds = metrics::ExponentialBuckets(0.0005, 2, 16);  // to 16 s
  step_time_seconds_ =
      &r.AddHistogram("astr:worker_step_time_seconds",
                      "From receiving a plan to sending its result, per executed step, seconds.",
                      {"model"}, seconds)
           .WithLabels({model});
  forward_time_seconds_ =
      &r.AddHistogram("astr:worker_forward_time_seconds",
                      "The backend's forward pass of one step (sampling excluded), per step that "
                      "computed something, seconds.",
                      {"model"}, seconds)
           .WithLabels({model});
  tokens_per_step_ =
      &r.AddHistogram("astr:worker_tokens_per_step", "Tokens (rows) computed in one executed step.",
                      {"model"}, metrics::ExponentialBuckets(1, 2, 15))
           .WithLabels({model});
  batch_size_ =
      &r.AddHistogram("astr:worker_batch_size", "Sequences (plan entries) in one executed step.",
                      {"model"}, metrics::ExponentialBuckets(1, 2, 11))
           .WithLabels({model});
  r.AddCallbackCounter("astr:worker_steps_total", "Plans executed (refused ones not counted).",
                       {"model"})
      .Add({model}, [executor] { return static_cast<double>(executor->counters().steps); });
  r.AddCallbackGauge("astr:worker_kv_pages_used", "KV pages referenced by live sequences.",
                     {"model"})
      .Add({model}, [executor] { return static_cast<double>(executor->counters().pages_in_use); });
  const double pages = static_cast<double>(info.num_pages());
  r.AddCallbackGauge("astr:worker_kv_pages_total", "KV pages in the pool.", {"model"})
      .Add({model}, [pages] { return pages; });
  r.AddCallbackGauge("astr:worker_weight_version",
                     "Weight version the steps compute with (0: the weights loaded at start).",
                     {"model"})
      .Add({model}, [executor] { return static_cast<double>(executor->weight_version()); });
}

void WorkerMetrics::ObserveStep(const v1::StepPlan& plan, const v1::StepResult& result) {
  int64_t tokens = 0;
  for (const v1::StepEntry& e : plan.entries()) tokens += e.num_tokens();
  step_time_seconds_->Observe(static_cast<double>(result.step_ns()) * 1e-9);
  if (plan.entries_size() > 0) {
    forward_time_seconds_->Observe(static_cast<double>(result.forward_ns()) * 1e-9);
  }
  tokens_per_step_->Observe(static_cast<double>(tokens));
  batch_size_->Observe(plan.entries_size());
}

}  // namespace astr
