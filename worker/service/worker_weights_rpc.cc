// The weight-update calls of astr.v1.Worker (worker.proto): staging runs on the calling thread
// beside the step stream; ControlWeights APPLY / ROLLBACK take the step lock, so that the served
// weights change between two steps.
#include <malloc.h>

#include <chrono>
#include <string>

#include "common/base/logging.h"
#include "common/grpc/grpc_status.h"
#include "common/grpc/raw_update_message.h"
#include "worker/service/worker_service.h"

namespace astr {
namespace {

grpc::Status NoUpdates() {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this worker cannot update its weights");
}

// How long a stage waits for one under way to end. The scheduler runs one update at a time, so
// what it waits for is the teardown of a push that was cancelled or broke (its stream ends on the
// worker a moment after the scheduler gave up on it); the same as the scheduler's own wait for
// the update lock.
constexpr std::chrono::seconds kStagingWait{30};

grpc::Status Busy() {
  return grpc::Status(grpc::StatusCode::ABORTED,
                      "another weight update has been staged on this worker for " +
                          std::to_string(kStagingWait.count()) + " s");
}

}  // namespace

grpc::Status WorkerService::StageWeightsRaw(grpc::ServerContext* context,
                                            grpc::ServerReader<grpc::ByteBuffer>* reader,
                                            v1::StageWeightsResponse* response) {
  if (updates_ == nullptr) return NoUpdates();
  if (!updates_->BeginStaging(kStagingWait)) return Busy();
  StagingLease lease{updates_.get()};
  // Built as the tensors come where the backend can (the CPU backend), else from all of them.
  std::unique_ptr<WeightBuilder> builder;
  if (auto b = executor_->mutable_runner().BeginWeights(); b.ok()) builder = std::move(*b);
  WeightStager stager(updates_->config(), builder.get());
  grpc::ByteBuffer bytes;
  bool first = true;
  // Each chunk's data goes to the stager from the received slices, piece by piece.
  auto add = [&](int32_t tensor, int64_t offset, ChunkPieces pieces) -> Status {
    for (const auto& piece : pieces) {
      ASTR_RETURN_IF_ERROR(stager.Add(tensor, offset, piece.data(), piece.size()));
      offset += static_cast<int64_t>(piece.size());
    }
    if (pieces.empty()) ASTR_RETURN_IF_ERROR(stager.Add(tensor, offset, nullptr, 0));
    return OkStatus();
  };
  auto skip = [](int32_t, int64_t, ChunkPieces) { return OkStatus(); };
  while (reader->Read(&bytes)) {
    if (first) {
      // The manifest may stand anywhere in the first message: read it before its chunks.
      RawUpdateMessage head;
      if (Status s = ParseRawUpdateMessage(bytes, &head, skip); !s.ok()) {
        return rpc::ToGrpcStatus(s);
      }
      if (!head.has_manifest) {
        return rpc::ToGrpcStatus(
            InvalidArgumentError("manifest: the first message must carry the manifest"));
      }
      if (Status s = stager.Begin(head.manifest); !s.ok()) return rpc::ToGrpcStatus(s);
    }
    RawUpdateMessage message;
    if (Status s = ParseRawUpdateMessage(bytes, &message, add); !s.ok()) {
      return rpc::ToGrpcStatus(s);
    }
    if (message.has_manifest && !first) {
      return rpc::ToGrpcStatus(InvalidArgumentError("manifest: only the first message carries it"));
    }
    first = false;
  }
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the update stream was cancelled");
  }
  auto tensors = stager.Finish();
  if (!tensors.ok()) return rpc::ToGrpcStatus(tensors.status());
  auto staged = updates_->StageTensors(std::move(*tensors), stager.bytes_received(),
                                       executor_->mutable_runner(), std::move(builder));
  if (!staged.ok()) return rpc::ToGrpcStatus(staged.status());
  *response = *staged;
  LOG(INFO) << "weights: staged update " << response->staged_id() << " (" << response->tensors()
            << " tensors, " << response->bytes() << " bytes)";
  return grpc::Status::OK;
}

grpc::Status WorkerService::StageWeightsFromDisk(grpc::ServerContext* /*context*/,
                                                 const v1::UpdateWeightsFromDiskRequest* request,
                                                 v1::StageWeightsResponse* response) {
  if (updates_ == nullptr) return NoUpdates();
  if (request->path().empty()) {
    return rpc::ToGrpcStatus(InvalidArgumentError("path: empty"));
  }
  if (!updates_->BeginStaging(kStagingWait)) return Busy();
  StagingLease lease{updates_.get()};
  auto staged = updates_->StageFromDisk(request->path(), executor_->mutable_runner());
  if (!staged.ok()) return rpc::ToGrpcStatus(staged.status());
  *response = *staged;
  LOG(INFO) << "weights: staged update " << response->staged_id() << " from " << request->path();
  return grpc::Status::OK;
}

grpc::Status WorkerService::ControlWeights(grpc::ServerContext* /*context*/,
                                           const v1::ControlWeightsRequest* request,
                                           v1::ControlWeightsResponse* response) {
  if (updates_ == nullptr) return NoUpdates();
  std::vector<std::unique_ptr<WeightSet>> dropped;
  StatusOr<int64_t> version = 0;
  {
    std::lock_guard<std::mutex> exec(exec_mu_);
    version = updates_->Control(*request, executor_->mutable_runner(), *executor_, &dropped);
  }
  if (!dropped.empty()) {
    // Outside the step lock: kept as the spare set to build the next update into, or freed.
    for (auto& set : dropped) executor_->mutable_runner().RecycleWeights(std::move(set));
    dropped.clear();
    // Hand the freed pages back to the system: glibc keeps freed heap memory (and raises its mmap
    // threshold after large frees), so without this a worker's RSS would keep the old weights.
    malloc_trim(0);
  }
  if (!version.ok()) return rpc::ToGrpcStatus(version.status());
  response->set_version(*version);
  return grpc::Status::OK;
}

grpc::Status WorkerService::WeightsChecksum(grpc::ServerContext* /*context*/,
                                            const v1::GetWeightsChecksumRequest* request,
                                            v1::GetWeightsChecksumResponse* response) {
  if (updates_ == nullptr) return NoUpdates();
  return rpc::ToGrpcStatus(updates_->Checksums(*request, response));
}

}  // namespace astr
