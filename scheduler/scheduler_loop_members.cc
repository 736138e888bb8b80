// The loop's worker pool membership: workers that join a running scheduler (AddWorker), and
// workers that are drained and leave it (DrainWorker, a worker's own SIGTERM, a weight commit
// they missed). See docs/deploy.md "Scaling workers".
#include <algorithm>
#include <string>

#include "common/base/clock.h"
#include "common/base/logging.h"
#include "scheduler/scheduler_loop.h"

namespace astr::sched {

// ---- Client-thread side: Scheduler's calls (scheduler.h).

Status Scheduler::AddWorker(std::unique_ptr<WorkerConnection> worker) {
  if (worker == nullptr) return InvalidArgumentError("AddWorker: no connection");
  auto op = std::make_shared<SchedulerLoop::AddWorkerOp>();
  op->conn = std::move(worker);
  loop_->Call(op);
  return op->status;
}

StatusOr<DrainResult> Scheduler::DrainWorker(const std::string& address,
                                             std::chrono::milliseconds timeout, bool wait,
                                             Clock::time_point wait_deadline, bool exclude) {
  if (timeout.count() < 0) return InvalidArgumentError("timeout_s: must be >= 0");
  auto op = std::make_shared<SchedulerLoop::DrainWorkerOp>();
  op->address = address;
  op->timeout = timeout.count() > 0
                    ? timeout
                    : std::chrono::milliseconds(loop_->options_.worker_drain_timeout_ms);
  op->exclude = exclude;
  op->wait = wait;
  if (!loop_->Call(op, wait ? wait_deadline : Clock::time_point::max())) {
    return Status(StatusCode::kDeadlineExceeded,
                  "worker " + address + " is still draining (it goes on)");
  }
  if (!op->status.ok()) return op->status;
  return op->result;
}

void Scheduler::Readmit(const std::string& address) { loop_->pool_.Readmit(address); }

bool Scheduler::Excluded(const std::string& address) const {
  return loop_->pool_.Excluded(address);
}

std::vector<WorkerMember> Scheduler::Members() const { return loop_->pool_.Members(); }

// ---- Loop side.

void SchedulerLoop::ApplyAddWorker(AddWorkerOp* op, Clock::time_point now) {
  const std::string address = op->conn->address();
  StatusOr<WorkerSlot*> joined =
      pool_.Join(std::move(op->conn), {content_hash_, model_path_, admin_.version()});
  if (!joined.ok()) {
    // The caller logs it (WorkerMembership: once per reason, not at every retry).
    VLOG(1) << "worker " << address << " not added: " << joined.status().message();
    op->status = joined.status();
    op->Finish();
    return;
  }
  WorkerSlot* w = *joined;
  w->metrics = metrics_->ForWorker(address);
  w->planner.set_hold_new_requests(admin_.holds_new_requests());
  if (options_.fair_share) w->planner.set_fair_share(&fair_);
  PublishStats();
  const v1::InfoResponse& info = w->info;
  LOG(INFO) << "worker " << address << " joined: " << info.model_name() << " (hash "
            << info.content_hash() << ", weight version " << info.weight_version()
            << "), backend " << info.backend() << ", " << info.num_pages() << " pages of "
            << info.page_size() << " tokens, max batch " << info.max_batch();
  progressed_ = true;
  op->Finish();
  (void)now;
}

void SchedulerLoop::ApplyDrainWorker(const std::shared_ptr<DrainWorkerOp>& op,
                                     Clock::time_point now) {
  WorkerSlot* w = pool_.Find(op->address);
  if (w == nullptr) {
    op->status = NotFoundError("address: no worker " + op->address + " in the pool");
    op->Finish();
    return;
  }
  if (op->exclude) pool_.Exclude(op->address);
  op->result.address = op->address;
  StartDraining(w, op->exclude ? "DrainWorker" : "its address left the --workers name",
                op->timeout, now);
  if (op->wait) {
    worker_drain_waiters_.push_back(op);
  } else {
    op->Finish();
  }
  AdvanceDrains(now);  // a worker that holds nothing, or is down, leaves at once
}

void SchedulerLoop::StartDraining(WorkerSlot* w, std::string reason,
                                  std::chrono::milliseconds timeout, Clock::time_point now) {
  if (w->health == WorkerSlot::Health::kRemoved) return;
  if (w->draining) {
    w->drain_deadline = std::min(w->drain_deadline, now + timeout);
    return;
  }
  w->draining = true;
  w->stat_draining.store(true, std::memory_order_relaxed);
  w->drain_started = now;
  w->drain_deadline = now + timeout;
  w->drain_reason = std::move(reason);
  w->drain_finished = 0;
  w->drain_moved = MoveWaiting(w, /*keep_unplaceable=*/true, now);
  LOG(INFO) << "worker " << w->address << ": draining (" << w->drain_reason << "): "
            << w->queues.running.size() << " running sequences may finish there for up to "
            << timeout.count() / 1000 << " s; " << w->drain_moved << " waiting ones moved";
}

void SchedulerLoop::AdvanceDrains(Clock::time_point now) {
  for (auto& slot : pool_.slots()) {
    WorkerSlot* w = slot.get();
    if (w->health == WorkerSlot::Health::kRemoved) {
      pool_.CloseRemovedConnection(w);
      continue;
    }
    if (!w->draining) continue;
    if (w->health != WorkerSlot::Health::kUp) {
      // It broke (or was down) while draining: nothing will finish there.
      w->drain_moved += MoveWaiting(w, /*keep_unplaceable=*/false, now);
      RemoveWorker(w, now);
      continue;
    }
    // A worker may have joined since.
    w->drain_moved += MoveWaiting(w, /*keep_unplaceable=*/true, now);
    if (now >= w->drain_deadline && !w->queues.running.empty()) {
      const int64_t running = static_cast<int64_t>(w->queues.running.size());
      LOG(WARNING) << "worker " << w->address << ": drain timeout: " << running
                   << " running sequences restart on the other workers";
      // As after a broken stream: they restart from prompt + generated tokens (same RNG
      // counters); the plans in flight are dropped with the stream (RemoveWorker).
      w->queues.ResetStream();
      stat_preemptions_.fetch_add(running, std::memory_order_relaxed);
      w->drain_moved += MoveWaiting(w, /*keep_unplaceable=*/false, now);
      RemoveWorker(w, now);
      continue;
    }
    if (w->queues.running.empty() && w->queues.waiting.empty() && w->in_flight() == 0) {
      RemoveWorker(w, now);
    }
  }
}

void SchedulerLoop::RemoveWorker(WorkerSlot* w, Clock::time_point now) {
  pool_.Remove(w);
  const int64_t drain_ns = Nanos(now - w->drain_started);
  LOG(INFO) << "worker " << w->address << " left the pool (" << w->drain_reason << "): "
            << w->drain_finished << " sequences finished there, " << w->drain_moved
            << " moved, drained in " << drain_ns / 1000000 << " ms";
  for (auto it = worker_drain_waiters_.begin(); it != worker_drain_waiters_.end();) {
    if ((*it)->address != w->address) {
      ++it;
      continue;
    }
    (*it)->result.finished = w->drain_finished;
    (*it)->result.moved = w->drain_moved;
    (*it)->result.drain_ns = Nanos(now - (*it)->requested);
    (*it)->Finish();
    it = worker_drain_waiters_.erase(it);
  }
  PublishStats();
}

}  // namespace astr::sched
