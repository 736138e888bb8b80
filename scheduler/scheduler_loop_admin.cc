// Scheduler's admin calls (docs/rl.md): pausing generation in one of three modes, resuming,
// committing new weights at a step boundary of every worker, flushing the prefix cache. Each is a
// typed op the loop hands to its AdminController (admin_controller.h); the loop's side here is
// what the controller asks of it (AdminHost).
#include <algorithm>

#include "scheduler/scheduler_loop.h"

namespace astr::sched {

// ---- Client-thread side: Scheduler's calls (scheduler.h).

StatusOr<PauseResult> Scheduler::Pause(PauseMode mode, Clock::time_point deadline) {
  if (mode == PauseMode::kNone) return InvalidArgumentError("mode: expected abort, drain or keep");
  auto op = std::make_shared<PauseOp>();
  op->mode = mode;
  if (!RunAdmin(op, deadline)) {
    return Status(StatusCode::kDeadlineExceeded,
                  "deadline passed while running requests drained; generation stays paused "
                  "(drain mode) until Resume");
  }
  if (!op->status.ok()) return op->status;
  return op->result;
}

ResumeResult Scheduler::Resume() {
  auto op = std::make_shared<ResumeOp>();
  RunAdmin(op);
  return op->result;
}

StatusOr<CommitResult> Scheduler::CommitWeights(std::function<Status(int64_t)> apply,
                                                std::string label) {
  return CommitWeights(std::move(apply), std::move(label), {});
}

StatusOr<CommitResult> Scheduler::CommitWeights(std::function<Status(int64_t)> apply,
                                                std::string label,
                                                std::vector<std::string> workers) {
  std::lock_guard<std::mutex> one(loop_->admin_.commit_mutex());
  auto op = std::make_shared<CommitOp>();
  op->apply = std::move(apply);
  op->label = std::move(label);
  if (!workers.empty()) op->updated_workers = std::move(workers);
  RunAdmin(op);
  if (!op->status.ok()) return op->status;
  return op->result;
}

int64_t Scheduler::FlushCache() {
  auto op = std::make_shared<FlushCacheOp>();
  RunAdmin(op);
  return op->pages_freed;
}

WeightVersionInfo Scheduler::weight_version() const { return loop_->admin_.Info(); }

bool Scheduler::RunAdmin(std::shared_ptr<AdminOp> op, Clock::time_point deadline) {
  return loop_->Call(op, deadline);
}

std::vector<std::string> Scheduler::UpWorkerAddresses() const {
  std::vector<std::string> out;
  for (const WorkerMember& m : Members()) {
    if (m.up) out.push_back(m.address);
  }
  return out;
}

// ---- Loop side: AdminHost.

namespace {

std::vector<RequestState*> ByArrival(std::vector<RequestState*> requests) {
  std::sort(requests.begin(), requests.end(),
            [](const RequestState* a, const RequestState* b) { return a->key < b->key; });
  return requests;
}

}  // namespace

std::vector<RequestState*> SchedulerLoop::StartedRequests() const {
  std::vector<RequestState*> out;
  for (const auto& [key, r] : requests_) {
    if (r->scheduled && !r->closed) out.push_back(r.get());
  }
  return ByArrival(std::move(out));
}

std::vector<RequestState*> SchedulerLoop::OpenRequests() const {
  std::vector<RequestState*> out;
  for (const auto& [key, r] : requests_) {
    if (!r->closed) out.push_back(r.get());
  }
  return ByArrival(std::move(out));
}

int32_t SchedulerLoop::QueuedRequests() const {
  int32_t queued = 0;
  for (const auto& [key, r] : requests_) {
    if (!r->scheduled && !r->closed) ++queued;
  }
  return queued;
}

void SchedulerLoop::AbortRequest(RequestState* request, Clock::time_point now) {
  for (auto& seq : request->samples) {
    if (seq->state != Sequence::State::kDone && !request->closed) {
      FinishSequence(seq.get(), v1::FINISH_REASON_ABORT, -1, now);
    }
  }
}

void SchedulerLoop::DropWorker(WorkerSlot* w, const std::string& reason, Clock::time_point now) {
  StartDraining(w, reason, std::chrono::milliseconds(0), now);
  AdvanceDrains(now);
}

}  // namespace astr::sched
