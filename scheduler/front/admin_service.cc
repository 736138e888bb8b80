#include "scheduler/front/admin_service.h"

#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/base/clock.h"
#include "common/base/logging.h"
#include "common/grpc/deadline.h"
#include "common/grpc/grpc_status.h"
#include "common/grpc/keepalive.h"
#include "common/grpc/message_limits.h"
#include "common/grpc/raw_client_stream.h"
#include "common/grpc/raw_update_message.h"
#include "scheduler/front/api_keys.h"

namespace astr::front {
namespace {

using Clock = std::chrono::steady_clock;

// Buckets are forwarded as they come; a worker's queue holds at most this many, so the scheduler
// holds at most this many buckets per worker (plus the one being read).
constexpr size_t kForwardQueue = 2;
constexpr auto kControlTimeout = std::chrono::seconds(30);
constexpr auto kChecksumTimeout = std::chrono::seconds(120);

std::chrono::system_clock::time_point In(std::chrono::seconds d) {
  return std::chrono::system_clock::now() + d;
}

grpc::Status Error(grpc::StatusCode code, std::string message) {
  return grpc::Status(code, std::move(message));
}

grpc::Status WithWorker(const std::string& address, const grpc::Status& s) {
  return grpc::Status(s.error_code(), "worker " + address + ": " + s.error_message());
}

// One worker's StageWeights stream, written by its own thread from a bounded queue. It writes
// the messages as the client's bytes (grpc::ByteBuffer, shared between the workers' streams, not
// copied): the scheduler never parses a bucket into a protobuf nor serializes it again.
class Forwarder {
 public:
  Forwarder(std::string address, const std::shared_ptr<grpc::Channel>& channel)
      : address_(std::move(address)),
        method_("/astr.v1.Worker/StageWeights", grpc::internal::RpcMethod::CLIENT_STREAMING,
                channel),
        writer_(grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel.get(), method_, &context_, &response_)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Forwarder() {
    Close();
    if (thread_.joinable()) thread_.join();
  }

  // Queues a message; blocks while the queue is full. False once this worker's stream failed.
  bool Push(const grpc::ByteBuffer& message) {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [this] { return queue_.size() < kForwardQueue || failed_; });
    if (failed_) return false;
    queue_.push_back(message);  // a reference to the same slices
    ready_.notify_one();
    return true;
  }
  // No more messages: the stream is half-closed once the queue is written.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    ready_.notify_one();
  }
  // Ends the stream from this side; its status (CANCELLED) is then not the worker's failure.
  void Cancel() {
    cancelled_.store(true);
    context_.TryCancel();
  }
  bool cancelled() const { return cancelled_.load(); }
  // Waits for the worker's answer.
  grpc::Status Finish() {
    Close();
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  const std::string& address() const { return address_; }
  const v1::StageWeightsResponse& response() const { return response_; }
  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

 private:
  void Run() {
    bool ok = true;
    while (true) {
      grpc::ByteBuffer message;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return !queue_.empty() || closed_; });
        if (queue_.empty()) break;
        message = std::move(queue_.front());
        queue_.pop_front();
        space_.notify_one();
      }
      if (!writer_->Write(message)) {
        ok = false;
        break;
      }
    }
    if (ok) writer_->WritesDone();
    status_ = writer_->Finish();
    if (ok && status_.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    queue_.clear();
    space_.notify_all();
  }

  const std::string address_;
  grpc::ClientContext context_;
  v1::StageWeightsResponse response_;
  grpc::internal::RpcMethod method_;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<grpc::ByteBuffer> queue_;
  bool closed_ = false;
  bool failed_ = false;
  std::atomic<bool> cancelled_{false};
  grpc::Status status_;
  std::thread thread_;
};

// Runs `call(i)` for every i in [0, n) on its own thread and waits for all.
template <typename Call>
std::vector<grpc::Status> OnEach(size_t n, Call call) {
  std::vector<grpc::Status> statuses(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { statuses[i] = call(i); });
  for (auto& t : threads) t.join();
  return statuses;
}

v1::PauseMode ToProto(sched::PauseMode mode) {
  switch (mode) {
    case sched::PauseMode::kAbort:
      return v1::PAUSE_MODE_ABORT;
    case sched::PauseMode::kDrain:
      return v1::PAUSE_MODE_DRAIN;
    case sched::PauseMode::kKeep:
      return v1::PAUSE_MODE_KEEP;
    case sched::PauseMode::kNone:
      break;
  }
  return v1::PAUSE_MODE_UNSPECIFIED;
}

}  // namespace

StatusOr<std::string> ReadAdminToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("--admin-token-file: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token = ss.str();
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!token.empty() && space(token.back())) token.pop_back();
  size_t begin = 0;
  while (begin < token.size() && space(token[begin])) ++begin;
  token.erase(0, begin);
  if (token.empty()) return InvalidArgumentError("--admin-token-file: " + path + " is empty");
  return token;
}

AdminService::AdminService(sched::Scheduler* scheduler, std::string token,
                           rpc::ChannelSecurity worker_security)
    : scheduler_(scheduler),
      token_(std::move(token)),
      worker_security_(std::move(worker_security)) {
  // UpdateWeights is served from the received bytes (UpdateWeightsRaw).
  MarkMethodStreamed(rpc::ClientStreamIndex("astr.v1.Admin", "UpdateWeights"),
                     rpc::RawClientStreamHandler(this, &AdminService::UpdateWeightsRaw));
}

AdminService::~AdminService() = default;

grpc::Status AdminService::Authorize(grpc::ServerContext* context) const {
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return AuthorizeValue(nullptr);
  const std::string value(it->second.data(), it->second.size());
  return AuthorizeValue(&value);
}

