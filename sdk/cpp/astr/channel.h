// What every client of the SDK (Client, AdminClient) does the same way: open a channel with the
// SDK's settings, prepare a call's context from CallOptions, run a unary call.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <chrono>
#include <memory>
#include <string>

#include "astr/call_options.h"
#include "common/base/status.h"
#include "common/grpc/grpc_status.h"

namespace astr::client {

// A channel to `address` (host:port, or any gRPC target such as unix:/path) that accepts large
// responses and retries a server that is still starting every 100 ms to 1 s (not after gRPC's
// default backoff of up to two minutes). Waits until it is connected, at most `timeout`:
// UNAVAILABLE naming the address if it does not. A timeout <= 0 does not wait.
StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                     std::chrono::milliseconds timeout);

// Sets the deadline and wait-for-ready of `options` on `ctx`.
void ApplyCallOptions(const CallOptions& options, grpc::ClientContext* ctx);

// Runs one unary RPC, `call(ctx, response)`, on a fresh context with `options` (`call` may add
// metadata first); the server's status comes back unchanged.
template <typename Response, typename Call>
StatusOr<Response> UnaryCall(const CallOptions& options, Call call) {
  grpc::ClientContext ctx;
  ApplyCallOptions(options, &ctx);
  Response response;
  const grpc::Status status = call(&ctx, &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status);
  return response;
}

}  // namespace astr::client
