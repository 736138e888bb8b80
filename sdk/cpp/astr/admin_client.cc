#include "astr/admin_client.h"

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <vector>

#include "astr/channel.h"
#include "astr/weight_buckets.h"
#include "common/grpc/grpc_status.h"

namespace astr::client {

Status CheckAdminToken(const std::string& token) {
  if (token.empty()) return InvalidArgumentError("admin token is empty");
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7e) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", c);
      return InvalidArgumentError("admin token: byte " + std::to_string(i) + " is " + hex +
                                  ", not visible ASCII (what gRPC metadata can carry)");
    }
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<AdminClient>> AdminClient::Connect(const std::string& address,
                                                            const std::string& token,
                                                            std::chrono::milliseconds timeout,
                                                            const ConnectOptions& options) {
  ASTR_RETURN_IF_ERROR(CheckAdminToken(token));
  ASTR_ASSIGN_OR_RETURN(auto channel, OpenChannel(address, timeout, options));
  return std::unique_ptr<AdminClient>(new AdminClient(std::move(channel), token));
}

AdminClient::AdminClient(std::shared_ptr<grpc::Channel> channel, std::string token)
    : channel_(std::move(channel)),
      stub_(v1::Admin::NewStub(channel_)),
      authorization_("Bearer " + std::move(token)) {}

AdminClient::~AdminClient() = default;

void AdminClient::Authorize(grpc::ClientContext* ctx) const {
  ctx->AddMetadata("authorization", authorization_);
}

StatusOr<v1::UpdateWeightsResponse> AdminClient::UpdateWeights(
    const v1::WeightManifest& manifest, std::span<const std::span<const uint8_t>> tensor_data,
    int64_t bucket_bytes, const CallOptions& options) {
  if (tensor_data.size() != static_cast<size_t>(manifest.tensors_size())) {
    return InvalidArgumentError("UpdateWeights: " + std::to_string(tensor_data.size()) +
                                " tensor spans for a manifest of " +
                                std::to_string(manifest.tensors_size()) + " tensors");
  }
  std::vector<int64_t> sizes;
  sizes.reserve(tensor_data.size());
  for (const auto& data : tensor_data) sizes.push_back(static_cast<int64_t>(data.size()));
  ASTR_ASSIGN_OR_RETURN(const std::vector<WeightBucket> buckets,
                        PlanWeightBuckets(sizes, bucket_bytes));

  grpc::ClientContext ctx;
  ApplyCallOptions(options, &ctx);
  Authorize(&ctx);
  v1::UpdateWeightsResponse response;
  auto writer = stub_->UpdateWeights(&ctx, &response);
  // One message, reused: Clear() keeps the cleared chunks and their buffers, so the buckets after
  // the first allocate (almost) nothing.
  v1::UpdateWeightsRequest message;
  *message.mutable_manifest() = manifest;
  bool open = writer->Write(message);
  size_t sent = 0;  // buckets written
  while (open && sent < buckets.size()) {
    message.Clear();
    for (const WeightChunkSpan& span : buckets[sent]) {
      v1::WeightChunk* chunk = message.add_chunks();
      chunk->set_tensor(span.tensor);
      chunk->set_offset(span.offset);
      const uint8_t* data = tensor_data[span.tensor].data() + span.offset;
      chunk->mutable_data()->assign(reinterpret_cast<const char*>(data),
                                    static_cast<size_t>(span.bytes));
    }
    open = writer->Write(message);
    if (open) ++sent;
  }
  if (open) open = writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return rpc::FromGrpcStatus(status);
  if (!open) {
    return InternalError("UpdateWeights: the server closed the stream after " +
                         std::to_string(sent) + " of " + std::to_string(buckets.size()) +
                         " buckets and still answered OK");
  }
  return response;
}

StatusOr<v1::UpdateWeightsResponse> AdminClient::UpdateWeightsFromDisk(
    const v1::UpdateWeightsFromDiskRequest& request, const CallOptions& options) {
  return UnaryCall<v1::UpdateWeightsResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
    Authorize(ctx);
    return stub_->UpdateWeightsFromDisk(ctx, request, r);
  });
}

StatusOr<v1::GetWeightVersionResponse> AdminClient::GetWeightVersion(const CallOptions& options) {
  return UnaryCall<v1::GetWeightVersionResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
    Authorize(ctx);
    return stub_->GetWeightVersion(ctx, v1::GetWeightVersionRequest(), r);
  });
}

StatusOr<v1::GetWeightsChecksumResponse> AdminClient::GetWeightsChecksum(
    const v1::GetWeightsChecksumRequest& request, const CallOptions& options) {
  return UnaryCall<v1::GetWeightsChecksumResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
    Authorize(ctx);
    return stub_->GetWeightsChecksum(ctx, request, r);
  });
}

StatusOr<v1::PauseResponse> AdminClient::Pause(v1::PauseMode mode, const CallOptions& options) {
  v1::PauseRequest request;
  request.set_mode(mode);
  return UnaryCall<v1::PauseResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
    Authorize(ctx);
    return stub_->Pause(ctx, request, r);
  });
}

StatusOr<v1::ResumeResponse> AdminClient::Resume(const CallOptions& options) {
  return UnaryCall<v1::ResumeResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
    Authorize(ctx);
    return stub_->Resume(ctx, v1::ResumeRequest(), r);
  });
}

StatusOr<v1::FlushCacheResponse> AdminClient::FlushCache(const CallOptions& options) {
  return UnaryCall<v1::FlushCacheResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
    Authorize(ctx);
    return stub_->FlushCache(ctx, v1::FlushCacheRequest(), r);
  });
}

StatusOr<v1::DrainWorkerResponse> AdminClient::DrainWorker(const std::string& address,
                                                           int64_t timeout_s,
                                                           const CallOptions& options) {
  v1::DrainWorkerRequest request;
  request.set_address(address);
  request.set_timeout_s(timeout_s);
  return UnaryCall<v1::DrainWorkerResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
    Authorize(ctx);
    return stub_->DrainWorker(ctx, request, r);
  });
}

}  // namespace astr::client
