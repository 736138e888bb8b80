// The scheduler core: one loop thread owns the request queue, every worker's page pool and
// every running sequence; other threads talk to it only through Submit / Cancel / FinishSample
// (commands it drains at the top of each iteration) and read results from RequestChannels.
//
// Per iteration the loop: applies commands; aborts requests whose deadline passed; for each worker
// plans one step (decode rows first, then prefill chunks of running sequences, then new sequences
// from the queue by priority then arrival, under the token budget, the sequence cap and the free
// pages, preempting the lowest-priority newest sequence when pages run out); sends every worker
// its plan, then reads every result (with overlap_steps, plan N+1 is sent before result N is
// read); turns sampled tokens into SampleEvents; decides finishes (EOS, stop ids, max_tokens,
// context end); and hands the step's events to an output thread in one move, so the loop itself
// never wakes a client thread. See docs/scheduler.md.
//
// Detokenization and stop strings are the front end's job (generate_service), off this loop: when a
// stop string matches, the front calls FinishSample and the loop releases the sequence at its next
// step (a token sampled meanwhile is dropped).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "astr/v1/generate.pb.h"
#include "astr/v1/worker.pb.h"
#include "common/base/sampling_params.h"
#include "common/base/status.h"
#include "common/metrics/registry.h"
#include "scheduler/constraint.h"
#include "scheduler/request_channel.h"
#include "scheduler/sched_types.h"
#include "scheduler/worker_connection.h"

namespace astr::sched {

// Checks every option's range; INVALID_ARGUMENT names the flag (--max-batch-tokens, ...).
// Scheduler::Create calls it too; astr-scheduler calls it before dialing any worker.
Status ValidateSchedulerOptions(const SchedulerOptions& options);

// Generation pause modes (admin.proto PauseMode; docs/rl.md).
enum class PauseMode { kNone, kAbort, kDrain, kKeep };

struct PauseResult {
  PauseMode mode = PauseMode::kNone;
  int32_t aborted = 0;  // kAbort: requests ended with finish reason ABORT
  int32_t frozen = 0;   // kKeep: requests frozen
  int32_t drained = 0;  // kDrain: requests that finished while Pause waited
  int32_t queued = 0;   // requests waiting to start
  std::vector<std::string> request_ids;  // aborted or frozen, in arrival order
};

struct ResumeResult {
  bool was_paused = false;
  int64_t paused_ns = 0;
};

struct CommitResult {
  int64_t version = 0;
  int32_t recomputed = 0;  // running sequences restarted from their tokens
  int32_t reused = 0;      // running sequences that kept their KV
  int64_t commit_ns = 0;   // from the request until the new version served
};

struct WeightVersionInfo {
  int64_t version = 0;
  std::string label;
  int64_t committed_unix_ns = 0;
  PauseMode paused = PauseMode::kNone;
};

// One member of the worker pool (Scheduler::Members).
struct WorkerMember {
  std::string address;
  v1::InfoResponse info;  // as read when it joined
  bool up = false;        // its step stream is up
  bool draining = false;  // no new sequence goes to it; it leaves once its sequences are done
};

// What a drain did (Scheduler::DrainWorker).
struct DrainResult {
  std::string address;
  int32_t finished = 0;  // sequences that ended on it during the drain
  int32_t moved = 0;     // sequences restarted on other workers
  int64_t drain_ns = 0;  // from the call until it was dropped
};

class SchedulerLoop;
struct AdminOp;

class Scheduler {
 public:
  // Takes connected workers (Info already read). All must serve the same model (content hash).
  // Starts the loop and output threads.
  static StatusOr<std::unique_ptr<Scheduler>> Create(
      SchedulerOptions options, std::vector<std::unique_ptr<WorkerConnection>> workers);
  // Stops the threads; requests still open are closed with UNAVAILABLE.
  ~Scheduler();

  // Queues a request. RESOURCE_EXHAUSTED when the queue is full (message names the limit and its
  // flag) or when prompt + max_tokens exceeds the KV pool of every worker (message names the
  // largest pool); UNAVAILABLE when draining; INVALID_ARGUMENT for an empty prompt, n < 1,
  // max_tokens < 1 or logprob_start outside [0, prompt size] (the front validates everything
  // else). Thread-safe.
  StatusOr<std::shared_ptr<RequestChannel>> Submit(SchedRequest request);
  // Aborts every sample of the request (client cancelled, deadline): its sequences and pages are
  // released at the next step and the channel closes with `why`. Thread-safe; unknown keys are
  // ignored.
  void Cancel(uint64_t key, Status why);
  // Ends one sample early (the front matched a stop string): released at the next step; no
  // further events for it (a token already in flight is dropped). The request closes OK once
  // its other samples finish. `kept_tokens`: how many of its tokens the front returned (the
  // sample's record drops the tokens sampled after those); -1: all. Thread-safe.
  void FinishSample(uint64_t key, int32_t index, int32_t kept_tokens = -1);
  // Holds the request (its client stopped reading a stream): its running sequences are
  // preempted at the next step (pages freed, recomputed later from their tokens, the same
  // output) and none starts again until Hold(key, false). Thread-safe; unknown keys are ignored.
  void Hold(uint64_t key, bool hold);
  // Refuses new requests from now on; running and queued ones go on.
  void StartDrain();
  // Whether StartDrain was called: the process's one draining flag, which the front asks too.
  bool draining() const;
  // True when every submitted request has been closed and its close delivered to its channel.
  bool Idle() const;

