// Scheduler: creation and validation of the options and workers; every call goes to its
// SchedulerLoop.
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

StatusOr<std::shared_ptr<RequestChannel>> Scheduler::Submit(SchedRequest request) {
  return loop_->Submit(std::move(request));
}
void Scheduler::Cancel(uint64_t key, Status why) { loop_->Cancel(key, std::move(why)); }
void Scheduler::Hold(uint64_t key, bool hold) { loop_->Hold(key, hold); }

void Scheduler::FinishSample(uint64_t key, int32_t index, int32_t kept_tokens) {
  loop_->FinishSample(key, index, kept_tokens);
}
void Scheduler::StartDrain() { loop_->StartDrain(); }
bool Scheduler::draining() const { return loop_->draining(); }
bool Scheduler::Idle() const { return loop_->Idle(); }
v1::GetServerStatsResponse Scheduler::Stats() const { return loop_->Stats(); }
std::vector<v1::InfoResponse> Scheduler::WorkerInfos() const { return loop_->WorkerInfos(); }
metrics::Registry& Scheduler::metrics() { return loop_->metrics(); }
std::string Scheduler::RenderMetrics() const { return loop_->metrics().Render(); }
void Scheduler::CountSampleOutput(v1::FinishReason reason, int64_t tokens) const {
  loop_->CountSampleOutput(reason, tokens);
}
void Scheduler::ObserveRequestOutput(int64_t tokens) const { loop_->ObserveRequestOutput(tokens); }
StatusOr<PauseResult> Scheduler::Pause(PauseMode mode, Clock::time_point deadline) {
  return loop_->Pause(mode, deadline);
}
ResumeResult Scheduler::Resume() { return loop_->Resume(); }
StatusOr<CommitResult> Scheduler::CommitWeights(std::function<Status(int64_t)> apply,
                                                std::string label) {
  return loop_->CommitWeights(std::move(apply), std::move(label));
}
StatusOr<CommitResult> Scheduler::CommitWeights(std::function<Status(int64_t)> apply,
                                                std::string label,
                                                std::vector<std::string> workers) {
  return loop_->CommitWeights(std::move(apply), std::move(label), std::move(workers));
}
WeightVersionInfo Scheduler::weight_version() const { return loop_->weight_version(); }
Status Scheduler::AddWorker(std::unique_ptr<WorkerConnection> worker) {
  return loop_->AddWorker(std::move(worker));
}
StatusOr<DrainResult> Scheduler::DrainWorker(const std::string& address,
                                             std::chrono::milliseconds timeout, bool wait,
                                             Clock::time_point wait_deadline, bool exclude) {
  return loop_->DrainWorker(address, timeout, wait, wait_deadline, exclude);
}
void Scheduler::Readmit(const std::string& address) { loop_->Readmit(address); }
bool Scheduler::Excluded(const std::string& address) const { return loop_->Excluded(address); }
std::vector<WorkerMember> Scheduler::Members() const { return loop_->Members(); }
int64_t Scheduler::FlushCache() { return loop_->FlushCache(); }
std::vector<std::string> Scheduler::UpWorkerAddresses() const {
  return loop_->UpWorkerAddresses();
}

}  // namespace astr::sched