grpc::Status AdminService::AuthorizeValue(const std::string* authorization) const {
  if (token_.empty()) {
    return Error(grpc::StatusCode::PERMISSION_DENIED,
                 "admin calls are refused: the scheduler was started without --admin-token-file");
  }
  if (authorization == nullptr) {
    return Error(grpc::StatusCode::UNAUTHENTICATED,
                 "admin calls need `authorization: Bearer <token>` (the token of "
                 "--admin-token-file)");
  }
  const std::string& value = *authorization;
  const std::string prefix = "Bearer ";
  if (value.compare(0, prefix.size(), prefix) != 0) {
    return Error(grpc::StatusCode::UNAUTHENTICATED,
                 "authorization metadata must be `Bearer <token>`");
  }
  if (!ConstantTimeEqual(value.substr(prefix.size()), token_)) {
    return Error(grpc::StatusCode::PERMISSION_DENIED, "wrong admin token");
  }
  return grpc::Status::OK;
}

std::unique_ptr<v1::Worker::Stub> AdminService::Stub(const std::string& address) {
  return v1::Worker::NewStub(WorkerChannel(address));
}

std::shared_ptr<grpc::Channel> AdminService::WorkerChannel(const std::string& address) {
  std::lock_guard<std::mutex> lock(channels_mu_);
  auto& channel = channels_[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(rpc::kMaxMessageBytes);
    args.SetMaxReceiveMessageSize(rpc::kMaxMessageBytes);
    // Its own connection, beside the step stream's, so a push never delays a step's messages.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // A worker that stops answering (SIGSTOP, a hung host) breaks a push within seconds instead of
    // blocking it on flow control forever.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, rpc::kWorkerKeepaliveTimeMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, rpc::kWorkerKeepaliveTimeoutMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    auto credentials = rpc::ClientCredentials(worker_security_, &args);
    channel = grpc::CreateCustomChannel(address, credentials, args);
  }
  return channel;
}

grpc::Status AdminService::Control(const Staged& s, v1::ControlWeightsRequest::Action action,
                                   int64_t version) {
  grpc::ClientContext context;
  context.set_deadline(In(kControlTimeout));
  v1::ControlWeightsRequest request;
  request.set_action(action);
  request.set_staged_id(s.staged_id);
  request.set_version(version);
  v1::ControlWeightsResponse answer;
  return Stub(s.address)->ControlWeights(&context, request, &answer);
}

void AdminService::Discard(const std::vector<Staged>& staged) {
  for (const Staged& s : staged) {
    grpc::Status st = Control(s, v1::ControlWeightsRequest::DISCARD, 0);
    if (!st.ok()) LOG(WARNING) << "worker " << s.address << ": discard: " << st.error_message();
  }
}

grpc::Status AdminService::Commit(const std::vector<Staged>& staged, const std::string& label,
                                  v1::UpdateWeightsResponse* response) {
  const int64_t before = scheduler_->weight_version().version;
  grpc::Status failure;
  auto apply = [&](int64_t version) -> Status {
    size_t applied = 0;
    for (; applied < staged.size(); ++applied) {
      failure = Control(staged[applied], v1::ControlWeightsRequest::APPLY, version);
      if (!failure.ok()) break;
    }
    if (applied == staged.size()) return OkStatus();
    failure = WithWorker(staged[applied].address, failure);
    // Every worker returns to the served version: the ones that switched switch back, the rest
    // drop their stage.
    for (size_t i = 0; i < applied; ++i) {
      grpc::Status back = Control(staged[i], v1::ControlWeightsRequest::ROLLBACK, before);
      if (!back.ok()) {
        LOG(ERROR) << "worker " << staged[i].address << ": rollback failed: "
                   << back.error_message();
      }
    }
    Discard(std::vector<Staged>(staged.begin() + static_cast<std::ptrdiff_t>(applied),
                                staged.end()));
    return UnavailableError(failure.error_message());
  };
  std::vector<std::string> updated;
  for (const Staged& s : staged) updated.push_back(s.address);
  auto committed = scheduler_->CommitWeights(apply, label, std::move(updated));
  if (!committed.ok()) {
    const grpc::StatusCode code =
        failure.ok() ? static_cast<grpc::StatusCode>(committed.status().code())
                     : failure.error_code();
    return Error(code, std::string(committed.status().message()) + "; version " +
                           std::to_string(before) + " still serving");
  }
  for (const Staged& s : staged) {
    grpc::Status st = Control(s, v1::ControlWeightsRequest::FINISH, committed->version);
    if (!st.ok()) LOG(WARNING) << "worker " << s.address << ": finish: " << st.error_message();
  }
  {
    std::lock_guard<std::mutex> lock(memory_mu_);
    weights_need_update_ = false;  // every worker serves a complete weight set again
  }
  MaybeEndImplicitPause();
  response->set_version(committed->version);
  response->set_label(label);
  response->set_commit_ns(committed->commit_ns);
  response->set_recomputed(committed->recomputed);
  response->set_reused(committed->reused);
  response->set_workers(static_cast<int32_t>(staged.size()));
  return grpc::Status::OK;
}

grpc::Status AdminService::UpdateWeights(grpc::ServerContext*,
                                         grpc::ServerReader<v1::UpdateWeightsRequest>*,
                                         v1::UpdateWeightsResponse*) {
  return Error(grpc::StatusCode::INTERNAL, "UpdateWeights is served by UpdateWeightsRaw");
}

