// The gRPC WorkerConnection: one channel to astr-worker, its Info and one bidirectional Step
// stream driven synchronously (Send = Write, Receive = Read) by the scheduler's loop thread.
#include "scheduler/worker_connection.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "astr/v1/worker.grpc.pb.h"
#include "common/grpc/deadline.h"
#include "common/grpc/grpc_status.h"
#include "common/grpc/keepalive.h"
#include "common/grpc/message_limits.h"

namespace astr::sched {
namespace {

using StepStream = grpc::ClientReaderWriter<v1::StepPlan, v1::StepResult>;
using Clock = std::chrono::steady_clock;

// Plans of large prefills (many token ids in SequenceStart) exceed gRPC's 4 MiB default.

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const rpc::ChannelSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(rpc::kMaxMessageBytes);
  args.SetMaxSendMessageSize(rpc::kMaxMessageBytes);
  // A restarted worker should be found again within a fraction of a second, not after gRPC's
  // default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  // A stopped worker is noticed by its missing ping answers (keepalive.h), during a step too.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, rpc::kWorkerKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, rpc::kWorkerKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a long step sends no data
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto credentials = rpc::ClientCredentials(security, &args);
  return grpc::CreateCustomChannel(address, credentials, args);
}

class GrpcWorkerConnection final : public WorkerConnection {
 public:
  GrpcWorkerConnection(std::string address, std::chrono::milliseconds step_timeout,
                       const rpc::ChannelSecurity& security)
      : address_(std::move(address)),
        channel_(MakeChannel(address_, security)),
        stub_(v1::Worker::NewStub(channel_)),
        step_timeout_(step_timeout) {
    if (step_timeout_.count() > 0) watchdog_ = std::thread([this] { Watch(); });
  }

  ~GrpcWorkerConnection() override {
    if (watchdog_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_.notify_one();
      watchdog_.join();
    }
    CloseStream();
  }

  const std::string& address() const override { return address_; }
  const v1::InfoResponse& info() const override { return info_; }

  StatusOr<v1::InfoResponse> RefreshInfo() override {
    return CallInfo(Clock::now() + std::chrono::seconds(5));
  }

  // Reads Info (waiting for the worker to come up until `deadline`), then opens the stream.
  Status Open(Clock::time_point deadline) {
    StatusOr<v1::InfoResponse> info = CallInfo(deadline);
    if (!info.ok()) return info.status();
    if (info->draining()) {
      // It would refuse the stream: a worker that is shutting down takes no new scheduler.
      return FailedPreconditionError("worker " + address_ + " is shutting down (draining)");
    }
    info_ = std::move(*info);
    auto context = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->Step(context.get());
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = std::move(context);
    }
    broken_ = OkStatus();
    return OkStatus();
  }

  Status Send(const v1::StepPlan& plan) override {
    if (!broken_.ok()) return broken_;
    if (!stream_->Write(plan)) return Broken("write");
    return OkStatus();
  }

