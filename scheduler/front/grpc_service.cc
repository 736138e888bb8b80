#include "scheduler/front/grpc_service.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/logging.h"
#include "common/grpc/deadline.h"
#include "common/grpc/grpc_status.h"
#include "scheduler/front/call_life.h"
#include "scheduler/front/utf8_check.h"

namespace astr::front {
namespace {

// How often the watchdog looks for stalled streams: a stall is noticed within this of its
// timeout.
constexpr std::chrono::milliseconds kStallCheckInterval(200);

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A request's bytes, kept by reference to gRPC's slices so that they outlive the call's arena
// while the pool parses them.
struct RawRequest {
  std::vector<grpc::Slice> slices;
};

RawRequest Capture(const grpc::ByteBuffer* request) {
  RawRequest raw;
  if (request != nullptr) (void)request->Dump(&raw.slices);
  return raw;
}

// Parses `raw` as a `Message`, checking its strings for UTF-8 on the wire first (utf8_check.h).
template <typename Message>
Status Parse(const RawRequest& raw, Message* out) {
  std::string bytes;
  size_t total = 0;
  for (const grpc::Slice& s : raw.slices) total += s.size();
  bytes.reserve(total);
  for (const grpc::Slice& s : raw.slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  ASTR_RETURN_IF_ERROR(CheckWireUtf8(*Message::descriptor(), bytes));
  if (!out->ParseFromString(bytes)) {
    return InvalidArgumentError("the request is not a valid " + Message::descriptor()->full_name() +
                                " message (it does not parse)");
  }
  return OkStatus();
}

void Serialize(const google::protobuf::MessageLite& message, grpc::ByteBuffer* out) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  *out = grpc::ByteBuffer(&slice, 1);
}

// The call's `authorization` metadata (an API key, api_keys.h), if it has one.
std::optional<std::string> Authorization(const grpc::CallbackServerContext& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

// The status of a call whose handler threw: a bug, logged with what it said; the client gets
// INTERNAL (the message names no more than the exception's text).
Status InternalError(const char* what) {
  LOG(ERROR) << "internal error answering a call: " << what;
  return Status(StatusCode::kInternal, std::string("internal error: ") + what);
}

// Why gRPC cancelled the call: its deadline passed, or the client cancelled / went away.
Status CancelReason(const grpc::CallbackServerContext& context) {
  if (context.deadline() <= std::chrono::system_clock::now()) {
    return Status(StatusCode::kDeadlineExceeded, "deadline passed");
  }
  return Status(StatusCode::kCancelled, "cancelled by the client");
}

// A unary call whose work (parse, run, serialize) is one task; `Work` runs on the pool, or on the
// gRPC thread when `inline_work` (cheap calls that must answer even when the pool is busy).
template <typename Request, typename Response>
class UnaryTask final : public grpc::ServerUnaryReactor {
 public:
  using Work = std::function<Status(const Request&, Response*)>;

  static grpc::ServerUnaryReactor* Start(GenerateGrpcService* service,
                                         grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response, bool limited, Work work,
                                         bool inline_work, bool keyed = true) {
    auto* task = new UnaryTask(service, context, response, limited, std::move(work));
    if (keyed) {
      const std::optional<std::string> auth = Authorization(*context);
      auto admitted = service->impl()->api_keys().Admit(auth ? &*auth : nullptr, false);
      if (!admitted.ok()) {
        task->Finish(rpc::ToGrpcStatus(admitted.status()));
        return task;
      }
    }
    if (limited) {
      if (Status s = service->impl()->peer_limiter().Acquire(task->peer_); !s.ok()) {
        service->impl()->CountPeerLimitRefusal();
        task->Finish(rpc::ToGrpcStatus(s));
        return task;
      }
      task->holds_slot_ = true;
    }
    if (inline_work) {
      task->Run(Capture(request));
    } else {
      service->pool()->Post([task, raw = Capture(request)] { task->Run(raw); });
    }
    return task;
  }

  void OnDone() override {
    if (holds_slot_) service_->impl()->peer_limiter().Release(peer_);
    GenerateGrpcService* service = service_;
    delete this;
    service->ReactorDone();
  }

 private:
  UnaryTask(GenerateGrpcService* service, grpc::CallbackServerContext* context,
            grpc::ByteBuffer* response, bool limited, Work work)
      : service_(service),
        response_(response),
        peer_(limited ? context->peer() : std::string()),
        work_(std::move(work)) {
    service_->ReactorStarted();
  }

  // Nothing of `this` is touched after Finish: OnDone may run (and delete it) at once.
  void Run(const RawRequest& raw) {
    Request request;
    Status s = Parse(raw, &request);
    if (!s.ok()) {
      service_->impl()->CountInvalid();
      Finish(rpc::ToGrpcStatus(s));
      return;
    }
    Response response;
    try {
      s = work_(request, &response);
    } catch (const std::exception& e) {  // a bug: this call fails, the server keeps serving
      s = InternalError(e.what());
    }
    if (s.ok()) Serialize(response, response_);
    Finish(rpc::ToGrpcStatus(s));
  }

  GenerateGrpcService* const service_;
  grpc::ByteBuffer* const response_;
  const std::string peer_;
  Work work_;
  bool holds_slot_ = false;
};

}  // namespace

// A generation call on gRPC: the call's life (call_life.h: admission, pump, back-pressure,
// stalls, cancellation) plus gRPC's encoding of it. `GrpcReactor` is the unary or the write
// reactor. The call owns a shared_ptr to itself from Start until OnDone, so that pool tasks and
// listeners may outlive the gRPC call safely (they find finished_ set, or no calls, and do
// nothing).
template <typename GrpcReactor>
class GrpcGeneration : public GrpcReactor, public CallLife {
 public:
  GrpcGeneration(GenerateGrpcService* service, grpc::CallbackServerContext* context)
      : CallLife(service->impl(), service->pool(), context->peer()),
        grpc_service_(service),
        context_(context) {
    grpc_service_->ReactorStarted();
  }