grpc::Status AdminService::UpdateWeightsRaw(grpc::ServerContext* context,
                                            grpc::ServerReader<grpc::ByteBuffer>* reader,
                                            v1::UpdateWeightsResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  std::unique_lock<std::timed_mutex> one;
  if (grpc::Status s = LockUpdate(&one); !s.ok()) return s;
  const auto start = Clock::now();
  const int64_t served = scheduler_->weight_version().version;
  const std::string still = "; version " + std::to_string(served) + " still serving";
  // Each message is read for its manifest and its chunks' sizes only (no data is copied); the
  // workers check everything else.
  int64_t bytes = 0;
  auto count = [&bytes](int32_t, int64_t, ChunkPieces pieces) {
    for (const auto& p : pieces) bytes += static_cast<int64_t>(p.size());
    return OkStatus();
  };
  grpc::ByteBuffer message;
  if (!reader->Read(&message)) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "the update stream carried no message");
  }
  RawUpdateMessage first;
  if (Status s = ParseRawUpdateMessage(message, &first, count); !s.ok()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, std::string(s.message()) + still);
  }
  if (!first.has_manifest || first.manifest.tensors().empty()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "manifest: the first message must carry a manifest with at least one tensor");
  }
  const std::string label = first.manifest.label();
  const int32_t tensors = first.manifest.tensors_size();
  const std::vector<std::string> addresses = scheduler_->UpWorkerAddresses();
  if (addresses.empty()) {
    return Error(grpc::StatusCode::UNAVAILABLE, "no worker is up to take the update");
  }
  std::vector<std::unique_ptr<Forwarder>> forwarders;
  for (const std::string& address : addresses) {
    forwarders.push_back(std::make_unique<Forwarder>(address, WorkerChannel(address)));
  }
  bool worker_failed = false;
  while (true) {
    for (auto& f : forwarders) worker_failed |= !f->Push(message);
    if (worker_failed) break;
    if (!reader->Read(&message)) break;
    RawUpdateMessage next;
    Status parsed = ParseRawUpdateMessage(message, &next, count);
    if (parsed.ok() && next.has_manifest) {
      parsed = InvalidArgumentError("manifest: only the first message may carry one");
    }
    if (!parsed.ok()) {
      for (auto& f : forwarders) f->Cancel();
      return Error(grpc::StatusCode::INVALID_ARGUMENT, std::string(parsed.message()) + still);
    }
  }
  if (!worker_failed && context->IsCancelled()) {
    for (auto& f : forwarders) f->Cancel();
    LOG(WARNING) << "weights: the update stream was cancelled after " << bytes << " bytes"
                 << still;
    return Error(grpc::StatusCode::CANCELLED,
                 "the update stream was cancelled after " + std::to_string(bytes) + " bytes" +
                     still);
  }
  if (worker_failed) {
    for (auto& f : forwarders) {
      if (!f->failed()) f->Cancel();
    }
  }
  std::vector<Staged> staged;
  grpc::Status failure;
  for (auto& f : forwarders) {
    grpc::Status s = f->Finish();
    if (s.ok()) {
      staged.push_back({f->address(), f->response().staged_id()});
    } else if (failure.ok() && !f->cancelled()) {
      // The worker's own failure, whatever its code (a killed worker's stream may end CANCELLED).
      failure = WithWorker(f->address(), s);
    }
  }
  if (failure.ok() && staged.size() != forwarders.size()) {
    failure = Error(grpc::StatusCode::ABORTED, "a worker's stage was cancelled");
  }
  if (!failure.ok()) {
    Discard(staged);
    LOG(WARNING) << "weights: update refused: " << failure.error_message() << still;
    return Error(failure.error_code(), failure.error_message() + still);
  }
  response->set_tensors(tensors);
  response->set_bytes(bytes);
  response->set_stage_ns(Nanos(Clock::now() - start));
  return Commit(staged, label, response);
}

grpc::Status AdminService::UpdateWeightsFromDisk(grpc::ServerContext* context,
                                                 const v1::UpdateWeightsFromDiskRequest* request,
                                                 v1::UpdateWeightsResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  return UpdateFromDisk(*request, response);
}

grpc::Status AdminService::UpdateFromDisk(const v1::UpdateWeightsFromDiskRequest& request,
                                          v1::UpdateWeightsResponse* response) {
  if (request.path().empty()) return Error(grpc::StatusCode::INVALID_ARGUMENT, "path: empty");
  std::unique_lock<std::timed_mutex> one;
  if (grpc::Status s = LockUpdate(&one); !s.ok()) return s;
  const auto start = Clock::now();
  const int64_t served = scheduler_->weight_version().version;
  const std::vector<std::string> addresses = scheduler_->UpWorkerAddresses();
  if (addresses.empty()) {
    return Error(grpc::StatusCode::UNAVAILABLE, "no worker is up to take the update");
  }
  // Every worker reads and builds at once.
  return StageEachAndCommit(
      addresses, served, start,
      [&](const std::string& address, v1::StageWeightsResponse* answer) {
        grpc::ClientContext ctx;
        return Stub(address)->StageWeightsFromDisk(&ctx, request, answer);
      },
      request.label(), response);
}

grpc::Status AdminService::StageEach(
    const std::vector<std::string>& addresses, int64_t served, Clock::time_point start,
    const std::function<grpc::Status(const std::string&, v1::StageWeightsResponse*)>& stage,
    std::vector<Staged>* staged, v1::UpdateWeightsResponse* response) {
  std::vector<v1::StageWeightsResponse> answers(addresses.size());
  const std::vector<grpc::Status> statuses =
      OnEach(addresses.size(), [&](size_t i) { return stage(addresses[i], &answers[i]); });
  grpc::Status failure;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (statuses[i].ok()) {
      staged->push_back({addresses[i], answers[i].staged_id()});
    } else if (failure.ok()) {
      failure = WithWorker(addresses[i], statuses[i]);
    }
  }
  if (!failure.ok()) {
    Discard(*staged);
    staged->clear();
    LOG(WARNING) << "weights: update refused: " << failure.error_message() << "; version " << served
                 << " still serving";
    return Error(failure.error_code(), failure.error_message() + "; version " +
                                           std::to_string(served) + " still serving");
  }
  response->set_tensors(answers[0].tensors());
  response->set_bytes(answers[0].bytes());
  response->set_stage_ns(Nanos(Clock::now() - start));
  return grpc::Status::OK;
}

grpc::Status AdminService::StageEachAndCommit(
    const std::vector<std::string>& addresses, int64_t served, Clock::time_point start,
    const std::function<grpc::Status(const std::string&, v1::StageWeightsResponse*)>& stage,
    const std::string& label, v1::UpdateWeightsResponse* response) {
  std::vector<Staged> staged;
  if (grpc::Status s = StageEach(addresses, served, start, stage, &staged, response); !s.ok()) {
    return s;
  }
  return Commit(staged, label, response);
}

grpc::Status AdminService::UpdateWeightsFromTensor(
    grpc::ServerContext* context, const v1::UpdateWeightsFromTensorRequest* request,
    v1::UpdateWeightsResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  return UpdateFromTensorNow(*request, response);
}

