#include "astr/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>

#include "common/base/file_util.h"
#include "common/grpc/message_limits.h"

namespace astr::client {
namespace {

StatusOr<std::string> ReadPem(const char* what, const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext(what);
  return text;
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ConnectOptions& o,
                                                                grpc::ChannelArguments* args) {
  if (!o.UsesTls()) return grpc::InsecureChannelCredentials();
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return InvalidArgumentError("the TLS client certificate and key go together: give both");
  }
  grpc::SslCredentialsOptions ssl;
  if (!o.tls_ca_file.empty()) {
    ASTR_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem("TLS CA file", o.tls_ca_file));
  }
  if (!o.tls_cert_file.empty()) {
    ASTR_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem("TLS certificate file", o.tls_cert_file));
    ASTR_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem("TLS key file", o.tls_key_file));
  }
  if (!o.tls_server_name.empty()) {
    args->SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, o.tls_server_name);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                     std::chrono::milliseconds timeout,
                                                     const ConnectOptions& options) {
  if (address.empty()) return InvalidArgumentError("server address is empty");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(rpc::kMaxMessageBytes);
  // A server that is still starting is retried quickly (astr health --wait-s, launchers waiting
  // for readiness).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  ASTR_ASSIGN_OR_RETURN(auto credentials, Credentials(options, &args));
  auto channel = grpc::CreateCustomChannel(address, credentials, args);
  if (timeout.count() > 0) {
    const auto deadline = std::chrono::system_clock::now() + timeout;
    if (!channel->WaitForConnected(deadline)) {
      return UnavailableError("could not connect to " + address + " within " +
                              std::to_string(timeout.count()) + " ms" +
                              (options.UsesTls() ? " (TLS: the server must speak TLS, with a "
                                                   "certificate the CA signed for this name)"
                                                 : ""));
    }
  }
  return channel;
}

void ApplyCallOptions(const CallOptions& options, grpc::ClientContext* ctx) {
  if (options.deadline != std::chrono::system_clock::time_point::max()) {
    ctx->set_deadline(options.deadline);
  }
  ctx->set_wait_for_ready(options.wait_for_ready);
}

}  // namespace astr::client
