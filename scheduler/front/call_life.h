// The life of one generation call, whatever the transport: the one copy of admission (the API
// key and its per-key limit, the client connection's call slot, the constraint's compile, the
// scheduler's admission of every prompt), of the output pump (the channel's listener schedules a
// pump on the front's pool; the pump absorbs what the scheduler sent), of back-pressure and
// stalls (GenerateService::Call's rule, applied to every prompt of the call), of cancellation and
// disconnect, of a step that throws (INTERNAL for this call, the server keeps serving), and of
// the admission counters. The gRPC reactors (grpc_service.cc) and the HTTP generations
// (http_front.cc) derive from it and keep only their encoding: how a request is decoded into
// prompts, how output and errors are written, how the transport is ended.
//
// Life:  Open (key, slot)  ->  Begin: on the pool, Decode -> compile -> admit every prompt ->
//        AdmittedLocked  ->  pumps: EmitLocked ...  ->  the transport ends its answer  ->  Close.
// Cancel may come at any point (the client cancelled or left, the deadline passed); before the
// admission ends it is recorded, the compile stops, and the admission ends the call with it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "scheduler/front/generate_service.h"
#include "scheduler/front/task_pool.h"

namespace astr::front {

class CallLife : public std::enable_shared_from_this<CallLife> {
 public:
  // `service` and `pool` outlive the call. `peer` is the client connection (its call slot, and
  // the fair-share unit when no API key is used).
  CallLife(GenerateService* service, TaskPool* pool, std::string peer);
  virtual ~CallLife();
  CallLife(const CallLife&) = delete;
  CallLife& operator=(const CallLife&) = delete;

  // The gate, on the transport's thread: the API key (`authorization`, null when the request has
  // none; its concurrency slot is held until Close) and a call slot of the client connection
  // (FrontLimits::max_calls_per_peer; refusals counted). An error is the answer: the transport
  // renders it and does not call Begin.
  Status Open(const std::string* authorization);
  // Queues the admission on the pool (after a successful Open).
  void Begin();
  // The client cancelled or left, or the deadline passed. After the admission: every prompt's
  // request is aborted and CancelledLocked decides how the transport ends. Before: recorded (the
  // compile stops) and the admission ends the call with FailLocked(why).
  void Cancel(Status why);
  // The transport's answer is over (gRPC's OnDone, the end of the HTTP response): requests still
  // open are aborted, the listeners detach, the slots go back. Idempotent; with mu_ held or not
  // as its name says.
  void Close();
  void CloseLocked();

  // Asks for a pump (the transport can write again); at most one is queued at a time.
  void SchedulePump();

  const std::string& peer() const { return peer_; }
  // The fair-share unit: "key NAME" or "peer ADDRESS" (set by Open).
  const std::string& client() const { return client_; }

 protected:
  // What Decode gives the admission: the prompts (one per scheduler request; they share the first
  // one's constraint, compiled once) and the deadline.
  struct Admission {
    std::vector<v1::GenerateRequest> prompts;
    std::optional<sched::Clock::time_point> deadline;
  };

  // --- The transport's half. Decode runs on the pool without mu_; the rest with mu_ held. ---

  // The request into prompts. On failure (nullopt), the transport has ended the call itself
  // (taking mu_): a malformed request, counted as invalid here.
  virtual std::optional<Admission> Decode() = 0;
  // Every prompt is admitted (calls_); no output has been pumped yet.
  virtual void AdmittedLocked() {}
  // The pump absorbed new output or a close (closed_): write what can be written, or end.
  virtual void EmitLocked() = 0;
  // The call ends with `why` (a refused admission, a cancel before admission, a failed step):
  // render it if the client can still receive it, and end the transport.
  virtual void FailLocked(const Status& why) = 0;
  // Cancel came after the admission (the requests are already aborted): end the transport, now or
  // when a write in flight completes.
  virtual void CancelledLocked(const Status& why) = 0;

  // --- For the transport, with mu_ held. ---

  // Back-pressure over every prompt: output started waiting on the client / the client took it.
  void OutputBlockedLocked(sched::Clock::time_point since);
  void OutputTakenLocked();
  // The stall rule over every prompt (GenerateService::Call::CheckStall: paused, then past the
  // stall timeout the reason the call must end, logged here; its requests are cancelled).
  std::optional<Status> CheckStallLocked(sched::Clock::time_point now);
  // Aborts every prompt's request that has not closed.
  void CancelOpenLocked(const Status& why);
  // The first prompt's request id, for logs ("?" before the admission).
  std::string RequestIdLocked() const;

  GenerateService* const service_;
  TaskPool* const pool_;
  std::mutex mu_;
  // Guarded by mu_: one per prompt, set by the admission; cleared by Close.
  std::vector<std::unique_ptr<GenerateService::Call>> calls_;
  std::vector<bool> closed_;  // mu_: per prompt, Absorb saw the request's close
  bool finished_ = false;     // mu_: the transport ended its answer (set by the transport)

 private:
  // On the pool: Decode, then the constraint's compile (off the pool when it is not cached).
  void Admit();
  // On the pool: admit every prompt with the compiled constraint.
  void AdmitPrompts(const Admission& admission, CompileQueue::Result compiled);
  void Pump();
  // Runs a pool step; an exception (a bug) ends this call with INTERNAL instead of the process.
  template <typename Step>
  void Guarded(Step&& step);

  const std::string peer_;
  std::string client_;
  ApiKeys::Lease lease_;  // from Open until Close
  bool holds_slot_ = false;
  bool closed_call_ = false;                       // mu_: Close ran
  bool admitted_ = false;                          // mu_
  std::optional<Status> cancel_why_;               // mu_: cancelled before the admission ended
  std::shared_ptr<CompileQueue::Ticket> compile_;  // mu_: while the constraint compiles
  std::atomic<bool> pump_scheduled_{false};
};

}  // namespace astr::front
