// The astr.v1.Generate operations, independent of the transport: admission (validation,
// tokenization, submission to the scheduler), the per-call output state (detokenizer and stop
// strings over the scheduler's SampleEvents), tokenization, model info and server stats, and the
// front's own counters. GenerateGrpcService (grpc_service.h) drives it from gRPC's callback API;
// nothing here blocks waiting for output: a call's owner is told when output arrives (Call::
// SetListener) and then polls.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "astr/v1/generate.pb.h"
#include "common/base/status.h"
#include "scheduler/front/api_keys.h"
#include "scheduler/front/compile_queue.h"
#include "scheduler/front/output_processor.h"
#include "scheduler/front/peer_limiter.h"
#include "scheduler/front/request_builder.h"
#include "scheduler/scheduler.h"

namespace astr::front {

// Limits of the public front that protect the server from its clients (scheduler flags).
struct FrontLimits {
  // Calls one client connection may hold open at once (generation and tokenization).
  int64_t max_calls_per_peer = 256;
  // A stream whose client has read nothing for this long is cancelled (0 = never).
  std::chrono::milliseconds stream_stall_timeout{30'000};
  // A stream whose client has read nothing for this long is paused: its request is held
  // (Scheduler::Hold: its KV pages go back to the pool; it is recomputed, the same output, when
  // the client reads again). 0 = never.
  std::chrono::milliseconds stream_pause_after{1'000};
  // Threads that validate, tokenize and assemble responses.
  int threads = 4;
  // The API keys both fronts check (--api-key-file); null: none needed.
  std::shared_ptr<ApiKeys> api_keys;
  // Structured-output compiles: threads and each client's share (compile_queue.h).
  CompileQueue::Options compiles;
};

class GenerateService {
 public:
  class Call;

  // `scheduler` must outlive the service.
  GenerateService(sched::Scheduler* scheduler, ServedModel model, RequestLimits limits,
                  FrontLimits front_limits);
  // Every Call must have been destroyed first.
  ~GenerateService();

  // The first step of admission: compiles `request`'s constraint for `client` (its API key or
  // its connection: the unit of fairness, compile_queue.h) without holding the calling thread.
  // `done` runs exactly once with the compiled constraint (null when the request has none) or
  // the error (counted): at once on this thread when nothing needs compiling (and null is
  // returned), else later through `post` (the front's pool); the ticket cancels the wait.
  std::shared_ptr<CompileQueue::Ticket> PrepareConstraint(const v1::GenerateRequest& request,
                                                          const std::string& client,
                                                          CompileQueue::Done done,
                                                          CompileQueue::Post post);
  // Validates, tokenizes and submits a generation request, with its constraint as
  // PrepareConstraint compiled it (null: compiled here, on this thread). Errors are counted
  // (invalid or refused) and returned; UNAVAILABLE while the scheduler drains
  // (Scheduler::StartDrain).
  // `client` is the unit of fair share (SchedRequest::client): "key NAME" or "peer ADDRESS".
  StatusOr<std::unique_ptr<Call>> Admit(
      const v1::GenerateRequest& request, std::optional<sched::Clock::time_point> deadline,
      std::shared_ptr<const sched::CompiledConstraint> compiled = {}, std::string client = "");

  Status Tokenize(const v1::TokenizeRequest& request, v1::TokenizeResponse* response);
  Status Detokenize(const v1::DetokenizeRequest& request, v1::DetokenizeResponse* response);
  void GetModelInfo(v1::GetModelInfoResponse* response) const;
  // The scheduler's counters plus the front's.
  v1::GetServerStatsResponse Stats() const;

  // Aborts every admitted request still open (drain timeout); their calls end with `why`.
  void CancelAll(const Status& why);
  // Admitted calls not yet destroyed.
  int64_t open_calls() const;

  // Per-connection admission, shared by every front.
  PeerLimiter& peer_limiter() { return peer_limiter_; }
  ApiKeys& api_keys() { return *api_keys_; }
  const FrontLimits& front_limits() const { return front_limits_; }
  // Counters the transports report into (GetServerStats).
  void CountInvalid() { invalid_.fetch_add(1, std::memory_order_relaxed); }
  void CountPeerLimitRefusal() { refused_peer_limit_.fetch_add(1, std::memory_order_relaxed); }
  void CountStalled() { stalled_.fetch_add(1, std::memory_order_relaxed); }
  void CountPaused() { paused_.fetch_add(1, std::memory_order_relaxed); }

  const ServedModel& model() const { return model_; }

 private:
  void Unregister(uint64_t key);
  // Counts an admission error by its kind.
  void CountError(const Status& s);

  sched::Scheduler* const scheduler_;
  const ServedModel model_;
  const RequestLimits limits_;
  const FrontLimits front_limits_;
  PeerLimiter peer_limiter_;
  const std::shared_ptr<ApiKeys> api_keys_;  // never null
  std::atomic<int64_t> invalid_{0};
  std::atomic<int64_t> refused_front_{0};  // refusals decided here (draining), not the scheduler
  std::atomic<int64_t> refused_peer_limit_{0};
  std::atomic<int64_t> stalled_{0};
  std::atomic<int64_t> paused_{0};
  mutable std::mutex mu_;
  std::map<uint64_t, Call*> open_;  // guarded by mu_; by request key
  // Last: stopped (its compiles cancelled, their callbacks run) before the rest goes.
  std::unique_ptr<CompileQueue> compiles_;
};

// What Call::Poll found: new output per sample and, once, the request's end.
struct CallUpdate {
  std::vector<std::pair<int32_t, SampleDelta>> deltas;  // (sample index, delta)
  bool closed = false;
  Status status;
  sched::RequestTimings timings;
};

// One admitted generation request: its scheduler channel and output state. Not thread-safe: its
// owner serializes Poll / TakeDeltas / Cancel (the listener may fire on another thread).
class GenerateService::Call {
 public:
  ~Call();  // detaches the listener and unregisters
  uint64_t key() const { return channel_->key(); }
  const BuiltRequest& built() const { return built_; }
  const std::string& request_id() const { return built_.sched.request_id; }
  const OutputProcessor& processor() const { return *processor_; }

  // `listener` runs (on the scheduler's output thread; it must only schedule work) whenever new
  // output or the close is waiting to be polled; at once when something is already waiting.
  void SetListener(std::function<void()> listener) { channel_->SetListener(std::move(listener)); }
  // Takes what the scheduler sent without waiting: tokens go through the detokenizer and stop
  // strings (a matched stop ends its sample in the scheduler), the close is recorded. The output
  // accumulates per sample until TakeDeltas, so a caller that cannot write yet holds one growing
  // delta per sample rather than a message per token. Returns true once the request has closed.
  bool Absorb();
  // Moves the output accumulated since the last call into `update` (deltas, and the close once
  // Absorb has seen it).
  void TakeDeltas(CallUpdate* update);
  // Aborts the request in the scheduler; its close arrives through the channel.
  void Cancel(Status why);

  // Back-pressure, one rule for every front: the owner says when output starts waiting on the
  // client (a write the client has not taken) and when the client took it.
  void OutputBlocked(sched::Clock::time_point since);  // no-op while already blocked
  void OutputTaken();                                  // releases a pause
  // Checked by the owner's watchdog while output is blocked: past FrontLimits::
  // stream_pause_after the request is held (counted once per pause); past stream_stall_timeout
  // the returned status is why the call must end (counted as a stall; the request is cancelled
  // here).
  std::optional<Status> CheckStall(sched::Clock::time_point now);
  bool paused() const { return paused_; }

 private:
  friend class GenerateService;
  explicit Call(GenerateService* service) : service_(service) {}

  GenerateService* const service_;
  BuiltRequest built_;
  std::shared_ptr<sched::RequestChannel> channel_;
  std::unique_ptr<OutputProcessor> processor_;
  // Counts the output metrics of the samples that ended since the last call, and of the request
  // once it closed (every sample ended); on destruction, the samples still running as aborted.
  void CountOutput(bool destroying);

  std::vector<int32_t> stopped_;  // scratch
  std::vector<bool> counted_;     // per sample: its output metrics are counted
  bool request_counted_ = false;
  std::optional<sched::Clock::time_point> blocked_since_;  // output waits on the client
  bool paused_ = false;                                    // held in the scheduler
  bool stalled_ = false;                                   // cancelled for the stall
  bool closed_ = false;
  bool close_taken_ = false;
  Status status_;
  sched::RequestTimings timings_;
};

// Response assembly shared by the transports.
// The first stream message carries the seed and prompt ids; Completion accumulates deltas.
void AppendToCompletion(const SampleDelta& d, v1::Completion* c);
v1::GenerateStreamResponse StreamMessage(const std::string& request_id, int32_t index,
                                         const SampleDelta& d);
// Usage and timings of a closed request.
void FillTotals(const GenerateService::Call& call, const CallUpdate& update, v1::Usage* usage,
                v1::Timings* timings);
// The prompt's scores (GenerateRequest.logprob_start): prompt_logprobs, prompt_top_logprobs (when
// top_logprobs > 0) and prompt_weight_version, into the response or the request's first stream
// message. Nothing when the request did not ask.
void FillPromptScores(const GenerateService::Call& call, v1::GenerateResponse* response);
void FillPromptScores(const GenerateService::Call& call, v1::GenerateStreamResponse* message);

}  // namespace astr::front
