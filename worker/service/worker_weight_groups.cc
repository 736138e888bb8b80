// The GPU transports on the worker: NCCL weight-update groups (worker.proto JoinWeightGroup,
// StageWeightsFromDistributed, LeaveWeightGroup; docs/rl.md "NCCL broadcast") and CUDA IPC
// (StageWeightsFromTensor; docs/rl.md "CUDA IPC"). The backend holds the communicator and the
// device buffer (Backend::JoinWeightGroup) or opens the trainer's buffers (Backend::OpenIpcBuffer);
// here the bytes are cut back into the manifest's tensors and fed to the same WeightStager as a
// gRPC push, so the checks and the commit are the same.

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/grpc/grpc_status.h"
#include "worker/service/worker_service.h"

namespace astr {
namespace {

constexpr int64_t kDefaultBucketBytes = int64_t{512} << 20;
constexpr std::chrono::milliseconds kDefaultGroupTimeout{300000};
constexpr std::chrono::seconds kStagingWait{30};

std::string GroupName(const std::string& name) { return name.empty() ? "default" : name; }

// Bytes per element of a manifest dtype; 0 when it is not one (the stager names the entry).
size_t ItemSize(const std::string& dtype) {
  if (dtype == "f32" || dtype == "float32") return 4;
  if (dtype == "f16" || dtype == "float16" || dtype == "bf16" || dtype == "bfloat16") return 2;
  return 0;
}

BroadcastType TypeOf(const std::string& dtype) {
  if (dtype == "f32" || dtype == "float32") return BroadcastType::kF32;
  if (dtype == "f16" || dtype == "float16") return BroadcastType::kF16;
  return BroadcastType::kBF16;
}

// Where the next bytes of an update laid out in manifest order go.
struct ManifestCursor {
  size_t tensor = 0;
  uint64_t offset = 0;
};

// Hands `n` bytes to the stager as the next bytes of the manifest's tensors, in order (a tensor's
// bytes may arrive in several calls, one call may hold several tensors).
Status FeedInOrder(WeightStager& stager, ManifestCursor* at, const uint8_t* data, uint64_t n,
                   const char* what) {
  uint64_t used = 0;
  while (used < n) {
    while (at->tensor < stager.tensor_count() && at->offset == stager.tensor_bytes(at->tensor)) {
      ++at->tensor;
      at->offset = 0;
    }
    if (at->tensor >= stager.tensor_count()) {
      return InvalidArgumentError(std::string(what) + " runs past the manifest's tensors");
    }
    const uint64_t take = std::min(n - used, stager.tensor_bytes(at->tensor) - at->offset);
    ASTR_RETURN_IF_ERROR(stager.Add(static_cast<int>(at->tensor), static_cast<int64_t>(at->offset),
                                    data + used, take));
    used += take;
    at->offset += take;
  }
  return OkStatus();
}

// Host memory for one copy out of a CUDA IPC buffer.
constexpr uint64_t kIpcPieceBytes = uint64_t{64} << 20;

// One broadcast of an update: its bytes and element type.
struct Piece {
  uint64_t bytes = 0;
  BroadcastType type = BroadcastType::kBytes;
};

// The broadcasts rank 0 makes for `request` (admin.proto UpdateWeightsFromDistributedRequest), from
// the manifest alone, so that a worker that refuses the manifest still takes part in each.
StatusOr<std::vector<Piece>> PlanPieces(const v1::UpdateWeightsFromDistributedRequest& request) {
  std::vector<uint64_t> sizes;
  for (int i = 0; i < request.manifest().tensors_size(); ++i) {
    const v1::TensorSpec& spec = request.manifest().tensors(i);
    const size_t item = ItemSize(spec.dtype());
    uint64_t n = item;
    for (int64_t d : spec.shape()) {
      if (d < 0 || item == 0) {
        return InvalidArgumentError("manifest.tensors[" + std::to_string(i) + "] ('" + spec.name() +
                                    "'): dtype '" + spec.dtype() + "' or shape " +
                                    "invalid: the broadcasts cannot be followed");
      }
      n *= static_cast<uint64_t>(d);
    }
    sizes.push_back(n);
  }
  std::vector<Piece> pieces;
  uint64_t total = 0;
  for (uint64_t n : sizes) total += n;
  if (request.piece_bytes_size() > 0) {
    uint64_t sum = 0;
    for (int i = 0; i < request.piece_bytes_size(); ++i) {
      const int64_t n = request.piece_bytes(i);
      if (n <= 0) {
        return InvalidArgumentError("piece_bytes[" + std::to_string(i) + "]: " + std::to_string(n) +
                                    " (each broadcast is > 0 bytes)");
      }
      sum += static_cast<uint64_t>(n);
      pieces.push_back({static_cast<uint64_t>(n)});
    }
    if (sum != total) {
      return InvalidArgumentError("piece_bytes add up to " + std::to_string(sum) +
                                  " bytes, the manifest's tensors to " + std::to_string(total));
    }
    return pieces;
  }
  if (request.bucket_bytes() == -1) {
    for (int i = 0; i < request.manifest().tensors_size(); ++i) {
      pieces.push_back(
          {sizes[static_cast<size_t>(i)], TypeOf(request.manifest().tensors(i).dtype())});
    }
    return pieces;
  }
  if (request.bucket_bytes() < -1) {
    return InvalidArgumentError("bucket_bytes: " + std::to_string(request.bucket_bytes()) +
                                " (expected > 0, 0 for 512 MiB, or -1 for one per tensor)");
  }
  const uint64_t bucket = static_cast<uint64_t>(
      request.bucket_bytes() == 0 ? kDefaultBucketBytes : request.bucket_bytes());
  for (uint64_t at = 0; at < total; at += bucket) pieces.push_back({std::min(bucket, total - at)});
  return pieces;
}

}  // namespace

grpc::Status WorkerService::JoinWeightGroup(grpc::ServerContext* /*context*/,
                                            const v1::JoinWeightGroupRequest* request,
                                            v1::JoinWeightGroupResponse* response) {
  if (updates_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this worker cannot update its weights");
  }
  const std::string name = GroupName(request->group_name());
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    if (groups_.count(name) != 0) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          "weight-update group '" + name +
                              "' exists on this worker: destroy it "
                              "first");
    }
  }
  WeightGroupSpec spec;
  spec.name = name;
  spec.unique_id = request->nccl_unique_id();
  spec.rank = request->rank();
  spec.world_size = request->world_size();
  spec.timeout = request->timeout_ms() > 0 ? std::chrono::milliseconds(request->timeout_ms())
                                           : kDefaultGroupTimeout;
  spec.warmup_all_reduce = request->warmup_all_reduce();
  auto receiver = executor_->mutable_runner().JoinWeightGroup(spec);
  if (!receiver.ok()) return rpc::ToGrpcStatus(receiver.status());
  response->set_nccl((*receiver)->describe());
  auto group = std::make_shared<WeightGroup>();
  group->receiver = std::move(*receiver);
  std::lock_guard<std::mutex> lock(groups_mu_);
  if (!groups_.emplace(name, std::move(group)).second) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                        "weight-update group '" + name + "' was made twice at once");
  }
  LOG(INFO) << "weights: joined NCCL group '" << name << "' as rank " << spec.rank << " of "
            << spec.world_size << " (" << response->nccl() << ")";
  return grpc::Status::OK;
}