grpc::Status AdminService::UpdateFromTensorNow(const v1::UpdateWeightsFromTensorRequest& request,
                                               v1::UpdateWeightsResponse* response) {
  if (request.manifest().tensors().empty()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "manifest: no tensors");
  }
  if (request.buffers().empty()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "buffers: none given");
  }
  std::vector<std::string> addresses;
  if (grpc::Status s = CudaMembers("CUDA IPC", &addresses); !s.ok()) return s;
  std::unique_lock<std::timed_mutex> one;
  if (grpc::Status s = LockUpdate(&one); !s.ok()) return s;
  const auto start = Clock::now();
  const int64_t served = scheduler_->weight_version().version;
  // Every worker copies out of the trainer's buffers at once.
  return StageEachAndCommit(
      addresses, served, start,
      [&](const std::string& address, v1::StageWeightsResponse* answer) {
        grpc::ClientContext ctx;
        return Stub(address)->StageWeightsFromTensor(&ctx, request, answer);
      },
      request.manifest().label(), response);
}

grpc::Status AdminService::LockUpdate(std::unique_lock<std::timed_mutex>* one,
                                      const std::string& what) {
  *one = std::unique_lock<std::timed_mutex>(update_mu_, kUpdateWait);
  if (!one->owns_lock()) {
    return Error(grpc::StatusCode::ABORTED, (what.empty() ? "" : what + ": ") +
                                                "another weight update has been in progress for " +
                                                std::to_string(kUpdateWait.count()) + " s");
  }
  std::lock_guard<std::mutex> lock(direct_mu_);
  if (direct_ == nullptr) return grpc::Status::OK;
  const auto now = Clock::now();
  if (now >= direct_->deadline) {
    LOG(WARNING) << "weights: direct update " << direct_->id
                 << " lapsed without CommitDirectUpdate; its stages are dropped by the next one";
    direct_.reset();
    return grpc::Status::OK;
  }
  one->unlock();
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(direct_->deadline - now);
  return Error(grpc::StatusCode::ABORTED,
               (what.empty() ? "" : what + ": ") + "direct update " + direct_->id +
                   " (BeginDirectUpdate) holds the weights until CommitDirectUpdate, or for " +
                   std::to_string(left.count() + 1) + " s more");
}

namespace {

// 128 random bits in hex.
std::string NewUpdateId() {
  std::random_device device;
  char text[33];
  std::snprintf(text, sizeof(text), "%08x%08x%08x%08x", device(), device(), device(), device());
  return text;
}

constexpr int64_t kDirectDefaultMs = 600'000;
constexpr int64_t kDirectMaxMs = 3'600'000;

}  // namespace

grpc::Status AdminService::BeginDirectUpdate(grpc::ServerContext* context,
                                             const v1::BeginDirectUpdateRequest* request,
                                             v1::BeginDirectUpdateResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  if (request->timeout_ms() < 0 || request->timeout_ms() > kDirectMaxMs) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "timeout_ms: " + std::to_string(request->timeout_ms()) + " (expected 0 .. " +
                     std::to_string(kDirectMaxMs) + "; 0 = " + std::to_string(kDirectDefaultMs) +
                     ")");
  }
  std::unique_lock<std::timed_mutex> one;
  if (grpc::Status s = LockUpdate(&one); !s.ok()) return s;
  const std::vector<std::string> addresses = scheduler_->UpWorkerAddresses();
  if (addresses.empty()) {
    return Error(grpc::StatusCode::UNAVAILABLE, "no worker is up to take the update");
  }
  auto direct = std::make_unique<DirectUpdate>();
  direct->id = NewUpdateId();
  direct->workers = addresses;
  direct->begun = Clock::now();
  direct->deadline =
      direct->begun +
      std::chrono::milliseconds(request->timeout_ms() ? request->timeout_ms() : kDirectDefaultMs);
  response->set_update_id(direct->id);
  for (const std::string& a : addresses) response->add_workers(a);
  response->set_version(scheduler_->weight_version().version);
  LOG(INFO) << "weights: direct update " << direct->id << " begun for " << addresses.size()
            << " worker(s)";
  std::lock_guard<std::mutex> lock(direct_mu_);
  direct_ = std::move(direct);
  return grpc::Status::OK;
}

