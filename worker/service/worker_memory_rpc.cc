// ReleaseMemory / ResumeMemory on the worker (worker.proto; docs/rl.md "Releasing GPU memory"):
// the tags are checked here, the backend gives the memory back between two steps.
#include <string>

#include "common/base/logging.h"
#include "common/grpc/grpc_status.h"
#include "worker/service/worker_service.h"

namespace astr {
namespace {

// "" / no tags = all. "cuda_graph(s)" release nothing (graphs stay captured and valid).
StatusOr<MemoryTags> ParseTags(const google::protobuf::RepeatedPtrField<std::string>& tags) {
  MemoryTags out;
  if (tags.empty()) return MemoryTags{true, true};
  for (int i = 0; i < tags.size(); ++i) {
    const std::string& t = tags.Get(i);
    if (t == "weights") {
      out.weights = true;
    } else if (t == "kv_cache") {
      out.kv_cache = true;
    } else if (t != "cuda_graph" && t != "cuda_graphs") {
      return InvalidArgumentError("tags[" + std::to_string(i) + "]: '" + t +
                                  "' (expected weights, kv_cache or cuda_graph)");
    }
  }
  return out;
}

}  // namespace

grpc::Status WorkerService::ReleaseMemory(grpc::ServerContext* /*context*/,
                                          const v1::ReleaseMemoryRequest* request,
                                          v1::ReleaseMemoryResponse* response) {
  auto tags = ParseTags(request->tags());
  if (!tags.ok()) return rpc::ToGrpcStatus(tags.status());
  std::lock_guard<std::mutex> exec(exec_mu_);  // between two steps
  if (tags->kv_cache) {
    const int64_t live = executor_->counters().live_sequences;
    if (live > 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          std::to_string(live) +
                              " sequences hold KV pages on this worker: pause generation with "
                              "mode abort or drain before releasing the KV cache");
    }
  }
  auto change = executor_->mutable_runner().ReleaseMemory(*tags, request->keep_weights_on_host());
  if (!change.ok()) return rpc::ToGrpcStatus(change.status());
  response->set_bytes_released(change->bytes);
  response->set_device_free_bytes(change->device_free_bytes);
  return grpc::Status::OK;
}

grpc::Status WorkerService::ResumeMemory(grpc::ServerContext* /*context*/,
                                         const v1::ResumeMemoryRequest* request,
                                         v1::ResumeMemoryResponse* response) {
  auto tags = ParseTags(request->tags());
  if (!tags.ok()) return rpc::ToGrpcStatus(tags.status());
  std::lock_guard<std::mutex> exec(exec_mu_);
  auto change = executor_->mutable_runner().ResumeMemory(*tags);
  if (!change.ok()) return rpc::ToGrpcStatus(change.status());
  response->set_bytes_restored(change->bytes);
  response->set_device_free_bytes(change->device_free_bytes);
  return grpc::Status::OK;
}

}  // namespace astr
