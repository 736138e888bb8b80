// grpc.health.v1 service names both services answer (docs/deploy.md, Kubernetes probes).
#pragma once

#include <string_view>

namespace astr::rpc {

// Liveness: SERVING from the moment the process serves until it exits, whatever its load or
// drain state, so that a liveness probe restarts only a process that stopped answering. The
// server's overall status (service "") is readiness: it follows whether new work is taken.
inline constexpr std::string_view kLivenessService = "liveness";

}  // namespace astr::rpc