grpc::Status AdminService::CommitDirectUpdate(grpc::ServerContext* context,
                                              const v1::CommitDirectUpdateRequest* request,
                                              v1::UpdateWeightsResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  std::unique_lock<std::timed_mutex> one(update_mu_, kUpdateWait);
  if (!one.owns_lock()) {
    return Error(grpc::StatusCode::ABORTED, "another weight update has been in progress for " +
                                                std::to_string(kUpdateWait.count()) + " s");
  }
  std::unique_ptr<DirectUpdate> direct;
  {
    std::lock_guard<std::mutex> lock(direct_mu_);
    if (direct_ == nullptr || direct_->id != request->update_id()) {
      return Error(grpc::StatusCode::NOT_FOUND,
                   "update_id: '" + request->update_id() +
                       "' is not the open direct update (it was committed or discarded, lapsed "
                       "after its timeout_ms, or never begun)");
    }
    direct = std::move(direct_);  // the reservation ends here, whatever follows
  }
  if (Clock::now() >= direct->deadline) {
    std::vector<Staged> named;  // drop what the trainer staged for it
    for (const v1::DirectStage& stage : request->stages()) {
      const auto& w = direct->workers;
      if (std::find(w.begin(), w.end(), stage.worker()) != w.end()) {
        named.push_back({stage.worker(), stage.staged_id()});
      }
    }
    Discard(named);
    const auto late =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - direct->deadline);
    return Error(grpc::StatusCode::NOT_FOUND,
                 "update_id: '" + direct->id + "' lapsed " + std::to_string(late.count()) +
                     " ms ago (BeginDirectUpdate's timeout_ms); begin again");
  }
  const int64_t served = scheduler_->weight_version().version;
  const std::string still = "; version " + std::to_string(served) + " still serving";
  std::vector<Staged> staged;
  grpc::Status invalid;
  for (int i = 0; i < request->stages_size(); ++i) {
    const v1::DirectStage& stage = request->stages(i);
    const std::string field = "stages[" + std::to_string(i) + "].worker";
    const auto& workers = direct->workers;
    if (std::find(workers.begin(), workers.end(), stage.worker()) == workers.end()) {
      if (invalid.ok()) {
        invalid = Error(grpc::StatusCode::INVALID_ARGUMENT,
                        field + ": '" + stage.worker() + "' is not a worker of the update");
      }
      continue;
    }
    bool twice = false;
    for (const Staged& s : staged) twice |= s.address == stage.worker();
    if (twice) {
      if (invalid.ok()) {
        invalid = Error(grpc::StatusCode::INVALID_ARGUMENT,
                        field + ": '" + stage.worker() + "' is named twice");
      }
      continue;
    }
    staged.push_back({stage.worker(), stage.staged_id()});
  }
  if (request->discard()) {
    Discard(staged);
    LOG(INFO) << "weights: direct update " << direct->id << " discarded" << still;
    return grpc::Status::OK;
  }
  if (invalid.ok() && staged.size() != direct->workers.size()) {
    for (const std::string& w : direct->workers) {
      bool found = false;
      for (const Staged& s : staged) found |= s.address == w;
      if (!found) {
        invalid = Error(grpc::StatusCode::INVALID_ARGUMENT,
                        "stages: worker '" + w + "' has no stage (every worker must stage it)");
        break;
      }
    }
  }
  if (!invalid.ok()) {
    Discard(staged);
    return Error(invalid.error_code(), invalid.error_message() + still);
  }
  std::vector<std::string> now = scheduler_->UpWorkerAddresses();
  std::vector<std::string> then = direct->workers;
  std::sort(now.begin(), now.end());
  std::sort(then.begin(), then.end());
  if (now != then) {
    // A worker that joined would serve the old weights, one that left cannot switch.
    Discard(staged);
    return Error(grpc::StatusCode::ABORTED,
                 "the workers changed since BeginDirectUpdate: begin again" + still);
  }
  response->set_tensors(request->stages(0).tensors());
  response->set_bytes(request->stages(0).bytes());
  response->set_stage_ns(Nanos(Clock::now() - direct->begun));
  return Commit(staged, request->label(), response);
}

namespace {

std::string GroupName(const std::string& name) { return name.empty() ? "default" : name; }

}  // namespace

grpc::Status AdminService::GroupMembers(std::vector<std::string>* addresses) const {
  return CudaMembers("an NCCL weight-update group", addresses);
}

grpc::Status AdminService::CudaMembers(const std::string& what,
                                       std::vector<std::string>* addresses) const {
  std::string others;
  for (const sched::WorkerMember& m : scheduler_->Members()) {
    if (!m.up) continue;
    if (m.info.backend() != "cuda") {
      if (!others.empty()) others += ", ";
      others += m.address + " (" + m.info.backend() + ")";
    }
    addresses->push_back(m.address);
  }
  if (addresses->empty()) {
    return Error(grpc::StatusCode::UNAVAILABLE, "no worker is up for " + what);
  }
  if (!others.empty()) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 what + " needs every worker on the cuda backend; these are not: " + others +
                     " (use UpdateWeights or UpdateWeightsFromDisk)");
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::InitWeightUpdateGroup(grpc::ServerContext* context,
                                                 const v1::InitWeightUpdateGroupRequest* request,
                                                 v1::InitWeightUpdateGroupResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  return InitGroupNow(*request, response);
}

grpc::Status AdminService::InitGroupNow(const v1::InitWeightUpdateGroupRequest& req,
                                        v1::InitWeightUpdateGroupResponse* response) {
  const v1::InitWeightUpdateGroupRequest* request = &req;
  const std::string name = GroupName(request->group_name());
  if (request->timeout_ms() < 0) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "timeout_ms: " + std::to_string(request->timeout_ms()) + " is negative");
  }
  std::vector<std::string> addresses;
  if (grpc::Status s = GroupMembers(&addresses); !s.ok()) return s;
  if (!request->validate_only() && request->nccl_unique_id().size() != 128) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "nccl_unique_id: " + std::to_string(request->nccl_unique_id().size()) +
                     " bytes, expected the 128 of ncclGetUniqueId");
  }
  const int world = 1 + static_cast<int>(addresses.size());
  if (request->world_size() != 0 && request->world_size() != world) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "world_size: " + std::to_string(request->world_size()) +
                     ", but the group is the trainer and " + std::to_string(addresses.size()) +
                     " worker(s): " + std::to_string(world) + " (or 0)");
  }
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    if (groups_.count(name) != 0) {
      return Error(grpc::StatusCode::ALREADY_EXISTS,
                   "weight-update group '" + name + "' exists: DestroyWeightUpdateGroup first");
    }
  }
  response->set_world_size(world);
  response->set_group_name(name);
  for (size_t i = 0; i < addresses.size(); ++i) {
    v1::WorkerRank* r = response->add_ranks();
    r->set_address(addresses[i]);
    r->set_rank(static_cast<int32_t>(i + 1));
  }
  if (request->validate_only()) return grpc::Status::OK;
  // A worker that is gone but not yet dropped would leave the others waiting in their join for
  // the whole timeout: every worker must answer first.
  const std::vector<grpc::Status> alive = OnEach(addresses.size(), [&](size_t i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(std::chrono::seconds(5)));
    v1::InfoResponse info;
    return Stub(addresses[i])->Info(&ctx, v1::InfoRequest(), &info);
  });
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (!alive[i].ok()) {
      return Error(grpc::StatusCode::UNAVAILABLE, "worker " + addresses[i] + " does not answer (" +
                                                      alive[i].error_message() +
                                                      "): no group made");
    }
  }
  // Every worker joins at once: ncclCommInitRank returns only when all ranks (the trainer too)
  // are there.
  std::vector<v1::JoinWeightGroupResponse> answers(addresses.size());
  const std::vector<grpc::Status> statuses = OnEach(addresses.size(), [&](size_t i) {
    grpc::ClientContext ctx;
    v1::JoinWeightGroupRequest join;
    join.set_group_name(name);
    join.set_nccl_unique_id(request->nccl_unique_id());
    join.set_rank(static_cast<int32_t>(i + 1));
    join.set_world_size(world);
    join.set_timeout_ms(request->timeout_ms());
    join.set_warmup_all_reduce(request->warmup_all_reduce());
    return Stub(addresses[i])->JoinWeightGroup(&ctx, join, &answers[i]);
  });
  grpc::Status failure;
  std::vector<std::string> joined;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (statuses[i].ok()) {
      joined.push_back(addresses[i]);
    } else if (failure.ok()) {
      failure = WithWorker(addresses[i], statuses[i]);
    }
  }
  if (!failure.ok()) {
    LeaveGroup(name, joined);
    LOG(WARNING) << "weights: NCCL group '" << name << "' not made: " << failure.error_message();
    return failure;
  }
  response->set_nccl(answers[0].nccl());
  std::lock_guard<std::mutex> lock(groups_mu_);
  groups_[name] = addresses;
  LOG(INFO) << "weights: NCCL group '" << name << "' made: the trainer and " << addresses.size()
            << " worker(s), " << answers[0].nccl();
  return grpc::Status::OK;
}

