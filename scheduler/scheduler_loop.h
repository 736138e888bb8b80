// The scheduler's state and its loop thread (see the comment at the top of scheduler.h). Its
// public API is Scheduler's, declared once in scheduler.h and defined beside the loop code it
// talks to: scheduler_loop_client.cc (Submit, Cancel, FinishSample, Hold, StartDrain, Stats),
// scheduler_loop_admin.cc (Pause, Resume, CommitWeights, FlushCache) and
// scheduler_loop_members.cc (AddWorker, DrainWorker, Members).
//
// Threads:
//   client threads  Submit / Cancel / FinishSample / Stats: take `mu_` briefly to append a command
//                   (or read atomics); never touch loop-owned state.
//   loop thread     owns requests_, every WorkerSlot's queues, planner, plan and result protos.
//   output thread   (OutputQueue) pushes events into RequestChannels and closes them.
//   reconnectors    one per broken worker, only while it is broken; they call
//                   WorkerConnection::Reconnect and touch nothing else.
//
// Membership: the loop adds and drops workers (AddWorker, DrainWorker) at the top of an iteration;
// the slots, their reconnectors and the pool-wide limits are the WorkerPool's (worker_pool.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/metrics/registry.h"
#include "scheduler/admin_controller.h"
#include "scheduler/batch_planner.h"
#include "scheduler/output_queue.h"
#include "scheduler/policies.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/sequence.h"
#include "scheduler/worker_fit.h"
#include "scheduler/worker_pool.h"

namespace astr::sched {

class SchedulerLoop : private AdminHost {
 public:
  SchedulerLoop(SchedulerOptions options, std::vector<std::unique_ptr<WorkerConnection>> workers);
  ~SchedulerLoop();  // stops the threads; open requests close with UNAVAILABLE

  // The scheduler's public calls are Scheduler's (scheduler.h, declared there only): they run on
  // client threads and reach this state as the friend that holds the loop, through commands
  // (PushCommand) and the published atomics. Everything below is the loop's.
  friend class Scheduler;

 private:
  // The membership calls (scheduler_loop_members.cc); the admin ones are admin_controller.h's.
  struct AddWorkerOp : Waitable {
    std::unique_ptr<WorkerConnection> conn;
  };
  struct DrainWorkerOp : Waitable {
    std::string address;
    std::chrono::milliseconds timeout{0};
    bool exclude = false;
    bool wait = false;  // answer once the worker left
    DrainResult result;
  };
  // What client threads hand the loop, one typed struct per kind (applied in ApplyCommands).
  struct SubmitCommand {
    std::unique_ptr<RequestState> request;
  };
  struct CancelCommand {
    uint64_t key = 0;
    Status why;
  };
  struct FinishSampleCommand {
    uint64_t key = 0;
    int32_t index = 0;
    int32_t kept_tokens = -1;
  };
  struct HoldCommand {
    uint64_t key = 0;
    bool hold = false;
  };
  using Command = std::variant<SubmitCommand, CancelCommand, FinishSampleCommand, HoldCommand,
                               std::shared_ptr<AdminOp>, std::shared_ptr<AddWorkerOp>,
                               std::shared_ptr<DrainWorkerOp>>;
  void PushCommand(Command command);
  // Pushes an admin call and waits for the loop's answer until `deadline`; false when it passed.
  template <typename Op>
  bool Call(const std::shared_ptr<Op>& op, Clock::time_point deadline = Clock::time_point::max()) {
    PushCommand(op);
    return op->Wait(deadline);
  }

