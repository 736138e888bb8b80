// Scheduler: creation and validation of the options and workers. Its other calls are defined
// beside the loop code they talk to (scheduler_loop_client.cc, _admin.cc, _members.cc).
#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

#include "scheduler/scheduler_loop.h"
#include "scheduler/worker_fit.h"

namespace astr::sched {
namespace {

Status CheckPositive(int64_t value, const char* flag) {
  if (value >= 1) return OkStatus();
  return InvalidArgumentError(std::string("--") + flag + " must be >= 1, got " +
                              std::to_string(value));
}

Status ValidateSetup(const SchedulerOptions& o,
                     const std::vector<std::unique_ptr<WorkerConnection>>& workers) {
  ASTR_RETURN_IF_ERROR(ValidateSchedulerOptions(o));
  if (workers.empty()) return InvalidArgumentError("--workers: at least one worker is needed");
  // The first worker defines the pool; every one (the first included: its KV pool) must fit it.
  const PoolIdentity pool = PoolOf(workers[0]->info());
  for (const auto& w : workers) {
    Status fits = CheckWorkerFits(w->address(), w->info(), pool);
    if (!fits.ok())
      return fits.WithContext("--workers (the first one, " + workers[0]->address() +
                              ", defines the pool)");
  }
  return OkStatus();
}

}  // namespace

Status ValidateSchedulerOptions(const SchedulerOptions& o) {
  ASTR_RETURN_IF_ERROR(CheckPositive(o.max_batch_tokens, "max-batch-tokens"));
  ASTR_RETURN_IF_ERROR(CheckPositive(o.max_running, "max-running"));
  ASTR_RETURN_IF_ERROR(CheckPositive(o.prefill_chunk, "prefill-chunk"));
  ASTR_RETURN_IF_ERROR(CheckPositive(o.max_queued_requests, "max-queued-requests"));
  ASTR_RETURN_IF_ERROR(CheckPositive(o.max_queued_tokens, "max-queued-tokens"));
  if (o.worker_down_after_ms < 0) {
    return InvalidArgumentError("--worker-down-after-ms must be >= 0, got " +
                                std::to_string(o.worker_down_after_ms));
  }
  ASTR_RETURN_IF_ERROR(CheckPositive(o.reconnect_attempt_ms, "reconnect-attempt-ms"));
  if (o.worker_drain_timeout_ms < 0) {
    return InvalidArgumentError("--worker-drain-timeout-s must be >= 0, got " +
                                std::to_string(o.worker_drain_timeout_ms / 1000));
  }
  if (o.max_worker_failures < 0) {
    return InvalidArgumentError("--max-worker-failures must be >= 0, got " +
                                std::to_string(o.max_worker_failures));
  }
  if (o.max_step_ms < -1) {
    return InvalidArgumentError("--max-step-ms must be >= -1 (-1 unbounded, 0 auto), got " +
                                std::to_string(o.max_step_ms));
  }
  if (o.cache_route_slack < 0) {
    return InvalidArgumentError("--cache-route-slack must be >= 0, got " +
                                std::to_string(o.cache_route_slack));
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Scheduler

Scheduler::Scheduler(std::unique_ptr<SchedulerLoop> loop) : loop_(std::move(loop)) {}
Scheduler::~Scheduler() = default;

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    SchedulerOptions options, std::vector<std::unique_ptr<WorkerConnection>> workers) {
  ASTR_RETURN_IF_ERROR(ValidateSetup(options, workers));
  auto loop = std::make_unique<SchedulerLoop>(options, std::move(workers));
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(loop)));
}

bool Scheduler::draining() const { return loop_->draining_.load(); }
bool Scheduler::Idle() const { return loop_->open_requests_.load(std::memory_order_acquire) == 0; }
metrics::Registry& Scheduler::metrics() { return loop_->registry_; }
std::string Scheduler::RenderMetrics() const { return loop_->registry_.Render(); }

}  // namespace astr::sched
