#include "astr/admin_client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "astr/channel.h"
#include "astr/v1/worker.grpc.pb.h"
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

namespace {

// The buckets of an update whose tensor i is tensor_data[i].
StatusOr<std::vector<WeightBucket>> PlanUpdate(
    const char* call, const v1::WeightManifest& manifest,
    std::span<const std::span<const uint8_t>> tensor_data, int64_t bucket_bytes) {
  if (tensor_data.size() != static_cast<size_t>(manifest.tensors_size())) {
    return InvalidArgumentError(std::string(call) + ": " + std::to_string(tensor_data.size()) +
                                " tensor spans for a manifest of " +
                                std::to_string(manifest.tensors_size()) + " tensors");
  }
  std::vector<int64_t> sizes;
  sizes.reserve(tensor_data.size());
  for (const auto& data : tensor_data) sizes.push_back(static_cast<int64_t>(data.size()));
  return PlanWeightBuckets(sizes, bucket_bytes);
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

// An update's UpdateWeights messages as protobuf wire bytes, built without copying the tensors:
// each chunk's `data` is a slice that points at the caller's memory, so the only copy of the bytes
// on this side is the kernel's (and one update sent to several workers is encoded once per message,
// not once per worker). The caller's tensor data must outlive the streams written with it.
class EncodedUpdate {
 public:
  EncodedUpdate(const v1::WeightManifest& manifest,
                std::span<const std::span<const uint8_t>> tensor_data,
                const std::vector<WeightBucket>& buckets)
      : tensor_data_(tensor_data), buckets_(buckets) {
    v1::UpdateWeightsRequest first;
    *first.mutable_manifest() = manifest;
    const std::string bytes = first.SerializeAsString();
    grpc::Slice slice(bytes);
    manifest_ = grpc::ByteBuffer(&slice, 1);
  }

  const grpc::ByteBuffer& Manifest() const { return manifest_; }
  size_t buckets() const { return buckets_.size(); }

  // UpdateWeightsRequest.chunks (field 2) of bucket b: per chunk its header (tensor = field 1,
  // offset = field 2, the length of data = field 3) copied, then its data referenced.
  grpc::ByteBuffer Bucket(size_t b) const {
    std::vector<grpc::Slice> slices;
    slices.reserve(2 * buckets_[b].size());
    for (const WeightChunkSpan& span : buckets_[b]) {
      const uint64_t n = static_cast<uint64_t>(span.bytes);
      const uint64_t tensor = static_cast<uint64_t>(span.tensor);
      const uint64_t offset = static_cast<uint64_t>(span.offset);
      const uint64_t chunk =
          1 + VarintSize(tensor) + 1 + VarintSize(offset) + 1 + VarintSize(n) + n;
      std::string header;
      header.push_back(0x12);  // chunks: field 2, length-delimited
      PutVarint(&header, chunk);
      header.push_back(0x08);  // WeightChunk.tensor: field 1, varint
      PutVarint(&header, tensor);
      header.push_back(0x10);  // WeightChunk.offset: field 2, varint
      PutVarint(&header, offset);
      header.push_back(0x1a);  // WeightChunk.data: field 3, length-delimited
      PutVarint(&header, n);
      slices.emplace_back(header);
      slices.emplace_back(tensor_data_[span.tensor].data() + span.offset, static_cast<size_t>(n),
                          grpc::Slice::STATIC_SLICE);
    }
    return grpc::ByteBuffer(slices.data(), slices.size());
  }

 private:
  std::span<const std::span<const uint8_t>> tensor_data_;
  const std::vector<WeightBucket>& buckets_;
  grpc::ByteBuffer manifest_;
};

// A client stream of UpdateWeightsRequest messages written as raw bytes (EncodedUpdate) to
// `method` ("/astr.v1.Admin/UpdateWeights", "/astr.v1.Worker/StageWeights"), the way the generated
// stubs open one; its single answer is parsed into `response`.
class RawUpdateStream {
 public:
  RawUpdateStream(const std::shared_ptr<grpc::Channel>& channel, const char* method,
                  grpc::ClientContext* ctx, google::protobuf::MessageLite* response)
      : method_(method, grpc::internal::RpcMethod::CLIENT_STREAMING, channel),
        writer_(grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel.get(), method_, ctx, response)) {}

  // Writes the manifest, then each bucket, then WritesDone; returns the buckets written (fewer
  // than all when the server closed the stream: Finish says why).
  size_t Write(const EncodedUpdate& update, bool* open) {
    *open = writer_->Write(update.Manifest());
    size_t sent = 0;
    while (*open && sent < update.buckets()) {
      *open = writer_->Write(update.Bucket(sent));
      if (*open) ++sent;
    }
    if (*open) *open = writer_->WritesDone();
    return sent;
  }
  grpc::Status Finish() { return writer_->Finish(); }

 private:
  grpc::internal::RpcMethod method_;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer_;
};

Status ClosedEarly(const char* call, size_t sent, size_t buckets) {
  return InternalError(std::string(call) + ": the server closed the stream after " +
                       std::to_string(sent) + " of " + std::to_string(buckets) +
                       " buckets and still answered OK");
}

}  // namespace

