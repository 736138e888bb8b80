#include "scheduler/admin_controller.h"

#include <algorithm>
#include <chrono>

#include "common/base/clock.h"
#include "common/base/logging.h"

namespace astr::sched {
namespace {

const char* PauseModeName(PauseMode mode) {
  switch (mode) {
    case PauseMode::kNone:
      return "none";
    case PauseMode::kAbort:
      return "abort";
    case PauseMode::kDrain:
      return "drain";
    case PauseMode::kKeep:
      return "keep";
  }
  return "?";
}

int64_t UnixNanosNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void Waitable::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu);
    finished = true;
  }
  cv.notify_all();
}

bool Waitable::Wait(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu);
  return cv.wait_until(lock, deadline, [this] { return finished; });
}

void PauseOp::Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
                    Clock::time_point now) {
  admin.Pause(std::static_pointer_cast<PauseOp>(self), now);
}

void ResumeOp::Apply(AdminController& admin, const std::shared_ptr<AdminOp>&,
                     Clock::time_point now) {
  admin.Resume(this, now);
}

void CommitOp::Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
                     Clock::time_point) {
  admin.Commit(std::static_pointer_cast<CommitOp>(self));
}

void FlushCacheOp::Apply(AdminController& admin, const std::shared_ptr<AdminOp>&,
                         Clock::time_point) {
  admin.FlushCache(this);
}

void AbortRequestsOp::Apply(AdminController& admin, const std::shared_ptr<AdminOp>&,
                            Clock::time_point now) {
  admin.AbortRequests(this, now);
}

AdminController::AdminController(AdminHost* host, int64_t weight_version) : host_(host) {
  version_.store(weight_version, std::memory_order_relaxed);
}