  // Loop thread (scheduler_loop.cc).
  void Run();
  bool WaitForWork();
  bool HasWork() const;
  Clock::time_point NextWake(Clock::time_point now) const;
  void ApplyCommands(Clock::time_point now);
  void AddRequest(std::unique_ptr<RequestState> request, Clock::time_point now);
  void ExpireDeadlines(Clock::time_point now);
  bool StepWorkers(Clock::time_point now);
  bool SendPlan(WorkerSlot* w, Clock::time_point now);
  void ReceiveResult(WorkerSlot* w, Clock::time_point started);
  void RecordOutcome(WorkerSlot* w, const PlanOutcome& out);
  Status ApplyResult(WorkerSlot* w, const PlanOutcome& out, Clock::time_point now);
  // The result's prompt scores (scheduler_loop_scores.cc): checked against the plan's scoring
  // entries (UNAVAILABLE, applying nothing, when they disagree), then delivered once each.
  Status ApplyPromptScores(const v1::StepResult& result, const PlanOutcome& out);
  void BuryClosed();
  void AcceptToken(Sequence* seq, const v1::SampledToken& token, int64_t weight_version,
                   Clock::time_point now);
  void FinishSequence(Sequence* seq, v1::FinishReason reason, int32_t stop_token_id,
                      Clock::time_point now);
  void EndSample(Sequence* seq, Clock::time_point now);
  void CloseRequest(RequestState* request, Status status, Clock::time_point now);
  // Holds or releases a request (Scheduler::Hold): held, its running sequences are preempted.
  void ApplyHold(RequestState* request, bool hold);
  void LeaveQueue(int64_t requests, int64_t tokens);
  void PublishStats();
  // Registers the gauges and counters that read the atomics Stats() reads (callback families).
  void RegisterStatMetrics(const std::string& model);
  // A request's histograms (metrics_), when it closes.
  void ObserveClosedRequest(const RequestState& r, Clock::time_point now);

  // The request a command names, when it is still open.
  RequestState* OpenRequest(uint64_t key);
  // After a result: the masks that follow the plan still in flight (StepEntry.mask_follows).
  Status SendLateMasks(WorkerSlot* w);
  // AdminHost (scheduler_loop_admin.cc): what the admin controller asks of the loop.
  std::vector<RequestState*> StartedRequests() const override;
  std::vector<RequestState*> OpenRequests() const override;
  int32_t QueuedRequests() const override;
  void AbortRequest(RequestState* request, Clock::time_point now) override;
  void DropWorker(WorkerSlot* w, const std::string& reason, Clock::time_point now) override;
  WorkerPool& workers() override { return pool_; }

  // Routing and worker failure (scheduler_loop_workers.cc).
  bool Place(Sequence* seq);
  // Leading tokens of `seq` that w's prefix cache holds (pending pages included: they are ready
  // by the time it starts there).
  int64_t CachedPrefixTokens(WorkerSlot* w, const Sequence* seq);
  void Unplace(Sequence* seq);
  void OnWorkerBroken(WorkerSlot* w, const Status& why, Clock::time_point now);
  void PollWorkers(Clock::time_point now);
  // Moves `w`'s waiting sequences (not live there: all of a down worker's, since ResetStream) to
  // the least-loaded placeable workers; returns how many moved. One that no worker can take
  // stays on `w` with `keep_unplaceable` (a draining worker may still start it), else its request
  // ends with UNAVAILABLE.
  int32_t MoveWaiting(WorkerSlot* w, bool keep_unplaceable, Clock::time_point now);
  void RecordStepTime(WorkerSlot* w, int64_t ns);

  // Membership, loop side (scheduler_loop_members.cc).
  void ApplyAddWorker(AddWorkerOp* op, Clock::time_point now);
  void ApplyDrainWorker(const std::shared_ptr<DrainWorkerOp>& op, Clock::time_point now);
  // Starts draining `w` (no-op when it is already); `timeout` bounds its running sequences.
  void StartDraining(WorkerSlot* w, std::string reason, std::chrono::milliseconds timeout,
                     Clock::time_point now);
  // Each iteration: draining workers past their deadline give up their running sequences; empty
  // ones are removed; removed ones whose reconnector ended are closed.
  void AdvanceDrains(Clock::time_point now);
  void RemoveWorker(WorkerSlot* w, Clock::time_point now);

