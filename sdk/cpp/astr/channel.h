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

// How to reach a server: plaintext (the default) or TLS, and the API key of a server started
// with --api-key-file.
struct ConnectOptions {
  // TLS: verify the server's certificate against `tls_ca_file` (PEM), or the system's roots when
  // it is empty. Implied by any of the tls_* files.
  bool tls = false;
  std::string tls_ca_file;
  // A client certificate and key (PEM) for servers that require one (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name the server's certificate must carry, instead of the address's host.
  std::string tls_server_name;
  // Sent as `authorization: Bearer KEY` with every call; empty: none.
  std::string api_key;

  bool UsesTls() const {
    return tls || !tls_ca_file.empty() || !tls_cert_file.empty() || !tls_key_file.empty();
  }
};

// A channel to `address` (host:port, or any gRPC target such as unix:/path) that accepts large
// responses and retries a server that is still starting every 100 ms to 1 s (not after gRPC's
// default backoff of up to two minutes). Waits until it is connected, at most `timeout`:
// UNAVAILABLE naming the address if it does not (a TLS handshake that fails, a plaintext client
// of a TLS server, fails this way). A timeout <= 0 does not wait. INVALID_ARGUMENT when a TLS
// file of `options` cannot be read.
StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                     std::chrono::milliseconds timeout,
                                                     const ConnectOptions& options = {});

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
