#include "astr/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>

namespace astr::client {
namespace {

// Large outputs (long generations with top-n logprobs) exceed gRPC's 4 MiB default.
constexpr int kMaxReceiveBytes = 256 << 20;

}  // namespace

StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                     std::chrono::milliseconds timeout) {
  if (address.empty()) return InvalidArgumentError("server address is empty");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  // A server that is still starting is retried quickly (astr health --wait-s, launchers waiting
  // for readiness).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  if (timeout.count() > 0) {
    const auto deadline = std::chrono::system_clock::now() + timeout;
    if (!channel->WaitForConnected(deadline)) {
      return UnavailableError("could not connect to " + address + " within " +
                              std::to_string(timeout.count()) + " ms");
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