StatusOr<v1::UpdateWeightsResponse> AdminClient::UpdateWeights(
    const v1::WeightManifest& manifest, std::span<const std::span<const uint8_t>> tensor_data,
    int64_t bucket_bytes, const CallOptions& options) {
  ASTR_ASSIGN_OR_RETURN(const std::vector<WeightBucket> buckets,
                        PlanUpdate("UpdateWeights", manifest, tensor_data, bucket_bytes));
  const EncodedUpdate update(manifest, tensor_data, buckets);
  grpc::ClientContext ctx;
  ApplyCallOptions(options, &ctx);
  Authorize(&ctx);
  v1::UpdateWeightsResponse response;
  RawUpdateStream stream(channel_, "/astr.v1.Admin/UpdateWeights", &ctx, &response);
  bool open = false;
  const size_t sent = stream.Write(update, &open);
  const grpc::Status status = stream.Finish();
  if (!status.ok()) return rpc::FromGrpcStatus(status);
  if (!open) return ClosedEarly("UpdateWeights", sent, buckets.size());
  return response;
}

StatusOr<v1::UpdateWeightsResponse> AdminClient::UpdateWeightsDirect(
    const v1::WeightManifest& manifest, std::span<const std::span<const uint8_t>> tensor_data,
    int64_t bucket_bytes, const CallOptions& options, const ConnectOptions& worker_options) {
  ASTR_ASSIGN_OR_RETURN(const std::vector<WeightBucket> buckets,
                        PlanUpdate("UpdateWeightsDirect", manifest, tensor_data, bucket_bytes));
  v1::BeginDirectUpdateRequest begin;
  if (options.deadline != std::chrono::system_clock::time_point::max()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        options.deadline - std::chrono::system_clock::now());
    begin.set_timeout_ms(std::clamp<int64_t>(left.count(), 1, 3'600'000));
  }
  ASTR_ASSIGN_OR_RETURN(
      const v1::BeginDirectUpdateResponse reservation,
      (UnaryCall<v1::BeginDirectUpdateResponse>(options, [&](grpc::ClientContext* ctx, auto* r) {
        Authorize(ctx);
        return stub_->BeginDirectUpdate(ctx, begin, r);
      })));
  const EncodedUpdate update(manifest, tensor_data, buckets);  // shared by every worker's stream
  const size_t n = static_cast<size_t>(reservation.workers_size());
  std::vector<Status> failures(n);
  std::vector<v1::StageWeightsResponse> answers(n);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      const std::string& address = reservation.workers(static_cast<int>(w));
      auto channel = OpenChannel(address, std::chrono::seconds(30), worker_options);
      if (!channel.ok()) {
        failures[w] = channel.status();
        return;
      }
      grpc::ClientContext ctx;
      ApplyCallOptions(options, &ctx);
      RawUpdateStream stream(*channel, "/astr.v1.Worker/StageWeights", &ctx, &answers[w]);
      bool open = false;
      const size_t sent = stream.Write(update, &open);
      const grpc::Status status = stream.Finish();
      if (!status.ok()) {
        failures[w] = rpc::FromGrpcStatus(status);
      } else if (!open) {
        failures[w] = ClosedEarly("StageWeights", sent, buckets.size());
      }
    });
  }
  for (auto& t : threads) t.join();
  v1::CommitDirectUpdateRequest commit;
  commit.set_update_id(reservation.update_id());
  commit.set_label(manifest.label());
  Status failure;
  for (size_t w = 0; w < n; ++w) {
    const std::string& address = reservation.workers(static_cast<int>(w));
    if (!failures[w].ok()) {
      if (failure.ok()) {
        failure = Status(failures[w].code(),
                         "worker " + address + ": " + std::string(failures[w].message()));
      }
      continue;
    }
    v1::DirectStage* stage = commit.add_stages();
    stage->set_worker(address);
    stage->set_staged_id(answers[w].staged_id());
    stage->set_tensors(answers[w].tensors());
    stage->set_bytes(answers[w].bytes());
  }
  commit.set_discard(!failure.ok());
  auto committed = UnaryCall<v1::UpdateWeightsResponse>(
      CallOptions::Timeout(std::chrono::minutes(2)), [&](grpc::ClientContext* ctx, auto* r) {
        Authorize(ctx);
        return stub_->CommitDirectUpdate(ctx, commit, r);
      });
  if (!failure.ok()) return failure;
  return committed;
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
