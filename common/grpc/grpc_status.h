// The one mapping between astr::Status and grpc::Status, used at the edge of every service and
// client. The codes share numbering (StatusCode follows absl / gRPC), so the mapping is exhaustive.
#pragma once

#include <grpcpp/support/status.h>

#include "common/base/status.h"

namespace astr::rpc {

inline grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

inline Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

}  // namespace astr::rpc