  // Weight updates and pauses (docs/rl.md). Thread-safe; they block until the loop has acted.
  //
  // Pause: kAbort ends every started request now (finish reason ABORT, partial output kept);
  // kKeep freezes them (nothing is planned; their sequences stay live on the workers); kDrain
  // lets them finish and returns when none is left (DEADLINE_EXCEEDED at `deadline`, still
  // paused). In every mode requests that have not started wait in the queue until Resume. A
  // Pause while paused switches the mode.
  StatusOr<PauseResult> Pause(PauseMode mode, Clock::time_point deadline);
  ResumeResult Resume();
  // Waits for a step boundary of every worker (plans in flight answered, none sent meanwhile),
  // then runs `apply(version)` on the loop thread, version = the served one + 1. When it returns
  // OK the scheduler serves `version` from the next step on: running sequences whose request did
  // not ask to reuse its KV are restarted from their tokens (as after a preemption). A failed
  // apply changes nothing. One at a time (the admin service serializes updates).
  StatusOr<CommitResult> CommitWeights(std::function<Status(int64_t version)> apply,
                                       std::string label);
  // Same, where `workers` names the workers that `apply` switched: a member not in it (one
  // that joined while the update was staged) would serve the old weights, so it is dropped
  // (its sequences restart on the others).
  StatusOr<CommitResult> CommitWeights(std::function<Status(int64_t version)> apply,
                                       std::string label, std::vector<std::string> workers);
  WeightVersionInfo weight_version() const;
  // Runs an admin op (admin_controller.h) on the loop thread and waits for its answer until
  // `deadline`; false when it passed first (the op goes on). Pause, Resume, CommitWeights and
  // FlushCache are such ops; a new admin verb is one more.
  bool RunAdmin(std::shared_ptr<AdminOp> op, Clock::time_point deadline = Clock::time_point::max());
  // Addresses of the workers up now, in pool order (--workers order, then joining order).
  std::vector<std::string> UpWorkerAddresses() const;

  // Dynamic membership (docs/deploy.md). Thread-safe; each blocks until the loop has acted.
  //
  // Adds a connected worker (Info read) to the pool while requests run; it takes new sequences
  // from the next step (its KV pool and limits may differ from the others'). FAILED_PRECONDITION
  // when it serves another model (the message names both content hashes) or another weight
  // version, when it is draining (shutting down), or when its address was drained on purpose
  // (DrainWorker with `exclude`) and not readmitted; ALREADY_EXISTS when its address is a member.
  Status AddWorker(std::unique_ptr<WorkerConnection> worker);
  // Drains the member at `address`: no new sequence goes to it, its waiting sequences move to
  // the other workers at once (those no other worker can take stay), its running ones may finish
  // there for `timeout` (0 = SchedulerOptions::worker_drain_timeout_ms) and then restart
  // elsewhere (same outputs); then its step stream is closed and it leaves the pool. A worker
  // that is down leaves at once. With `wait`, returns when it has left (DEADLINE_EXCEEDED at
  // `wait_deadline`; the drain goes on); else once the drain began. `exclude`: AddWorker
  // refuses the address from now on, until Readmit. NOT_FOUND when no member has the address.
  StatusOr<DrainResult> DrainWorker(const std::string& address, std::chrono::milliseconds timeout,
                                    bool wait, Clock::time_point wait_deadline, bool exclude);
  // Lifts DrainWorker's exclusion of `address` (its name stopped resolving to it, so a worker
  // seen there later is a new one). Thread-safe.
  void Readmit(const std::string& address);
  // Whether AddWorker would refuse `address` because it was drained on purpose.
  bool Excluded(const std::string& address) const;
  // The members now, in pool order.
  std::vector<WorkerMember> Members() const;

  // Empties every worker's prefix cache (pages that running sequences hold stay theirs); returns
  // the pages that became free. Safe while requests run. Thread-safe; blocks until the loop acted.
  int64_t FlushCache();

  // Snapshot of the counters (thread-safe).
  v1::GetServerStatsResponse Stats() const;
  // Every member's Info (as read when it joined), in pool order.
  std::vector<v1::InfoResponse> WorkerInfos() const;

  // Prometheus metrics (docs/metrics.md). The registry holds the core's families (astr:...,
  // label `model` = the first worker's model name); the front may add its own families to it
  // (thread-safe; a name registered twice CHECK-fails). It lives as long as the Scheduler.
  metrics::Registry& metrics();
  // Every family of metrics() in the Prometheus text format 0.0.4, the body of GET /metrics
  // (Content-Type metrics::kTextContentType). Thread-safe.
  std::string RenderMetrics() const;
  // The output metrics count what the client got, so the front that returns it counts them
  // (docs/metrics.md): a sample that ended with `tokens` tokens returned and finish `reason`
  // (generation tokens, successes by reason), and a closed request's tokens returned over all its
  // samples (the generation-tokens histogram). Thread-safe.
  void CountSampleOutput(v1::FinishReason reason, int64_t tokens) const;
  void ObserveRequestOutput(int64_t tokens) const;

 private:
  explicit Scheduler(std::unique_ptr<SchedulerLoop> loop);
  std::unique_ptr<SchedulerLoop> loop_;
};

}  // namespace astr::sched
