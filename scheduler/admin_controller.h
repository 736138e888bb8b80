// The scheduler's admin state, on the loop thread (docs/rl.md, docs/scheduler.md "Pause and
// weight commits"): generation pauses (abort, drain, keep) and resume, the weight version served
// and its commits at a step boundary of every worker, and prefix-cache flushes. The loop hands it
// the admin calls as typed ops and asks it, each iteration, whether steps are held and what
// became due; what it does to requests and workers goes through AdminHost, which the loop
// implements. A new admin verb that needs the loop is one AdminOp here (with its method) and the
// front's handler, which runs it through Scheduler::RunAdmin.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "scheduler/scheduler.h"
#include "scheduler/sequence.h"
#include "scheduler/worker_pool.h"

namespace astr::sched {

// A call a client thread waits on until the loop answers it (Finish).
struct Waitable {
  Status status;
  Clock::time_point requested = Clock::now();
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  void Finish();
  // Waits until Finish; false when `deadline` passed first.
  bool Wait(Clock::time_point deadline);
};

class AdminController;

// An admin call: the loop applies it on its thread at the top of an iteration, through
// Scheduler::RunAdmin; the caller waits on it. A new verb that needs the loop is a new op here
// (with its controller method) and the front's handler: nothing else in the scheduler changes.
struct AdminOp : Waitable {
  virtual ~AdminOp() = default;
  // `self` is this op, for the calls that answer later (a drain pause, a commit).
  virtual void Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
                     Clock::time_point now) = 0;
};

struct PauseOp : AdminOp {
  PauseMode mode = PauseMode::kNone;
  int32_t drain_target = 0;  // kDrain: started requests at the pause
  PauseResult result;
  void Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
             Clock::time_point now) override;
};
struct ResumeOp : AdminOp {
  ResumeResult result;
  void Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
             Clock::time_point now) override;
};
struct CommitOp : AdminOp {
  std::function<Status(int64_t)> apply;
  std::string label;
  std::optional<std::vector<std::string>> updated_workers;  // those `apply` switched
  CommitResult result;
  void Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
             Clock::time_point now) override;
};
struct FlushCacheOp : AdminOp {
  int64_t pages_freed = 0;
  void Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
             Clock::time_point now) override;
};
// Ends the open requests (started or queued) whose request_id is `request_id`, or every open
// request when `all`, with finish reason ABORT (SGLang's /abort_request).
struct AbortRequestsOp : AdminOp {
  std::string request_id;
  bool all = false;
  int32_t aborted = 0;
  void Apply(AdminController& admin, const std::shared_ptr<AdminOp>& self,
             Clock::time_point now) override;
};

// What the controller needs from the loop (loop thread).
class AdminHost {
 public:
  virtual ~AdminHost() = default;
  // Requests that started and are not closed, in arrival order.
  virtual std::vector<RequestState*> StartedRequests() const = 0;
  // Requests admitted and not started yet.
  virtual int32_t QueuedRequests() const = 0;
  // Requests not closed, started or not, in arrival order.
  virtual std::vector<RequestState*> OpenRequests() const = 0;
  // Ends every open sample of `request` with finish reason ABORT (partial output kept).
  virtual void AbortRequest(RequestState* request, Clock::time_point now) = 0;
  // A member that missed a weight update leaves at once; its sequences restart on the others.
  virtual void DropWorker(WorkerSlot* w, const std::string& reason, Clock::time_point now) = 0;
  virtual WorkerPool& workers() = 0;
};

class AdminController {
 public:
  AdminController(AdminHost* host, int64_t weight_version);

  // --- Loop thread: the ops' Apply. ---
  void Pause(const std::shared_ptr<PauseOp>& op, Clock::time_point now);
  void Resume(ResumeOp* op, Clock::time_point now);
  // Queues the commit for the next step boundary (Advance); ABORTED while one is pending.
  void Commit(const std::shared_ptr<CommitOp>& op);
  void FlushCache(FlushCacheOp* op);
  void AbortRequests(AbortRequestsOp* op, Clock::time_point now);
  // After each iteration: answers Pause(kDrain) calls whose requests finished, and runs a
  // pending commit once no plan is in flight. True when a commit ran (plans may go out again).
  bool Advance(Clock::time_point now);
  // Whether planning stops for now: paused (abort / keep) or a commit waits for its boundary.
  bool HoldsSteps() const;
  // Paused in drain mode: only requests that already started are admitted (a joining worker's
  // planner is told too).
  bool holds_new_requests() const { return pause_mode_ == PauseMode::kDrain; }

  // --- Thread-safe. ---
  int64_t version() const { return version_.load(std::memory_order_acquire); }
  WeightVersionInfo Info() const;
  // Serializes Scheduler::CommitWeights calls (one commit at a time).
  std::mutex& commit_mutex() { return commit_mu_; }

 private:
  AdminHost* const host_;
  PauseMode pause_mode_ = PauseMode::kNone;
  Clock::time_point paused_since_{};
  std::shared_ptr<CommitOp> pending_commit_;             // waits for a step boundary
  std::vector<std::shared_ptr<PauseOp>> drain_waiters_;  // Pause(kDrain) calls waiting
  std::atomic<int64_t> version_{0};
  std::atomic<int64_t> committed_unix_ns_{0};
  std::atomic<int> stat_pause_mode_{0};  // PauseMode, for Info()
  mutable std::mutex label_mu_;
  std::string label_;  // label_mu_
  std::mutex commit_mu_;
};

}  // namespace astr::sched
