// astr::client::Client: the C++ client of astr's public gRPC API (astr.v1.Generate, see
// protos/astr/v1/generate.proto) and of grpc.health.v1.Health.
//
//   using namespace std::chrono_literals;
//   ASTR_ASSIGN_OR_RETURN(auto client, Client::Connect("127.0.0.1:50051", 5s));
//   v1::GenerateRequest req;
//   req.set_text("Once upon a time");
//   req.mutable_sampling()->set_max_tokens(32);
//   Status s = client->GenerateStream(req, [](const v1::GenerateStreamResponse& m) {
//     std::fputs(m.text().c_str(), stdout);
//     return true;  // false cancels the RPC
//   });
//
// Every call returns astr::Status / StatusOr with the server's gRPC code and message unchanged
// (INVALID_ARGUMENT naming the field, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ...).
//
// Thread safety: a Client may be shared by any number of threads and used concurrently; each call
// is independent (its own gRPC context on one shared channel). The callback of GenerateStream runs
// on the calling thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "astr/call_options.h"
#include "astr/channel.h"
#include "astr/v1/generate.grpc.pb.h"
#include "common/base/status.h"

namespace grpc {
class Channel;
}

namespace astr::client {

namespace v1 = ::astr::v1;

// grpc.health.v1.HealthCheckResponse.ServingStatus, same numbering.
enum class ServingStatus : int {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,  // only sent by Watch, listed for completeness
};
// "SERVING", "NOT_SERVING", ... as grpc_health_probe prints them.
const char* ServingStatusName(ServingStatus status);

class Client {
 public:
  // Called once per streamed message, in order. Returning false cancels the RPC.
  using StreamCallback = std::function<bool(const v1::GenerateStreamResponse&)>;

  // Opens a channel to `address` (host:port, or any gRPC target such as unix:/path) and waits
  // until it is connected, at most `timeout`: UNAVAILABLE naming the address if it does not.
  // A timeout <= 0 does not wait: the first call connects (useful to probe a server that is
  // still starting, with CallOptions::wait_for_ready).
  // `options`: TLS and the API key sent with every call.
  static StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                   std::chrono::milliseconds timeout,
                                                   const ConnectOptions& options = {});
  // A client on an existing channel (e.g. an in-process channel in tests).
  explicit Client(std::shared_ptr<grpc::Channel> channel, std::string address = "",
                  std::string api_key = "");
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The address given to Connect.
  const std::string& address() const { return address_; }

  // Unary Generate: every sample of the prompt, once all have finished.
  StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request,
                                          const CallOptions& options = {});
  // Streaming Generate: `on_message` sees every message as it arrives. Returns OK when the
  // server ended the stream normally, CANCELLED when `on_message` returned false (the server is
  // told at once and frees the request's sequences), else the server's status.
  Status GenerateStream(const v1::GenerateRequest& request, const StreamCallback& on_message,
                        const CallOptions& options = {});
  StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                          const CallOptions& options = {});
  StatusOr<v1::DetokenizeResponse> Detokenize(const v1::DetokenizeRequest& request,
                                              const CallOptions& options = {});
  StatusOr<v1::GetModelInfoResponse> GetModelInfo(const CallOptions& options = {});
  StatusOr<v1::GetServerStatsResponse> GetServerStats(const CallOptions& options = {});
  // grpc.health.v1.Health/Check of `service` ("" = the server as a whole). A server without the
  // health service answers UNIMPLEMENTED; an unknown service name NOT_FOUND.
  StatusOr<ServingStatus> Health(const std::string& service = "", const CallOptions& options = {});

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generate::Stub> stub_;
  std::string address_;
  std::string authorization_;  // "Bearer KEY", or empty

  // Adds the API key to a call's metadata.
  void Authorize(grpc::ClientContext* ctx) const;
};

}  // namespace astr::client