void AdminService::LeaveGroup(const std::string& name, const std::vector<std::string>& addresses) {
  OnEach(addresses.size(), [&](size_t i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(kControlTimeout));
    v1::DestroyWeightUpdateGroupRequest leave;
    leave.set_group_name(name);
    v1::DestroyWeightUpdateGroupResponse answer;
    grpc::Status s = Stub(addresses[i])->LeaveWeightGroup(&ctx, leave, &answer);
    if (!s.ok() && s.error_code() != grpc::StatusCode::NOT_FOUND) {
      LOG(WARNING) << "worker " << addresses[i] << ": leaving group '" << name
                   << "': " << s.error_message();
    }
    return s;
  });
}

grpc::Status AdminService::UpdateWeightsFromDistributed(
    grpc::ServerContext* context, const v1::UpdateWeightsFromDistributedRequest* request,
    v1::UpdateWeightsResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  return UpdateFromDistributedNow(*request, response);
}

grpc::Status AdminService::DistributedMembers(
    const v1::UpdateWeightsFromDistributedRequest& request, std::vector<std::string>* members) {
  const std::string name = GroupName(request.group_name());
  if (request.manifest().tensors().empty()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "manifest: no tensors");
  }
  if (request.bucket_bytes() < -1) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "bucket_bytes: " + std::to_string(request.bucket_bytes()) +
                     " (expected > 0, 0 for 512 MiB, or -1 for one broadcast per tensor)");
  }
  for (int i = 0; i < request.piece_bytes_size(); ++i) {
    if (request.piece_bytes(i) <= 0) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT, "piece_bytes[" + std::to_string(i) + "]: " +
                                                           std::to_string(request.piece_bytes(i)) +
                                                           " (each broadcast is > 0 bytes)");
    }
  }
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    auto it = groups_.find(name);
    if (it == groups_.end()) {
      return Error(grpc::StatusCode::NOT_FOUND,
                   "no weight-update group '" + name + "' (InitWeightUpdateGroup makes it)");
    }
    *members = it->second;
  }
  std::vector<std::string> now;
  if (grpc::Status s = GroupMembers(&now); !s.ok() || now != *members) {
    // The ranks the trainer broadcasts to are not the workers that serve: an update through this
    // group would leave some worker on the old weights (or wait for one that is gone).
    return Error(
        grpc::StatusCode::FAILED_PRECONDITION,
        "the workers changed since group '" + name + "' was made: destroy it and make it again");
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::UpdateFromDistributedNow(
    const v1::UpdateWeightsFromDistributedRequest& request, v1::UpdateWeightsResponse* response) {
  std::vector<std::string> members;
  if (grpc::Status s = DistributedMembers(request, &members); !s.ok()) return s;
  std::unique_lock<std::timed_mutex> one;
  if (grpc::Status s = LockUpdate(&one); !s.ok()) return s;
  const auto start = Clock::now();
  const int64_t served = scheduler_->weight_version().version;
  return StageEachAndCommit(
      members, served, start,
      [&](const std::string& address, v1::StageWeightsResponse* answer) {
        grpc::ClientContext ctx;
        return Stub(address)->StageWeightsFromDistributed(&ctx, request, answer);
      },
      request.manifest().label(), response);
}

grpc::Status AdminService::StageFromDistributedNow(
    const v1::UpdateWeightsFromDistributedRequest& request, PendingUpdate* pending) {
  std::vector<std::string> members;
  if (grpc::Status s = DistributedMembers(request, &members); !s.ok()) return s;
  std::unique_lock<std::timed_mutex> one;
  if (grpc::Status s = LockUpdate(&one); !s.ok()) return s;
  const auto start = Clock::now();
  pending->served = scheduler_->weight_version().version;
  pending->staged.clear();
  return StageEach(
      members, pending->served, start,
      [&](const std::string& address, v1::StageWeightsResponse* answer) {
        grpc::ClientContext ctx;
        return Stub(address)->StageWeightsFromDistributed(&ctx, request, answer);
      },
      &pending->staged, &pending->response);
}

grpc::Status AdminService::CommitPendingNow(PendingUpdate* pending, const std::string& label,
                                            v1::UpdateWeightsResponse* response) {
  std::unique_lock<std::timed_mutex> one;
  if (grpc::Status s = LockUpdate(&one); !s.ok()) return s;
  std::vector<Staged> staged = std::move(pending->staged);
  pending->staged.clear();
  const int64_t served = scheduler_->weight_version().version;
  if (served != pending->served) {
    Discard(staged);
    return Error(grpc::StatusCode::ABORTED,
                 "another update (version " + std::to_string(served) +
                     ") was committed after this one was staged on version " +
                     std::to_string(pending->served) + ": it was dropped; version " +
                     std::to_string(served) + " still serving");
  }
  *response = pending->response;
  return Commit(staged, label, response);
}

void AdminService::DiscardPending(PendingUpdate* pending) {
  Discard(pending->staged);
  pending->staged.clear();
}

grpc::Status AdminService::DestroyWeightUpdateGroup(
    grpc::ServerContext* context, const v1::DestroyWeightUpdateGroupRequest* request,
    v1::DestroyWeightUpdateGroupResponse* /*response*/) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  return DestroyGroupNow(*request);
}