  // From the method handler: the gate (API key, the connection's call slot), then the admission.
  void Start(std::shared_ptr<CallLife> self, const grpc::ByteBuffer* request) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      self_ = std::move(self);
    }
    const std::optional<std::string> auth = Authorization(*context_);
    if (Status s = Open(auth ? &*auth : nullptr); !s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(rpc::ToGrpcStatus(s));
      return;
    }
    raw_ = Capture(request);  // read by Decode, on the pool, after Begin posts it
    Begin();
  }

  void OnCancel() override { Cancel(CancelReason(*context_)); }

  void OnDone() override {
    {
      std::lock_guard<std::recursive_mutex> context_lock(context_mu_);
      context_valid_ = false;
    }
    std::shared_ptr<CallLife> keep;
    {
      std::lock_guard<std::mutex> lock(mu_);
      keep = std::move(self_);
      CloseLocked();
    }
    OnCallDone();
    GenerateGrpcService* service = grpc_service_;
    keep.reset();  // may be the last reference: nothing of `this` is touched after it
    service->ReactorDone();
  }

 protected:
  virtual void OnCallDone() {}

  // The request's bytes into its one prompt. The context stays valid: the call cannot finish
  // while the admission runs (a cancel is only recorded until then).
  std::optional<Admission> Decode() override {
    Admission admission;
    Status parsed = Parse(raw_, &admission.prompts.emplace_back());
    raw_ = RawRequest();
    if (!parsed.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(rpc::ToGrpcStatus(parsed));
      return std::nullopt;
    }
    admission.deadline = rpc::SteadyDeadline(context_->deadline());
    return admission;
  }

  void FailLocked(const Status& why) override { FinishLocked(rpc::ToGrpcStatus(why)); }

  // A write in flight fails (OnWriteDone(false)) and finishes the call there.
  void CancelledLocked(const Status& why) override {
    if (!write_in_flight_) FinishLocked(rpc::ToGrpcStatus(why));
  }

  void FinishLocked(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    this->Finish(std::move(status));
  }

  // The call's one scheduler request (after the admission).
  GenerateService::Call& call() { return *calls_[0]; }
  bool call_closed() const { return closed_[0]; }

  GenerateGrpcService* const grpc_service_;
  grpc::CallbackServerContext* const context_;
  RawRequest raw_;                  // from Start until Decode
  std::shared_ptr<CallLife> self_;  // mu_: from Start until OnDone
  bool write_in_flight_ = false;    // mu_ (streams only)
  CallUpdate update_;               // mu_: scratch
  // Guards context_ for the watchdog, which may cancel the call from its own thread: OnDone
  // clears context_valid_ first. Recursive because TryCancel may run reactions inline.
  std::recursive_mutex context_mu_;
  bool context_valid_ = true;
};

// Generate: the whole response at the request's end.
class UnaryGenerate final : public GrpcGeneration<grpc::ServerUnaryReactor> {
 public:
  UnaryGenerate(GenerateGrpcService* service, grpc::CallbackServerContext* context,
                grpc::ByteBuffer* response)
      : GrpcGeneration(service, context), response_(response) {}

