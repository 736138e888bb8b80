#include "worker/service/worker_service.h"

#include <chrono>

#include "common/base/clock.h"
#include "common/grpc/grpc_status.h"
#include "common/grpc/raw_client_stream.h"

namespace astr {

WorkerService::WorkerService(v1::InfoResponse static_info, std::unique_ptr<WorkerExecutor> executor,
                             std::unique_ptr<WeightUpdates> updates)
    : static_info_(std::move(static_info)),
      executor_(std::move(executor)),
      updates_(std::move(updates)) {
  MarkMethodStreamed(rpc::ClientStreamIndex("astr.v1.Worker", "StageWeights"),
                     rpc::RawClientStreamHandler(this, &WorkerService::StageWeightsRaw));
}

grpc::Status WorkerService::StageWeights(grpc::ServerContext*,
                                         grpc::ServerReader<v1::UpdateWeightsRequest>*,
                                         v1::StageWeightsResponse*) {
  return grpc::Status(grpc::StatusCode::INTERNAL, "StageWeights is served by StageWeightsRaw");
}

grpc::Status WorkerService::Info(grpc::ServerContext* /*context*/,
                                 const v1::InfoRequest* /*request*/, v1::InfoResponse* response) {
  *response = static_info_;
  const WorkerExecutor::Counters counters = executor_->counters();
  response->set_live_sequences(static_cast<int32_t>(counters.live_sequences));
  response->set_pages_in_use(counters.pages_in_use);
  response->set_steps(counters.steps);
  response->set_weight_version(executor_->weight_version());
  response->set_draining(draining_.load(std::memory_order_relaxed));
  return grpc::Status::OK;
}

grpc::Status WorkerService::Step(grpc::ServerContext* context,
                                 grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is shutting down");
    }
    if (stream_ != nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "another Step stream is open on this worker; one scheduler drives a "
                          "worker at a time");
    }
    stream_ = context;
  }
  // However ServeStream ends, by a status or by an exception out of a step (an allocation failure,
  // which gRPC answers with UNKNOWN), the executor and the stream slot are freed for the next one.
  struct EndStream {
    WorkerService* service;
    ~EndStream() { service->EndStream(); }
  } end{this};
  return ServeStream(stream);
}

void WorkerService::EndStream() {
  // Drop the stream's sequences before another stream may take the executor.
  {
    std::lock_guard<std::mutex> exec(exec_mu_);
    executor_->Reset();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream_ = nullptr;
    // A stream that ended inside a step (runner failure) must not leave the next one marked busy.
    in_step_ = false;
  }
  stream_closed_.notify_all();
}

grpc::Status WorkerService::ServeStream(
    grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) {
  grpc::Status draining(grpc::StatusCode::UNAVAILABLE, "worker is shutting down");
  v1::StepPlan plan;
  v1::StepResult result;
  // A step whose masks follow reads them from the stream after its forward pass.
  const WorkerExecutor::ReadNext read_next = [stream](v1::StepPlan* m) { return stream->Read(m); };
  while (stream->Read(&plan)) {
    // The masks of a step that was refused (its answer is sent): nothing to do with them.
    if (plan.masks_for_step() != 0) continue;
    const auto received = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return draining;  // a plan that arrives after the cut is not executed
      in_step_ = true;
    }
    Status status;
    {
      std::lock_guard<std::mutex> exec(exec_mu_);
      status = executor_->Execute(plan, &result, read_next);
    }
    const bool executed = status.ok();
    if (!status.ok()) {
      if (status.code() != StatusCode::kInvalidArgument) return rpc::ToGrpcStatus(status);
      result.Clear();
      result.set_step_id(plan.step_id());
      result.set_error_code(static_cast<int32_t>(status.code()));
      result.set_error_message(status.message());
    }
    result.set_step_ns(NanosSince(received));
    // While draining, every answer tells the scheduler to start nothing new here.
    result.set_draining(draining_.load(std::memory_order_relaxed));
    if (executed) metrics_.ObserveStep(plan, result);
    const bool written = stream->Write(result);
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_step_ = false;
      if (stopping_) return draining;
    }
    if (!written) break;
  }
  return grpc::Status::OK;
}

void WorkerService::Drain(std::chrono::milliseconds finish_timeout,
                          std::chrono::milliseconds step_grace) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_.store(true);
  // Graceful part: the scheduler learns of the drain from the next answer (or Info) and closes
  // the stream once the sequences running here are done. A stream with nothing live on it, idle
  // in Read, is ended now: no answer would ever carry the news.
  // That holds at any moment of the wait: a step in flight when the drain began may have been
  // answered before draining_ was set, leaving an idle stream whose scheduler never hears of
  // the drain. So the stream is looked at again every kDrainPoll and cut once it is idle.
  constexpr auto kDrainPoll = std::chrono::milliseconds(50);
  const auto give_up = std::chrono::steady_clock::now() + finish_timeout;
  while (stream_ != nullptr && std::chrono::steady_clock::now() < give_up) {
    if (!in_step_ && executor_->counters().live_sequences == 0) break;  // idle: cut it now
    const auto left = give_up - std::chrono::steady_clock::now();
    stream_closed_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(left, kDrainPoll),
                            [this] { return stream_ == nullptr; });
  }
  // The cut: the step being executed is answered, then the stream ends; an idle stream is blocked
  // in Read, and cancelling it is the only way to wake it.
  stopping_ = true;
  if (stream_ != nullptr && !in_step_) stream_->TryCancel();
  stream_closed_.wait_for(lock, step_grace, [this] { return stream_ == nullptr; });
}

}  // namespace astr