grpc::Status AdminService::DestroyGroupNow(const v1::DestroyWeightUpdateGroupRequest& req) {
  const v1::DestroyWeightUpdateGroupRequest* request = &req;
  const std::string name = GroupName(request->group_name());
  std::vector<std::string> members;
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    auto it = groups_.find(name);
    if (it == groups_.end()) {
      return Error(grpc::StatusCode::NOT_FOUND, "no weight-update group '" + name + "'");
    }
    members = std::move(it->second);
    groups_.erase(it);
  }
  LeaveGroup(name, members);
  LOG(INFO) << "weights: NCCL group '" << name << "' destroyed";
  return grpc::Status::OK;
}

namespace {

// The tags a memory call names (empty = all); what is not ours to free is the worker's to refuse.
void MemoryTagsOf(const google::protobuf::RepeatedPtrField<std::string>& tags, bool* weights,
                  bool* kv) {
  *weights = tags.empty();
  *kv = tags.empty();
  for (const std::string& t : tags) {
    *weights |= t == "weights";
    *kv |= t == "kv_cache";
  }
}

}  // namespace

grpc::Status AdminService::ResumeAllowed() const {
  std::lock_guard<std::mutex> lock(memory_mu_);
  if (weights_released_ || kv_released_) {
    return Error(
        grpc::StatusCode::FAILED_PRECONDITION,
        std::string("the GPU memory of ") +
            (weights_released_ ? (kv_released_ ? "the weights and the KV cache" : "the weights")
                               : "the KV cache") +
            " is released: ResumeMemory first");
  }
  if (weights_need_update_) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 "the weights were released without a copy: update them before resuming");
  }
  return grpc::Status::OK;
}

void AdminService::MaybeEndImplicitPause() {
  {
    std::lock_guard<std::mutex> lock(memory_mu_);
    if (!implicit_pause_ || weights_released_ || kv_released_ || weights_need_update_) return;
    implicit_pause_ = false;
  }
  scheduler_->Resume();
  LOG(INFO) << "admin: GPU memory is back: generation continues";
}

grpc::Status AdminService::ReleaseMemory(grpc::ServerContext* context,
                                         const v1::ReleaseMemoryRequest* request,
                                         v1::ReleaseMemoryResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  return ReleaseMemoryNow(*request, response);
}

grpc::Status AdminService::ReleaseMemoryNow(const v1::ReleaseMemoryRequest& request,
                                            v1::ReleaseMemoryResponse* response,
                                            bool pause_if_running) {
  std::vector<std::string> addresses;
  if (grpc::Status s = CudaMembers("releasing GPU memory", &addresses); !s.ok()) return s;
  if (scheduler_->weight_version().paused == sched::PauseMode::kNone) {
    if (!pause_if_running) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION,
                   "generation is running: pause it first (Pause with mode abort or drain)");
    }
    // SGLang's and vLLM's routes release an idle engine: running requests finish first, and
    // generation continues once everything is back (MaybeEndImplicitPause).
    auto paused = scheduler_->Pause(sched::PauseMode::kDrain, sched::Clock::time_point::max());
    if (!paused.ok()) return rpc::ToGrpcStatus(paused.status());
    std::lock_guard<std::mutex> lock(memory_mu_);
    implicit_pause_ = true;
  }
  bool weights = false, kv = false;
  MemoryTagsOf(request.tags(), &weights, &kv);
  std::unique_lock<std::timed_mutex> one;  // no update meanwhile
  if (grpc::Status s = LockUpdate(&one, "releasing memory"); !s.ok()) return s;
  // The prefix cache's pages lose their contents with the KV pool.
  if (kv) scheduler_->FlushCache();
  std::vector<v1::ReleaseMemoryResponse> answers(addresses.size());
  const std::vector<grpc::Status> statuses = OnEach(addresses.size(), [&](size_t i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(kChecksumTimeout));
    return Stub(addresses[i])->ReleaseMemory(&ctx, request, &answers[i]);
  });
  int64_t bytes = 0, free_bytes = -1;
  grpc::Status failure;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (!statuses[i].ok()) {
      if (failure.ok()) failure = WithWorker(addresses[i], statuses[i]);
      continue;
    }
    bytes += answers[i].bytes_released();
    if (free_bytes < 0 || answers[i].device_free_bytes() < free_bytes) {
      free_bytes = answers[i].device_free_bytes();
    }
  }
  {
    // Whatever a worker released counts (others may have refused): ResumeMemory takes it back.
    std::lock_guard<std::mutex> lock(memory_mu_);
    if (bytes > 0 || failure.ok()) {
      weights_released_ |= weights;
      kv_released_ |= kv;
      weights_need_update_ |= weights && !request.keep_weights_on_host();
    }
  }
  if (!failure.ok()) return failure;
  response->set_bytes_released(bytes);
  response->set_device_free_bytes(free_bytes);
  LOG(INFO) << "admin: released " << bytes << " bytes of GPU memory on " << addresses.size()
            << " worker(s)";
  return grpc::Status::OK;
}

grpc::Status AdminService::ResumeMemory(grpc::ServerContext* context,
                                        const v1::ResumeMemoryRequest* request,
                                        v1::ResumeMemoryResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  return ResumeMemoryNow(*request, response);
}