 private:
  void EmitLocked() override {
    if (!started_) {
      started_ = true;
      const BuiltRequest& built = call().built();
      message_.set_request_id(built.sched.request_id);
      message_.set_seed(built.seed);
      if (built.output.return_prompt_ids) {
        message_.mutable_prompt_ids()->Add(built.sched.prompt.begin(), built.sched.prompt.end());
      }
      for (int32_t i = 0; i < built.sched.n; ++i) message_.add_completions()->set_index(i);
    }
    call().TakeDeltas(&update_);
    for (const auto& [index, delta] : update_.deltas) {
      AppendToCompletion(delta, message_.mutable_completions(index));
    }
    if (!update_.closed) return;
    if (!update_.status.ok()) return FinishLocked(rpc::ToGrpcStatus(update_.status));
    FillTotals(call(), update_, message_.mutable_usage(), message_.mutable_timings());
    FillPromptScores(call(), &message_);
    Serialize(message_, response_);
    FinishLocked(grpc::Status::OK);
  }

  grpc::ByteBuffer* const response_;
  v1::GenerateResponse message_;  // guarded by mu_
  bool started_ = false;          // guarded by mu_
};

// GenerateStream: a message per sample as output arrives, one write at a time.
class StreamReactor final : public GrpcGeneration<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  StreamReactor(GenerateGrpcService* service, grpc::CallbackServerContext* context)
      : GrpcGeneration(service, context) {}

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    write_in_flight_ = false;
    write_started_ns_.store(0, std::memory_order_relaxed);
    if (ok) OutputTakenLocked();
    // !ok: the client went away, or the call was cancelled (stall, deadline). A write that still
    // completed after the watchdog declared the stall ends the call too: the stall was counted
    // and the request aborted, so the client must see CANCELLED, not the rest and an OK.
    if (!ok || stall_why_) {
      const Status why =
          stall_why_.value_or(Status(StatusCode::kCancelled, "the client went away"));
      CancelOpenLocked(why);
      return FinishLocked(rpc::ToGrpcStatus(why));
    }
    if (!calls_.empty()) EmitLocked();
  }

  // Sends the next message, or turns new output into messages, or finishes once the request
  // closed and everything is written.
  void EmitLocked() override {
    if (finished_ || write_in_flight_) return;
    if (outbox_.empty()) BuildMessages();
    if (!outbox_.empty()) {
      writing_ = std::move(outbox_.front());
      outbox_.pop_front();
      write_in_flight_ = true;
      write_started_ns_.store(NowNs(), std::memory_order_relaxed);
      OutputBlockedLocked(sched::Clock::now());
      StartWrite(&writing_);
      return;
    }
    if (final_) FinishLocked(rpc::ToGrpcStatus(*final_));
  }

  // The watchdog: applies the call's stall rule (GenerateService::Call::CheckStall: pause,
  // then cancel) once its pending write is older than `threshold_ns`, the earlier of the two.
  void CancelIfStalled(int64_t now_ns, int64_t threshold_ns) {
    const int64_t started = write_started_ns_.load(std::memory_order_relaxed);
    if (started == 0 || now_ns - started < threshold_ns) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || !write_in_flight_ || stall_why_ || calls_.empty()) return;
      std::optional<Status> why = CheckStallLocked(sched::Clock::now());
      if (!why) return;  // paused at most
      stall_why_ = std::move(why);
    }
    // The pending write then fails (OnWriteDone(false)) and finishes the call.
    std::lock_guard<std::recursive_mutex> context_lock(context_mu_);
    if (context_valid_) context_->TryCancel();
  }

  void OnCallDone() override { grpc_service_->UnregisterStream(this); }

 private:
  void BuildMessages() {
    // The first message carries the prompt's scores, which are in by the end of sample 0's
    // prefill; until then (or the close) every sample's output waits in the processor.
    if (first_ && !call_closed() && !call().processor().prompt_scored()) return;
    call().TakeDeltas(&update_);
    const bool closing = update_.closed && !final_;
    std::vector<v1::GenerateStreamResponse> out;
    if (held_) out.push_back(std::move(*held_));
    held_.reset();
    for (const auto& [index, delta] : update_.deltas) {
      out.push_back(StreamMessage(call().request_id(), index, delta));
    }
    if (closing && out.empty()) out.emplace_back().set_request_id(call().request_id());
    if (first_ && !out.empty()) {
      first_ = false;
      const BuiltRequest& built = call().built();
      out.front().set_seed(built.seed);
      if (built.output.return_prompt_ids) {
        out.front().mutable_prompt_ids()->Add(built.sched.prompt.begin(), built.sched.prompt.end());
      }
      FillPromptScores(call(), &out.front());
    }
    if (closing) {
      // The last message carries the totals, which only the close knows.
      FillTotals(call(), update_, out.back().mutable_usage(), out.back().mutable_timings());
      final_ = update_.status;
    } else if (call().processor().all_done() && !out.empty()) {
      held_ = std::move(out.back());  // every sample is done: wait for the close's totals
      out.pop_back();
    }
    for (const v1::GenerateStreamResponse& m : out) Serialize(m, &outbox_.emplace_back());
  }

  std::deque<grpc::ByteBuffer> outbox_;             // mu_: serialized, not yet written
  grpc::ByteBuffer writing_;                        // mu_: the message being written
  std::optional<v1::GenerateStreamResponse> held_;  // mu_
  std::optional<Status> final_;                     // mu_: the close's status, once seen
  std::optional<Status> stall_why_;                 // mu_: set by the watchdog
  bool first_ = true;                               // mu_
  std::atomic<int64_t> write_started_ns_{0};        // 0 when no write is pending
};