grpc::Status WorkerService::LeaveWeightGroup(grpc::ServerContext* /*context*/,
                                             const v1::DestroyWeightUpdateGroupRequest* request,
                                             v1::DestroyWeightUpdateGroupResponse* /*response*/) {
  const std::string name = GroupName(request->group_name());
  std::shared_ptr<WeightGroup> group;
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    auto it = groups_.find(name);
    if (it == groups_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no weight-update group '" + name + "' on this worker");
    }
    group = std::move(it->second);
    groups_.erase(it);
  }
  std::lock_guard<std::mutex> busy(group->mu);  // an update under way ends first
  group->receiver.reset();
  LOG(INFO) << "weights: left NCCL group '" << name << "'";
  return grpc::Status::OK;
}

grpc::Status WorkerService::StageWeightsFromDistributed(
    grpc::ServerContext* /*context*/, const v1::UpdateWeightsFromDistributedRequest* request,
    v1::StageWeightsResponse* response) {
  if (updates_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this worker cannot update its weights");
  }
  const std::string name = GroupName(request->group_name());
  std::shared_ptr<WeightGroup> group;
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    auto it = groups_.find(name);
    if (it != groups_.end()) group = it->second;
  }
  if (group == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no weight-update group '" + name + "' on this worker");
  }
  std::lock_guard<std::mutex> one(group->mu);
  WeightReceiver* receiver = group->receiver.get();
  if (receiver == nullptr || !receiver->usable()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "weight-update group '" + name +
                            "' was aborted by an earlier failure: destroy it and make it again");
  }
  auto pieces = PlanPieces(*request);
  if (!pieces.ok()) {
    // The broadcasts cannot be followed: leaving the group makes rank 0's broadcast fail instead
    // of waiting for this rank.
    group->receiver.reset();
    return rpc::ToGrpcStatus(pieces.status());
  }
  // Whatever is refused from here on, every broadcast is still received (and dropped), so that
  // the trainer and the other workers are not left waiting and the group stays usable.
  Status refused;
  const bool staging = updates_->BeginStaging(kStagingWait);
  if (!staging) {
    refused = AbortedError("another weight update has been staged on this worker for " +
                           std::to_string(kStagingWait.count()) + " s");
  }
  WeightStager stager(updates_->config());
  if (refused.ok()) refused = stager.Begin(request->manifest());
  uint64_t largest = 0;
  for (const Piece& p : *pieces) largest = std::max(largest, p.bytes);
  std::vector<uint8_t> host(largest);
  ManifestCursor at;
  Status received;
  for (const Piece& p : *pieces) {
    received = receiver->Receive(std::span<uint8_t>(host.data(), p.bytes), p.type);
    if (!received.ok()) break;
    if (refused.ok()) refused = FeedInOrder(stager, &at, host.data(), p.bytes, "a broadcast");
  }
  receiver->ReleaseBuffer();
  host = {};
  if (!received.ok()) {
    LOG(WARNING) << "weights: update through NCCL group '" << name
                 << "' failed, the group is aborted: " << received.message();
  }
  if (staging) {
    StagingLease lease{updates_.get()};
    if (!received.ok()) return rpc::ToGrpcStatus(received);
    if (!refused.ok()) return rpc::ToGrpcStatus(refused);
    auto tensors = stager.Finish();
    if (!tensors.ok()) return rpc::ToGrpcStatus(tensors.status());
    auto staged = updates_->StageTensors(std::move(*tensors), stager.bytes_received(),
                                         executor_->mutable_runner());
    if (!staged.ok()) return rpc::ToGrpcStatus(staged.status());
    *response = *staged;
    LOG(INFO) << "weights: staged update " << response->staged_id() << " from NCCL group '" << name
              << "' (" << response->tensors() << " tensors, " << response->bytes() << " bytes)";
    return grpc::Status::OK;
  }
  if (!received.ok()) return rpc::ToGrpcStatus(received);
  return rpc::ToGrpcStatus(refused);
}