grpc::Status AdminService::ResumeMemoryNow(const v1::ResumeMemoryRequest& request,
                                           v1::ResumeMemoryResponse* response) {
  std::vector<std::string> addresses;
  if (grpc::Status s = CudaMembers("resuming GPU memory", &addresses); !s.ok()) return s;
  bool weights = false, kv = false;
  MemoryTagsOf(request.tags(), &weights, &kv);
  std::vector<v1::ResumeMemoryResponse> answers(addresses.size());
  const std::vector<grpc::Status> statuses = OnEach(addresses.size(), [&](size_t i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(kChecksumTimeout));
    return Stub(addresses[i])->ResumeMemory(&ctx, request, &answers[i]);
  });
  int64_t bytes = 0, free_bytes = -1;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (!statuses[i].ok()) return WithWorker(addresses[i], statuses[i]);
    bytes += answers[i].bytes_restored();
    if (free_bytes < 0 || answers[i].device_free_bytes() < free_bytes) {
      free_bytes = answers[i].device_free_bytes();
    }
  }
  {
    std::lock_guard<std::mutex> lock(memory_mu_);
    if (weights) weights_released_ = false;
    if (kv) kv_released_ = false;
  }
  MaybeEndImplicitPause();
  response->set_bytes_restored(bytes);
  response->set_device_free_bytes(free_bytes);
  LOG(INFO) << "admin: took back " << bytes << " bytes of GPU memory on " << addresses.size()
            << " worker(s)";
  return grpc::Status::OK;
}

grpc::Status AdminService::GetWeightVersion(grpc::ServerContext* context,
                                            const v1::GetWeightVersionRequest*,
                                            v1::GetWeightVersionResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  const sched::WeightVersionInfo v = scheduler_->weight_version();
  response->set_version(v.version);
  response->set_label(v.label);
  response->set_committed_unix_ns(v.committed_unix_ns);
  response->set_paused(ToProto(v.paused));
  return grpc::Status::OK;
}

grpc::Status AdminService::GetWeightsChecksum(grpc::ServerContext* context,
                                              const v1::GetWeightsChecksumRequest* request,
                                              v1::GetWeightsChecksumResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  const std::vector<std::string> addresses = scheduler_->UpWorkerAddresses();
  if (addresses.empty()) return Error(grpc::StatusCode::UNAVAILABLE, "no worker is up");
  std::vector<v1::GetWeightsChecksumResponse> answers(addresses.size());
  for (size_t i = 0; i < addresses.size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(kChecksumTimeout));
    grpc::Status s = Stub(addresses[i])->WeightsChecksum(&ctx, *request, &answers[i]);
    if (!s.ok()) return WithWorker(addresses[i], s);
  }
  *response = answers[0];
  for (int t = 0; t < response->tensors_size(); ++t) {
    v1::TensorChecksum* c = response->mutable_tensors(t);
    bool same = true;
    for (const auto& a : answers) {
      same &= a.tensors_size() == response->tensors_size() &&
              a.tensors(t).xxh64() == c->xxh64() && a.tensors(t).source() == c->source();
    }
    c->set_consistent(same);
    if (!same) {
      for (const auto& a : answers) {
        c->add_per_worker(t < a.tensors_size() ? a.tensors(t).xxh64() : 0);
      }
    }
  }
  for (const auto& a : answers) {
    if (a.version() != response->version()) {
      LOG(WARNING) << "checksum: workers report versions " << a.version() << " and "
                   << response->version();
    }
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Pause(grpc::ServerContext* context, const v1::PauseRequest* request,
                                 v1::PauseResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  sched::PauseMode mode;
  switch (request->mode()) {
    case v1::PAUSE_MODE_ABORT:
      mode = sched::PauseMode::kAbort;
      break;
    case v1::PAUSE_MODE_DRAIN:
      mode = sched::PauseMode::kDrain;
      break;
    case v1::PAUSE_MODE_KEEP:
      mode = sched::PauseMode::kKeep;
      break;
    default:
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   "mode: expected PAUSE_MODE_ABORT, PAUSE_MODE_DRAIN or PAUSE_MODE_KEEP");
  }
  const Clock::time_point deadline = rpc::SteadyDeadlineOrMax(context->deadline());
  auto result = scheduler_->Pause(mode, deadline);
  if (!result.ok()) return rpc::ToGrpcStatus(result.status());
  response->set_mode(request->mode());
  response->set_aborted(result->aborted);
  response->set_frozen(result->frozen);
  response->set_drained(result->drained);
  response->set_queued(result->queued);
  for (const std::string& id : result->request_ids) response->add_request_ids(id);
  return grpc::Status::OK;
}

grpc::Status AdminService::Resume(grpc::ServerContext* context, const v1::ResumeRequest*,
                                  v1::ResumeResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  if (grpc::Status allowed = ResumeAllowed(); !allowed.ok()) return allowed;
  const sched::ResumeResult r = scheduler_->Resume();
  response->set_was_paused(r.was_paused);
  response->set_paused_ns(r.paused_ns);
  return grpc::Status::OK;
}

grpc::Status AdminService::FlushCache(grpc::ServerContext* context, const v1::FlushCacheRequest*,
                                      v1::FlushCacheResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  // Safe while requests run: pages their sequences hold stay theirs; only the cache lets go.
  response->set_pages_freed(scheduler_->FlushCache());
  return grpc::Status::OK;
}

grpc::Status AdminService::DrainWorker(grpc::ServerContext* context,
                                       const v1::DrainWorkerRequest* request,
                                       v1::DrainWorkerResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  if (request->address().empty()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "address: empty (GetServerStats lists them)");
  }
  if (request->timeout_s() < 0 || request->timeout_s() > 24 * 3600) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "timeout_s: " + std::to_string(request->timeout_s()) + " outside [0, 86400]");
  }
  // Waits until the worker left, or the call's deadline (the drain goes on then).
  const auto deadline = rpc::SteadyDeadlineOrMax(context->deadline());
  auto drained = scheduler_->DrainWorker(request->address(),
                                         std::chrono::seconds(request->timeout_s()),
                                         /*wait=*/true, deadline, /*exclude=*/true);
  if (!drained.ok()) {
    return Error(static_cast<grpc::StatusCode>(drained.status().code()),
                 std::string(drained.status().message()));
  }
  response->set_address(drained->address);
  response->set_finished(drained->finished);
  response->set_moved(drained->moved);
  response->set_drain_ns(drained->drain_ns);
  LOG(INFO) << "admin: worker " << drained->address << " drained (" << drained->finished
            << " sequences finished there, " << drained->moved << " moved)";
  return grpc::Status::OK;
}

}  // namespace astr::front
