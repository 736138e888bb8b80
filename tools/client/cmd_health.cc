// `astr health`: grpc.health.v1 Check against a running astr-scheduler or astr-worker; the exit
// code says whether it is SERVING, so that scripts can wait for readiness.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "common/base/flags.h"
#include "tools/client/client_flags.h"
#include "tools/command.h"

namespace astr::cli {
namespace {

constexpr char kProgram[] = "astr health";

using Clock = std::chrono::steady_clock;

// A single check may take this long before it counts as a failed attempt.
constexpr auto kCheckTimeout = std::chrono::seconds(2);
// Pause between attempts that failed quickly (e.g. NOT_SERVING while the server loads).
constexpr auto kRetryPause = std::chrono::milliseconds(200);

int HealthCommand(int argc, const char* const* argv) {
  FlagSet fs(kProgram,
             "Ask a server for its grpc.health.v1 status. Prints the status (SERVING, "
             "NOT_SERVING, ...) and exits 0 when SERVING, 1 otherwise.");
  std::string server = "127.0.0.1:50051", service;
  double wait_s = 0;
  fs.String("server", &server, "Address of the server (host:port).");
  client::ConnectOptions connect;
  RegisterConnectFlags(&fs, &connect, /*api_key=*/false);
  fs.String("service", &service, "Service name to check; empty = the server as a whole.");
  fs.Double("wait-s", &wait_s,
            "Keep retrying for up to this many seconds until the server is SERVING (it may not "
            "be listening yet); 0 = check once.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (wait_s < 0) {
    std::fprintf(stderr, "%s: --wait-s must be >= 0\n", kProgram);
    return 2;
  }

  // No connection wait here: the checks themselves wait (wait_for_ready) while retrying.
  auto client = client::Client::Connect(server, std::chrono::milliseconds(0), connect);
  if (!client.ok()) return PrintError(kProgram, client.status());
  const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  while (true) {
    const auto attempt_start = Clock::now();
    client::CallOptions options =
        client::CallOptions::Timeout(std::chrono::duration_cast<std::chrono::milliseconds>(
            wait_s > 0 ? std::clamp<Clock::duration>(end - attempt_start,
                                                     std::chrono::milliseconds(100), kCheckTimeout)
                       : Clock::duration(kCheckTimeout)));
    options.wait_for_ready = wait_s > 0;
    auto status = (*client)->Health(service, options);
    if (status.ok() && *status == client::ServingStatus::kServing) {
      std::printf("%s\n", client::ServingStatusName(*status));
      return 0;
    }
    if (wait_s <= 0 || Clock::now() >= end) {
      if (status.ok()) {
        std::printf("%s\n", client::ServingStatusName(*status));
        return 1;
      }
      return PrintError(kProgram, status.status().WithContext(server));
    }
    if (Clock::now() - attempt_start < kRetryPause) std::this_thread::sleep_for(kRetryPause);
  }
}

}  // namespace

ASTR_REGISTER_COMMAND("health", "Check a server's health (exit 0 when SERVING).", HealthCommand);

}  // namespace astr::cli