  const SchedulerOptions options_;
  const AdmissionPolicy admission_;
  const Router router_;
  const StepCapacity capacity_;
  std::string model_name_;           // the first worker's, the `model` label of the metrics
  std::string content_hash_;         // every member serves this model
  std::string model_path_;           // the first worker's, for messages

  // Client threads <-> loop.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Command> commands_;
  // Admission's view, under mu_: a request counts from Submit until its first sequence starts (or
  // it ends unscheduled); the loop updates it in the same iteration.
  QueueCounters queue_;         // `draining` unused: each Submit reads draining_
  bool loop_sleeping_ = false;  // under mu_: only then does a command need a notify
  bool stop_ = false;
  uint64_t next_key_ = 1;

  std::atomic<int64_t> open_requests_{0};
  std::atomic<int64_t> stat_waiting_{0};
  std::atomic<int64_t> stat_running_{0};
  std::atomic<int64_t> stat_steps_{0};
  std::atomic<int64_t> stat_admitted_{0};
  std::atomic<int64_t> stat_refused_{0};
  std::atomic<int64_t> stat_finished_{0};
  std::atomic<int64_t> stat_preemptions_{0};
  std::atomic<int64_t> stat_held_{0};           // requests held now (their clients stopped reading)
  std::atomic<int64_t> stat_cache_queries_{0};  // prefix cache: tokens looked up, all workers
  std::atomic<int64_t> stat_cache_hits_{0};     // and found
  std::vector<uint32_t> mask_words_;  // SendLateMasks' scratch
  // Thread-safe; callback families in it read the stat_ atomics. metrics_ (set in the
  // constructor) holds the children the loop thread updates.
  metrics::Registry registry_;
  std::unique_ptr<SchedulerMetrics> metrics_;
  // The process's one draining flag: the admission policy, the stats and the front read it.
  std::atomic<bool> draining_{false};

  // The workers. Declared before the requests: sequences' page allocations point into the
  // workers' page pools, so requests must be destroyed first.
  WorkerPool pool_;
  // Pauses, the weight version and its commits, flushes.
  AdminController admin_;
  // DrainWorker calls waiting for their worker to leave.
  std::vector<std::shared_ptr<DrainWorkerOp>> worker_drain_waiters_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests_;
  std::vector<Command> applying_;  // commands being applied (swapped with commands_)
  std::vector<std::pair<Clock::time_point, uint64_t>> deadlines_;  // min-heap
  std::vector<uint64_t> closed_;  // requests closed this iteration, erased at its end
  // Closed requests whose sequences a plan in flight may still name (overlap): kept until every
  // plan sent before the close (step id < the tag) is answered.
  std::vector<std::pair<uint64_t, std::unique_ptr<RequestState>>> graveyard_;
  const int max_in_flight_;        // 2 with SchedulerOptions::overlap_steps, else 1
  std::vector<WorkerLoad> loads_;  // Place's scratch
  FairShare fair_;                 // every client's virtual token counter (options_.fair_share)
  std::vector<int32_t> route_pages_;  // CachedPrefixTokens's scratch
  uint64_t worker_breaks_ = 0;     // worker stream breaks so far (counts each request once each)
  std::vector<RequestState*> failing_;  // OnWorkerBroken's scratch
  OutputBatch out_;
  uint64_t next_step_id_ = 1;
  int64_t num_waiting_requests_ = 0;  // loop's count of admitted, unscheduled requests
  bool progressed_ = true;            // the last iteration sent a plan or applied a command
  // An idle worker's connection is checked (WorkerConnection::Alive) this often, so a worker
  // that dies or stops while idle is marked down and health follows.
  static constexpr auto kIdleCheckInterval = std::chrono::milliseconds(500);
  Clock::time_point next_idle_check_{};

  std::unique_ptr<OutputQueue> output_;
  std::thread loop_thread_;
};

}  // namespace astr::sched