grpc::Status WorkerService::StageWeightsFromTensor(
    grpc::ServerContext* /*context*/, const v1::UpdateWeightsFromTensorRequest* request,
    v1::StageWeightsResponse* response) {
  if (updates_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this worker cannot update its weights");
  }
  if (request->buffers().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "buffers: none given");
  }
  uint64_t total = 0, largest = 0;
  for (int i = 0; i < request->buffers_size(); ++i) {
    const int64_t bytes = request->buffers(i).bytes();
    if (bytes <= 0) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          "buffers[" + std::to_string(i) + "].bytes: " + std::to_string(bytes) + " (expected > 0)");
    }
    total += static_cast<uint64_t>(bytes);
    largest = std::max(largest, static_cast<uint64_t>(bytes));
  }
  if (!updates_->BeginStaging(kStagingWait)) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "another weight update has been staged on this worker for " +
                            std::to_string(kStagingWait.count()) + " s");
  }
  StagingLease lease{updates_.get()};
  WeightStager stager(updates_->config());
  if (Status s = stager.Begin(request->manifest()); !s.ok()) return rpc::ToGrpcStatus(s);
  uint64_t want = 0;
  for (size_t t = 0; t < stager.tensor_count(); ++t) want += stager.tensor_bytes(t);
  if (total != want) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "buffers: " + std::to_string(total) +
                            " bytes in all, the manifest's tensors hold " + std::to_string(want));
  }
  std::vector<uint8_t> host(std::min(largest, kIpcPieceBytes));
  ManifestCursor at;
  for (int i = 0; i < request->buffers_size(); ++i) {
    const std::string field = "buffers[" + std::to_string(i) + "]";
    const uint64_t bytes = static_cast<uint64_t>(request->buffers(i).bytes());
    auto buffer = executor_->mutable_runner().OpenIpcBuffer(request->buffers(i).handle(), bytes);
    if (!buffer.ok()) {
      if (buffer.status().code() == StatusCode::kFailedPrecondition) {
        return rpc::ToGrpcStatus(buffer.status());  // not this buffer's fault: the backend's
      }
      return grpc::Status(static_cast<grpc::StatusCode>(buffer.status().code()),
                          field + "." + std::string(buffer.status().message()));
    }
    for (uint64_t off = 0; off < bytes; off += host.size()) {
      const uint64_t n = std::min<uint64_t>(host.size(), bytes - off);
      if (Status s = (*buffer)->Read(off, std::span<uint8_t>(host.data(), n)); !s.ok()) {
        return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                            field + ": " + std::string(s.message()));
      }
      if (Status s = FeedInOrder(stager, &at, host.data(), n, "the buffers"); !s.ok()) {
        return rpc::ToGrpcStatus(s);
      }
    }
  }
  host = {};
  auto tensors = stager.Finish();
  if (!tensors.ok()) return rpc::ToGrpcStatus(tensors.status());
  auto staged = updates_->StageTensors(std::move(*tensors), stager.bytes_received(),
                                       executor_->mutable_runner());
  if (!staged.ok()) return rpc::ToGrpcStatus(staged.status());
  *response = *staged;
  LOG(INFO) << "weights: staged update " << response->staged_id() << " from "
            << request->buffers_size() << " CUDA IPC buffer(s) (" << response->tensors()
            << " tensors, " << response->bytes() << " bytes)";
  return grpc::Status::OK;
}

}  // namespace astr