  Status Receive(v1::StepResult* result) override {
    if (!broken_.ok()) return broken_;
    if (step_timeout_.count() <= 0) {
      if (!stream_->Read(result)) return Broken("read");
      return OkStatus();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiting_ = true;
      timed_out_ = false;
      ++wait_generation_;
      wait_deadline_ = Clock::now() + step_timeout_;
    }
    cv_.notify_one();
    const bool ok = stream_->Read(result);
    bool timed_out = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiting_ = false;
      timed_out = timed_out_;
    }
    if (!ok) {
      return timed_out
                 ? Broken("read", "no result within " + std::to_string(step_timeout_.count()) +
                                      " ms (--step-timeout-ms): the worker stopped answering")
                 : Broken("read");
    }
    return OkStatus();
  }

  // The step stream keeps the channel READY; any other state means its connection went away.
  bool Alive() const override {
    return channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY;
  }

  Status Reconnect(std::chrono::milliseconds timeout) override {
    CloseStream();
    Status status = Open(Clock::now() + timeout);
    if (!status.ok()) broken_ = status;
    return status;
  }

 private:
  StatusOr<v1::InfoResponse> CallInfo(Clock::time_point deadline) {
    grpc::ClientContext context;
    context.set_deadline(rpc::GrpcDeadline(deadline));
    // Waits for the channel to connect (retrying with the backoff above) instead of failing on
    // the first refused connection: a worker that is still loading its model is not down.
    context.set_wait_for_ready(true);
    v1::InfoResponse info;
    grpc::Status status = stub_->Info(&context, v1::InfoRequest(), &info);
    if (!status.ok())
      return rpc::FromGrpcStatus(status).WithContext("worker " + address_ + ": Info");
    return info;
  }

  // The watchdog thread: cancels the stream when a Receive has waited longer than step_timeout_.
  // Every Receive starts a new wait generation, so a wake-up for an earlier one does nothing.
  void Watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!waiting_) {
        cv_.wait(lock);
        continue;
      }
      const uint64_t generation = wait_generation_;
      const Clock::time_point deadline = wait_deadline_;
      const bool woke = cv_.wait_until(
          lock, deadline, [&] { return stop_ || !waiting_ || wait_generation_ != generation; });
      if (woke) continue;
      timed_out_ = true;
      if (context_ != nullptr) context_->TryCancel();  // the blocked Read returns false
      cv_.wait(lock, [&] { return stop_ || !waiting_ || wait_generation_ != generation; });
    }
  }

  // The stream failed in `op`: collect the call's status and keep it as UNAVAILABLE (`reason`,
  // when given, replaces the call's own message).
  Status Broken(const char* op, const std::string& reason = "") {
    grpc::Status status = stream_->Finish();
    std::string why = status.ok() ? "the worker closed the step stream" : status.error_message();
    if (status.error_code() != grpc::StatusCode::OK &&
        status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      why = std::string(StatusCodeName(static_cast<StatusCode>(status.error_code()))) + ": " + why;
    }
    if (!reason.empty()) why = reason;
    stream_.reset();
    ResetContext();
    broken_ = UnavailableError(std::string("step stream ") + op + " failed: " + why);
    return broken_;
  }

  // Ends a stream that may still be open (a worker that refused a plan, or shutdown): cancel and
  // collect its status so the call's resources are freed.
  void CloseStream() {
    if (stream_ == nullptr) return;
    context_->TryCancel();
    v1::StepResult discard;
    while (stream_->Read(&discard)) {
    }
    (void)stream_->Finish();
    stream_.reset();
    ResetContext();
  }

  // context_ is read by the watchdog under mu_.
  void ResetContext() {
    std::lock_guard<std::mutex> lock(mu_);
    context_.reset();
  }

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  v1::InfoResponse info_;
  std::unique_ptr<grpc::ClientContext> context_;  // written under mu_ (the watchdog reads it)
  std::unique_ptr<StepStream> stream_;
  Status broken_ = UnavailableError("step stream not open");

  // Step timeout (0 = none) and its watchdog; the fields below are guarded by mu_.
  const std::chrono::milliseconds step_timeout_;
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool waiting_ = false;    // a Receive is blocked in Read
  bool timed_out_ = false;  // the watchdog cancelled the current Read
  uint64_t wait_generation_ = 0;
  Clock::time_point wait_deadline_;
};

}  // namespace

StatusOr<std::unique_ptr<WorkerConnection>> ConnectWorker(const std::string& address,
                                                          std::chrono::milliseconds timeout,
                                                          std::chrono::milliseconds step_timeout,
                                                          const rpc::ChannelSecurity& security) {
  auto conn = std::make_unique<GrpcWorkerConnection>(address, step_timeout, security);
  Status status = conn->Open(std::chrono::steady_clock::now() + timeout);
  if (!status.ok()) {
    return Status(status.code(),
                  status.message() + " (gave up after " + std::to_string(timeout.count()) + " ms)");
  }
  return std::unique_ptr<WorkerConnection>(std::move(conn));
}

}  // namespace astr::sched
