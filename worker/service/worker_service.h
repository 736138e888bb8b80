// The astr.v1.Worker gRPC service: Info and the step stream around one WorkerExecutor.
//
// One Step stream at a time: the executor's state belongs to the scheduler on the other end, so a
// second concurrent stream is refused with FAILED_PRECONDITION. When a stream ends (the scheduler
// closed it, crashed or was cut off) every live sequence is dropped, so a reconnecting scheduler
// starts from no live sequences. A refused plan is answered with error_code / error_message and
// the stream goes on; an internal failure of the runner ends the stream with that status.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "astr/v1/worker.grpc.pb.h"
#include "common/metrics/registry.h"
#include "worker/service/executor.h"
#include "worker/service/weight_updates.h"
#include "worker/service/worker_metrics.h"

namespace astr {

// StageWeights is served from the received bytes (StageWeightsRaw), not through the generated
// protobuf handler: the constructor puts a ByteBuffer handler in its place.
class WorkerService final : public v1::Worker::Service {
 public:
  // `static_info` holds the model, pool and limits (LoadWorker's info); counters are added per
  // call.
  // `updates` null: the weight-update calls answer UNIMPLEMENTED.
  WorkerService(v1::InfoResponse static_info, std::unique_ptr<WorkerExecutor> executor,
                std::unique_ptr<WeightUpdates> updates = nullptr);

  grpc::Status Info(grpc::ServerContext* context, const v1::InfoRequest* request,
                    v1::InfoResponse* response) override;
  grpc::Status Step(grpc::ServerContext* context,
                    grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) override;

  // Weight updates (worker_weights_rpc.cc; worker.proto). Worker.StageWeights: each
  // UpdateWeightsRequest parsed from the bytes gRPC received (raw_update_message.h).
  grpc::Status StageWeightsRaw(grpc::ServerContext* context,
                               grpc::ServerReader<grpc::ByteBuffer>* reader,
                               v1::StageWeightsResponse* response);
  // The generated typed handler, replaced: never called.
  grpc::Status StageWeights(grpc::ServerContext* context,
                            grpc::ServerReader<v1::UpdateWeightsRequest>* reader,
                            v1::StageWeightsResponse* response) override;
  grpc::Status StageWeightsFromDisk(grpc::ServerContext* context,
                                    const v1::UpdateWeightsFromDiskRequest* request,
                                    v1::StageWeightsResponse* response) override;
  grpc::Status ControlWeights(grpc::ServerContext* context,
                              const v1::ControlWeightsRequest* request,
                              v1::ControlWeightsResponse* response) override;
  grpc::Status WeightsChecksum(grpc::ServerContext* context,
                               const v1::GetWeightsChecksumRequest* request,
                               v1::GetWeightsChecksumResponse* response) override;
  // NCCL weight-update groups (worker_weight_groups.cc).
  grpc::Status JoinWeightGroup(grpc::ServerContext* context,
                               const v1::JoinWeightGroupRequest* request,
                               v1::JoinWeightGroupResponse* response) override;
  grpc::Status StageWeightsFromDistributed(grpc::ServerContext* context,
                                           const v1::UpdateWeightsFromDistributedRequest* request,
                                           v1::StageWeightsResponse* response) override;
  grpc::Status StageWeightsFromTensor(grpc::ServerContext* context,
                                      const v1::UpdateWeightsFromTensorRequest* request,
                                      v1::StageWeightsResponse* response) override;
  grpc::Status LeaveWeightGroup(grpc::ServerContext* context,
                                const v1::DestroyWeightUpdateGroupRequest* request,
                                v1::DestroyWeightUpdateGroupResponse* response) override;
  // Device memory by tag (worker_memory_rpc.cc).
  grpc::Status ReleaseMemory(grpc::ServerContext* context, const v1::ReleaseMemoryRequest* request,
                             v1::ReleaseMemoryResponse* response) override;
  grpc::Status ResumeMemory(grpc::ServerContext* context, const v1::ResumeMemoryRequest* request,
                            v1::ResumeMemoryResponse* response) override;

  // Shutdown, step one. Refuses new streams and marks Info and every step answer `draining`, so
  // the scheduler starts nothing new here; the sequences running on the open stream may finish
  // for up to `finish_timeout` (the scheduler closes the stream once they are done; a stream with
  // nothing live is ended at once). Then the cut: the stream ends (UNAVAILABLE) once the step it
  // is executing has been answered (at most `step_grace`), or at once when it waits for a plan.
  // Returns when no stream is open. Then grpc::Server::Shutdown has nothing left to wait for but
  // idle connections.
  void Drain(std::chrono::milliseconds finish_timeout, std::chrono::milliseconds step_grace);
  // Whether Drain has begun.
  bool draining() const { return draining_.load(std::memory_order_relaxed); }

  // The worker's Prometheus metrics (docs/metrics.md) in the text format 0.0.4, the body of
  // GET /metrics (Content-Type metrics::kTextContentType). Thread-safe.
  std::string RenderMetrics() const { return registry_.Render(); }

 private:
  // Runs the plans of one stream until it ends.
  grpc::Status ServeStream(grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream);
  // Frees the executor and the stream slot once a stream has ended.
  void EndStream();

  const v1::InfoResponse static_info_;
  const std::unique_ptr<WorkerExecutor> executor_;
  const std::unique_ptr<WeightUpdates> updates_;
  metrics::Registry registry_;
  WorkerMetrics metrics_{&registry_, static_info_, executor_.get()};  // observed by the stream
  // The NCCL groups this worker joined, by name. A group's mutex is held by an update receiving
  // through it (and by LeaveWeightGroup, which waits for that update).
  struct WeightGroup {
    std::mutex mu;
    std::unique_ptr<WeightReceiver> receiver;
  };
  std::mutex groups_mu_;
  std::map<std::string, std::shared_ptr<WeightGroup>> groups_;
  // Held while a step executes and while weights are swapped: a swap happens between steps.
  std::mutex exec_mu_;

  // One lock per step (never per token): which stream owns the executor and whether it is inside
  // a step, so that Drain can cancel an idle stream without cutting a step's answer off.
  std::mutex mu_;
  std::condition_variable stream_closed_;
  grpc::ServerContext* stream_ = nullptr;  // the open Step stream, if any
  bool in_step_ = false;                   // between reading a plan and writing its result
  bool stopping_ = false;                  // Drain's cut: no further plan is executed
  std::atomic<bool> draining_{false};      // Drain began (read by Info and each step unlocked)
};

}  // namespace astr
