// The astr.v1.Generate service as registered with the gRPC server: the same method table the
// generated Generate::Service builds, except that requests with string fields (GenerateRequest,
// TokenizeRequest) have their wire bytes checked for UTF-8 before protobuf parses them, so that a
// bad string is INVALID_ARGUMENT naming the field instead of protobuf's anonymous parse failure
// (INTERNAL, empty message; see utf8_check.h). Any other parse failure is INVALID_ARGUMENT too.
//
// It is built on grpc::internal::{RpcServiceMethod, RpcMethodHandler, ServerStreamingHandler},
// the pieces generated service code itself uses (stable across gRPC 1.4x-1.6x).
#pragma once

#include <grpcpp/impl/service_type.h>

#include <deque>
#include <string>

#include "scheduler/front/generate_service.h"

namespace astr::front {

class GenerateGrpcService final : public grpc::Service {
 public:
  // `impl` must outlive this object.
  explicit GenerateGrpcService(GenerateService* impl);

 private:
  // "/astr.v1.Generate/<Method>"; RpcServiceMethod keeps a const char* into these.
  const char* MethodPath(const std::string& method);

  std::deque<std::string> paths_;
};

}  // namespace astr::front
