#include "astr/client.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <condition_variable>
#include <mutex>

#include "astr/channel.h"
#include "common/grpc/grpc_status.h"

namespace astr::client {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

// grpc.health.v1 has no generated C++ stub on every platform (Debian ships none), so its two
// tiny messages are encoded by hand:
//   HealthCheckRequest  { string service = 1; }
//   HealthCheckResponse { ServingStatus status = 1; }
std::string EncodeHealthCheckRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;  // proto3: a default field is not written
  google::protobuf::io::StringOutputStream raw(&out);
  google::protobuf::io::CodedOutputStream coded(&raw);
  WireFormatLite::WriteString(1, service, &coded);
  coded.Trim();
  return out;
}

StatusOr<ServingStatus> DecodeHealthCheckResponse(const std::string& bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  int status = 0;  // absent field = UNKNOWN
  // ReadTag returns 0 at the end of the input and on a malformed tag; the position tells which.
  while (uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      uint32_t v = 0;
      if (!in.ReadVarint32(&v)) break;
      status = static_cast<int>(v);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      break;
    }
  }
  if (in.CurrentPosition() != static_cast<int>(bytes.size())) {
    return InternalError("health check: malformed HealthCheckResponse");
  }
  if (status < 0 || status > 3) return ServingStatus::kUnknown;
  return static_cast<ServingStatus>(status);
}

std::string ByteBufferToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

}  // namespace

const char* ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kUnknown:
      return "UNKNOWN";
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
  }
  return "UNKNOWN";
}

StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address,
                                                  std::chrono::milliseconds timeout,
                                                  const ConnectOptions& options) {
  ASTR_ASSIGN_OR_RETURN(auto channel, OpenChannel(address, timeout, options));
  return std::make_unique<Client>(std::move(channel), address, options.api_key);
}

Client::Client(std::shared_ptr<grpc::Channel> channel, std::string address, std::string api_key)
    : channel_(std::move(channel)),
      stub_(v1::Generate::NewStub(channel_)),
      address_(std::move(address)),
      authorization_(api_key.empty() ? std::string() : "Bearer " + api_key) {}

void Client::Authorize(grpc::ClientContext* ctx) const {
  if (!authorization_.empty()) ctx->AddMetadata("authorization", authorization_);
}

Client::~Client() = default;

StatusOr<v1::GenerateResponse> Client::Generate(const v1::GenerateRequest& request,
                                                const CallOptions& options) {
  return UnaryCall<v1::GenerateResponse>(options, [&](grpc::ClientContext* ctx, auto* response) {
    Authorize(ctx);
    return stub_->Generate(ctx, request, response);
  });
}

Status Client::GenerateStream(const v1::GenerateRequest& request, const StreamCallback& on_message,
                              const CallOptions& options) {
  grpc::ClientContext ctx;
  ApplyCallOptions(options, &ctx);
  Authorize(&ctx);
  auto reader = stub_->GenerateStream(&ctx, request);
  v1::GenerateStreamResponse message;
  bool cancelled = false;
  while (reader->Read(&message)) {
    if (!on_message(message)) {
      cancelled = true;
      ctx.TryCancel();
      break;
    }
  }
  if (cancelled) {
    // Finish() may only be called once no message is left to read; after TryCancel the
    // remaining reads fail quickly.
    while (reader->Read(&message)) {
    }
    (void)reader->Finish();
    return Status(StatusCode::kCancelled, "stream cancelled by the caller");
  }
  return rpc::FromGrpcStatus(reader->Finish());
}

StatusOr<v1::TokenizeResponse> Client::Tokenize(const v1::TokenizeRequest& request,
                                                const CallOptions& options) {
  return UnaryCall<v1::TokenizeResponse>(options, [&](grpc::ClientContext* ctx, auto* response) {
    Authorize(ctx);
    return stub_->Tokenize(ctx, request, response);
  });
}

StatusOr<v1::DetokenizeResponse> Client::Detokenize(const v1::DetokenizeRequest& request,
                                                    const CallOptions& options) {
  return UnaryCall<v1::DetokenizeResponse>(options, [&](grpc::ClientContext* ctx, auto* response) {
    Authorize(ctx);
    return stub_->Detokenize(ctx, request, response);
  });
}

StatusOr<v1::GetModelInfoResponse> Client::GetModelInfo(const CallOptions& options) {
  return UnaryCall<v1::GetModelInfoResponse>(
      options, [&](grpc::ClientContext* ctx, auto* response) {
        Authorize(ctx);
        return stub_->GetModelInfo(ctx, v1::GetModelInfoRequest(), response);
      });
}

StatusOr<v1::GetServerStatsResponse> Client::GetServerStats(const CallOptions& options) {
  return UnaryCall<v1::GetServerStatsResponse>(
      options, [&](grpc::ClientContext* ctx, auto* response) {
        Authorize(ctx);
        return stub_->GetServerStats(ctx, v1::GetServerStatsRequest(), response);
      });
}

StatusOr<ServingStatus> Client::Health(const std::string& service, const CallOptions& options) {
  grpc::ClientContext ctx;
  ApplyCallOptions(options, &ctx);
  const std::string request_bytes = EncodeHealthCheckRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::GenericStub generic(channel_);
  // The generic stub is callback-based: wait here for the call to complete.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, kHealthCheckMethod, grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = std::move(s);
                      done = true;
                      cv.notify_one();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status.ok()) return rpc::FromGrpcStatus(status);
  return DecodeHealthCheckResponse(ByteBufferToString(response));
}

}  // namespace astr::client
