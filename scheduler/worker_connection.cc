// The gRPC WorkerConnection: one channel to astr-worker, its Info and one bidirectional Step
// stream driven synchronously (Send = Write, Receive = Read) by the scheduler's loop thread.
#include "scheduler/worker_connection.h"

#include <grpcpp/grpcpp.h>

#include "astr/v1/worker.grpc.pb.h"
#include "common/service/grpc_status.h"

namespace astr::sched {
namespace {

using StepStream = grpc::ClientReaderWriter<v1::StepPlan, v1::StepResult>;
using Clock = std::chrono::steady_clock;

// Plans of large prefills (many token ids in SequenceStart) exceed gRPC's 4 MiB default.
constexpr int kMaxMessageBytes = 64 << 20;

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // A restarted worker should be found again within a fraction of a second, not after gRPC's
  // default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

class GrpcWorkerConnection final : public WorkerConnection {
 public:
  explicit GrpcWorkerConnection(std::string address)
      : address_(std::move(address)),
        channel_(MakeChannel(address_)),
        stub_(v1::Worker::NewStub(channel_)) {}

  ~GrpcWorkerConnection() override { CloseStream(); }

  const std::string& address() const override { return address_; }
  const v1::InfoResponse& info() const override { return info_; }

  StatusOr<v1::InfoResponse> RefreshInfo() override {
    return CallInfo(Clock::now() + std::chrono::seconds(5));
  }

  // Reads Info (waiting for the worker to come up until `deadline`), then opens the stream.
  Status Open(Clock::time_point deadline) {
    StatusOr<v1::InfoResponse> info = CallInfo(deadline);
    if (!info.ok()) return info.status();
    info_ = std::move(*info);
    context_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->Step(context_.get());
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
    if (!stream_->Read(result)) return Broken("read");
    return OkStatus();
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
    context.set_deadline(std::chrono::system_clock::now() + (deadline - Clock::now()));
    // Waits for the channel to connect (retrying with the backoff above) instead of failing on
    // the first refused connection: a worker that is still loading its model is not down.
    context.set_wait_for_ready(true);
    v1::InfoResponse info;
    grpc::Status status = stub_->Info(&context, v1::InfoRequest(), &info);
    if (!status.ok()) return FromGrpcStatus(status).WithContext("worker " + address_ + ": Info");
    return info;
  }

  // The stream failed in `op`: collect the call's status and keep it as UNAVAILABLE.
  Status Broken(const char* op) {
    grpc::Status status = stream_->Finish();
    std::string why = status.ok() ? "the worker closed the step stream" : status.error_message();
    if (status.error_code() != grpc::StatusCode::OK &&
        status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      why = std::string(StatusCodeName(static_cast<StatusCode>(status.error_code()))) + ": " + why;
    }
    stream_.reset();
    context_.reset();
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
    context_.reset();
  }

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  v1::InfoResponse info_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<StepStream> stream_;
  Status broken_ = UnavailableError("step stream not open");
};

}  // namespace

StatusOr<std::unique_ptr<WorkerConnection>> ConnectWorker(const std::string& address,
                                                          std::chrono::milliseconds timeout) {
  auto conn = std::make_unique<GrpcWorkerConnection>(address);
  Status status = conn->Open(std::chrono::steady_clock::now() + timeout);
  if (!status.ok()) {
    return Status(status.code(),
                  status.message() + " (gave up after " + std::to_string(timeout.count()) + " ms)");
  }
  return std::unique_ptr<WorkerConnection>(std::move(conn));
}

}  // namespace astr::sched
