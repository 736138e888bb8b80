// HTTP/2 keepalive between astr-scheduler and its workers, shared by both ends: the scheduler's
// channel pings every kWorkerKeepaliveTimeMs, and the worker's server must accept pings that
// often (gRPC servers otherwise answer frequent pings with GOAWAY "too_many_pings").
//
// Why: a worker process that is stopped (SIGSTOP, a frozen VM) keeps its TCP connection open, so
// without pings the scheduler only notices when --step-timeout-ms (default 300 s) passes. A live
// worker answers pings from gRPC's own threads even in the middle of a long step, so a missed
// ping means the process is not running; the scheduler then sees the stream break within about
// kWorkerKeepaliveTimeMs + kWorkerKeepaliveTimeoutMs and marks the worker down after
// --worker-down-after-ms.
#pragma once

namespace astr::rpc {

inline constexpr int kWorkerKeepaliveTimeMs = 2000;
inline constexpr int kWorkerKeepaliveTimeoutMs = 10000;

}  // namespace astr::rpc