WeightVersionInfo AdminController::Info() const {
  WeightVersionInfo info;
  info.version = version_.load(std::memory_order_acquire);
  info.committed_unix_ns = committed_unix_ns_.load(std::memory_order_relaxed);
  info.paused = static_cast<PauseMode>(stat_pause_mode_.load(std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(label_mu_);
  info.label = label_;
  return info;
}

bool AdminController::HoldsSteps() const {
  return pending_commit_ != nullptr || pause_mode_ == PauseMode::kAbort ||
         pause_mode_ == PauseMode::kKeep;
}

void AdminController::FlushCache(FlushCacheOp* op) {
  for (auto& w : host_->workers().slots()) op->pages_freed += w->queues.FlushCache();
  LOG(INFO) << "prefix cache flushed: " << op->pages_freed << " pages freed";
  op->Finish();
}

void AdminController::AbortRequests(AbortRequestsOp* op, Clock::time_point now) {
  for (RequestState* r : host_->OpenRequests()) {
    if (!op->all && r->req.request_id != op->request_id) continue;
    host_->AbortRequest(r, now);
    ++op->aborted;
  }
  op->Finish();
}

void AdminController::Commit(const std::shared_ptr<CommitOp>& op) {
  if (pending_commit_ != nullptr) {
    op->status = AbortedError("another weight commit is pending");
    op->Finish();
    return;
  }
  pending_commit_ = op;  // Advance runs it at the next step boundary
}

void AdminController::Pause(const std::shared_ptr<PauseOp>& op, Clock::time_point now) {
  const std::vector<RequestState*> started = host_->StartedRequests();
  PauseResult& result = op->result;
  result.mode = op->mode;
  if (pause_mode_ == PauseMode::kNone) paused_since_ = now;
  pause_mode_ = op->mode;
  stat_pause_mode_.store(static_cast<int>(op->mode), std::memory_order_relaxed);
  for (auto& w : host_->workers().slots())
    w->planner.set_hold_new_requests(op->mode == PauseMode::kDrain);
  switch (op->mode) {
    case PauseMode::kAbort:
      for (RequestState* r : started) {
        result.request_ids.push_back(r->req.request_id);
        host_->AbortRequest(r, now);
      }
      result.aborted = static_cast<int32_t>(started.size());
      break;
    case PauseMode::kKeep:
      for (RequestState* r : started) result.request_ids.push_back(r->req.request_id);
      result.frozen = static_cast<int32_t>(started.size());
      break;
    case PauseMode::kDrain:
      op->drain_target = static_cast<int32_t>(started.size());
      break;
    case PauseMode::kNone:
      break;
  }
  result.queued = host_->QueuedRequests();
  LOG(INFO) << "generation paused (" << PauseModeName(op->mode) << "): " << started.size()
            << " started requests "
            << (op->mode == PauseMode::kAbort  ? "aborted"
                : op->mode == PauseMode::kKeep ? "frozen"
                                               : "finishing")
            << ", " << result.queued << " queued";
  if (op->mode != PauseMode::kDrain || started.empty()) {
    op->Finish();
  } else {
    drain_waiters_.push_back(op);  // AdvanceAdmin answers once they finished
  }
}

void AdminController::Resume(ResumeOp* op, Clock::time_point now) {
  op->result.was_paused = pause_mode_ != PauseMode::kNone;
  if (op->result.was_paused) op->result.paused_ns = Nanos(now - paused_since_);
  pause_mode_ = PauseMode::kNone;
  stat_pause_mode_.store(0, std::memory_order_relaxed);
  for (auto& w : host_->workers().slots()) w->planner.set_hold_new_requests(false);
  for (auto& waiter : drain_waiters_) {
    waiter->status = AbortedError("Resume was called before the running requests drained");
    waiter->Finish();
  }
  drain_waiters_.clear();
  if (op->result.was_paused) {
    LOG(INFO) << "generation resumed after " << op->result.paused_ns / 1000000 << " ms";
  }
  op->Finish();
}

bool AdminController::Advance(Clock::time_point now) {
  if (!drain_waiters_.empty() && host_->StartedRequests().empty()) {
    for (auto& waiter : drain_waiters_) {
      waiter->result.drained = waiter->drain_target;
      waiter->Finish();
    }
    drain_waiters_.clear();
  }
  if (pending_commit_ == nullptr) return false;
  for (const auto& w : host_->workers().slots()) {
    if (w->in_flight() > 0) return false;  // the boundary comes with the last answer
  }
  std::shared_ptr<CommitOp> op = std::move(pending_commit_);
  pending_commit_.reset();
  const int64_t version = version_.load(std::memory_order_relaxed) + 1;
  op->status = op->apply(version);
  if (op->status.ok()) {
    CommitResult& result = op->result;
    result.version = version;
    // KV computed under the old weights is recomputed unless the request asked to reuse it.
    for (auto& w : host_->workers().slots()) {
      std::vector<Sequence*>& running = w->queues.running;
      for (size_t i = running.size(); i-- > 0;) {
        if (running[i]->request->req.reuse_kv_on_weight_update) {
          ++result.reused;
        } else {
          w->queues.Requeue(i, /*count_preemption=*/false);
          ++result.recomputed;
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(label_mu_);
      label_ = op->label;
    }
    committed_unix_ns_.store(UnixNanosNow(), std::memory_order_relaxed);
    version_.store(version, std::memory_order_release);
    // Cached K/V of the old weights is of no use to anyone now (it is keyed by version anyway).
    for (auto& w : host_->workers().slots()) {
      w->queues.FlushCache();
      w->queues.cache_version = version;
    }
    result.commit_ns = Nanos(Clock::now() - op->requested);
    LOG(INFO) << "weights: version " << version << (op->label.empty() ? "" : " (" + op->label + ")")
              << " serving; " << result.recomputed << " running sequences recompute, "
              << result.reused << " keep their KV";
    // A member the update did not reach (it joined while the update was staged) serves the old
    // weights: it leaves at once and its sequences restart on the others.
    if (op->updated_workers) {
      const std::vector<std::string>& updated = *op->updated_workers;
      for (auto& w : host_->workers().slots()) {
        if (w->health == WorkerSlot::Health::kRemoved ||
            std::find(updated.begin(), updated.end(), w->address) != updated.end()) {
          continue;
        }
        LOG(WARNING) << "worker " << w->address << " joined during the update to version "
                     << version << " and serves version " << version - 1 << ": dropped";
        host_->DropWorker(w.get(), "it missed the update to version " + std::to_string(version),
                          now);
      }
    }
  }
  op->Finish();
  return true;  // plans may go out again
}

}  // namespace astr::sched
