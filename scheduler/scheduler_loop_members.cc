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

void Scheduler::Readmit(const std::string& address) {
  std::lock_guard<std::mutex> lock(loop_->mu_);
  loop_->excluded_.erase(address);
}

bool Scheduler::Excluded(const std::string& address) const {
  std::lock_guard<std::mutex> lock(loop_->mu_);
  return loop_->excluded_.count(address) > 0;
}

std::vector<WorkerMember> Scheduler::Members() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  std::vector<WorkerMember> out;
  std::lock_guard<std::mutex> lock(loop_->workers_mu_);
  for (const auto& w : loop_->workers_) {
    if (w->stat_removed.load(kRelaxed)) continue;
    out.push_back(WorkerMember{.address = w->address,
                               .info = w->info,
                               .up = w->stat_up.load(kRelaxed),
                               .draining = w->stat_draining.load(kRelaxed)});
  }
  return out;
}

// ---- Loop side.

void SchedulerLoop::ApplyAddWorker(AddWorkerOp* op, Clock::time_point now) {
  const v1::InfoResponse& info = op->conn->info();
  const std::string address = op->conn->address();
  const int64_t version = weight_version_.load(std::memory_order_relaxed);
  auto refuse = [&](Status status) {
    // The caller logs it (WorkerMembership: once per reason, not at every retry).
    VLOG(1) << "worker " << address << " not added: " << status.message();
    op->status = std::move(status);
    op->conn.reset();
    op->Finish();
  };
  bool excluded = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    excluded = excluded_.count(address) > 0;
  }
  if (excluded) {
    return refuse(FailedPreconditionError(
        "worker " + address +
        " was drained on purpose (DrainWorker) and is not added back while its address stays "
        "listed"));
  }
  for (const auto& w : workers_) {
    if (w->health != WorkerSlot::Health::kRemoved && w->address == address) {
      return refuse(Status(StatusCode::kAlreadyExists, "worker " + address + " is a member"));
    }
  }
  if (info.draining()) {
    return refuse(FailedPreconditionError("worker " + address + " is shutting down (draining)"));
  }
  if (Status fits = CheckWorkerFits(address, info, {content_hash_, model_path_, version});
      !fits.ok()) {
    return refuse(std::move(fits));
  }
  auto slot = std::make_unique<WorkerSlot>(std::move(op->conn), capacity_, options_);
  slot->metrics = metrics_->ForWorker(address);
  slot->planner.set_hold_new_requests(pause_mode_ == PauseMode::kDrain);
  if (options_.fair_share) slot->planner.set_fair_share(&fair_);
  WorkerSlot* w = slot.get();
  {
    // A removed slot whose connection is gone holds nothing: reuse its index.
    std::lock_guard<std::mutex> lock(workers_mu_);
    auto reusable = std::find_if(workers_.begin(), workers_.end(), [](const auto& s) {
      return s->health == WorkerSlot::Health::kRemoved && s->conn == nullptr;
    });
    if (reusable != workers_.end()) {
      *reusable = std::move(slot);
    } else {
      workers_.push_back(std::move(slot));
    }
  }
  AddWorkerStatMetrics(w);
  RecomputePoolLimits();
  PublishStats();
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
  WorkerSlot* w = nullptr;
  for (const auto& slot : workers_) {
    if (slot->health != WorkerSlot::Health::kRemoved && slot->address == op->address) {
      w = slot.get();
    }
  }
  if (w == nullptr) {
    op->status = NotFoundError("address: no worker " + op->address + " in the pool");
    op->Finish();
    return;
  }
  if (op->exclude) {
    std::lock_guard<std::mutex> lock(mu_);
    excluded_.insert(op->address);
  }
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
  for (auto& slot : workers_) {
    WorkerSlot* w = slot.get();
    if (w->health == WorkerSlot::Health::kRemoved) {
      CloseRemovedConnection(w);
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
  w->health = WorkerSlot::Health::kRemoved;
  w->draining = false;
  w->stop_reconnect.store(true, std::memory_order_release);
  w->results_received = w->plans_sent;
  w->receive_due = false;
  RemoveWorkerStatMetrics(w->address);
  w->stat_up.store(false, std::memory_order_relaxed);
  w->stat_draining.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    w->stat_removed.store(true, std::memory_order_relaxed);
  }
  // Closing the connection ends the step stream: the worker drops whatever is live there.
  CloseRemovedConnection(w);
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
  RecomputePoolLimits();
  PublishStats();
}

void SchedulerLoop::CloseRemovedConnection(WorkerSlot* w) {
  if (w->conn == nullptr || !w->reconnector_done.load(std::memory_order_acquire)) return;
  if (w->reconnector.joinable()) w->reconnector.join();
  std::lock_guard<std::mutex> lock(workers_mu_);  // Members() reads slots under it
  w->conn.reset();
}

void SchedulerLoop::RecomputePoolLimits() {
  int64_t pool = 0;
  int32_t context = 0;
  int64_t members = 0;
  for (const auto& w : workers_) {
    if (w->health == WorkerSlot::Health::kRemoved) continue;
    ++members;
    pool = std::max(pool, w->queues.pool.capacity_tokens());
    const int32_t c = w->info.max_context_tokens();
    if (c > 0 && (context == 0 || c < context)) context = c;
  }
  // With no member left, the last limits stay: Submit then refuses with "no worker is up".
  if (members == 0) {
    stat_members_.store(0, std::memory_order_relaxed);
    return;
  }
  max_pool_tokens_.store(pool, std::memory_order_relaxed);
  max_context_tokens_ = context;
  stat_members_.store(members, std::memory_order_relaxed);
}

}  // namespace astr::sched
