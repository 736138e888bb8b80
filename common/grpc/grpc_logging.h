// gRPC's own log lines (gpr_log, shown per GRPC_VERBOSITY / GRPC_TRACE) through the project's
// logger, so that they carry the same prefix, or are JSON objects with --log-format=json.
#pragma once

namespace astr::rpc {

// Routes gpr_log to astr::LogAt: ERROR stays ERROR, INFO and DEBUG become INFO. Call once, after
// InitLogging, before the first gRPC object is made.
void ForwardGrpcLogs();

}  // namespace astr::rpc