GenerateGrpcService::GenerateGrpcService(GenerateService* impl)
    : impl_(impl), pool_(impl->front_limits().threads), watchdog_([this] { WatchStalls(); }) {}

GenerateGrpcService::~GenerateGrpcService() {
  // Server::Shutdown has ended every call; an OnDone may still be returning on a gRPC thread.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (live_reactors_.load(std::memory_order_acquire) > 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_one();
  watchdog_.join();
}

void GenerateGrpcService::RegisterStream(const std::shared_ptr<StreamReactor>& stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[stream.get()] = stream;
}

void GenerateGrpcService::UnregisterStream(const StreamReactor* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(stream);
}

void GenerateGrpcService::WatchStalls() {
  // The earlier of the pause and the stall timeout (0 = that one never).
  const FrontLimits& limits = impl_->front_limits();
  std::chrono::milliseconds threshold = limits.stream_stall_timeout;
  if (limits.stream_pause_after.count() > 0 &&
      (threshold.count() == 0 || limits.stream_pause_after < threshold)) {
    threshold = limits.stream_pause_after;
  }
  const int64_t timeout_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(threshold).count();
  std::vector<std::shared_ptr<StreamReactor>> open;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, kStallCheckInterval, [this] { return stop_; })) {
    if (timeout_ns <= 0) continue;
    open.clear();
    for (auto& [key, weak] : streams_) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
    lock.unlock();
    const int64_t now = NowNs();
    for (const auto& s : open) s->CancelIfStalled(now, timeout_ns);
    open.clear();  // the last reference may go here, outside mu_
    lock.lock();
  }
}

grpc::ServerUnaryReactor* GenerateGrpcService::Generate(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  auto call = std::make_shared<UnaryGenerate>(this, context, response);
  call->Start(call, request);
  return call.get();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateGrpcService::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto stream = std::make_shared<StreamReactor>(this, context);
  RegisterStream(stream);
  stream->Start(stream, request);
  return stream.get();
}

grpc::ServerUnaryReactor* GenerateGrpcService::Tokenize(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  return UnaryTask<v1::TokenizeRequest, v1::TokenizeResponse>::Start(
      this, context, request, response, /*limited=*/true,
      [impl = impl_](const v1::TokenizeRequest& req, v1::TokenizeResponse* resp) {
        return impl->Tokenize(req, resp);
      },
      /*inline_work=*/false);
}

grpc::ServerUnaryReactor* GenerateGrpcService::Detokenize(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return UnaryTask<v1::DetokenizeRequest, v1::DetokenizeResponse>::Start(
      this, context, request, response, /*limited=*/true,
      [impl = impl_](const v1::DetokenizeRequest& req, v1::DetokenizeResponse* resp) {
        return impl->Detokenize(req, resp);
      },
      /*inline_work=*/false);
}

grpc::ServerUnaryReactor* GenerateGrpcService::GetModelInfo(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return UnaryTask<v1::GetModelInfoRequest, v1::GetModelInfoResponse>::Start(
      this, context, request, response, /*limited=*/false,
      [impl = impl_](const v1::GetModelInfoRequest&, v1::GetModelInfoResponse* resp) {
        impl->GetModelInfo(resp);
        return OkStatus();
      },
      /*inline_work=*/true);
}

grpc::ServerUnaryReactor* GenerateGrpcService::GetServerStats(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  return UnaryTask<v1::GetServerStatsRequest, v1::GetServerStatsResponse>::Start(
      this, context, request, response, /*limited=*/false,
      [impl = impl_](const v1::GetServerStatsRequest&, v1::GetServerStatsResponse* resp) {
        *resp = impl->Stats();
        return OkStatus();
      },
      /*inline_work=*/true, /*keyed=*/false);
}

}  // namespace astr::front
