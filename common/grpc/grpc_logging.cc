#include "common/grpc/grpc_logging.h"

#include <grpc/support/log.h>

#include "common/base/logging.h"

namespace astr::rpc {
namespace {

void Forward(gpr_log_func_args* args) {
  const LogSeverity severity =
      args->severity == GPR_LOG_SEVERITY_ERROR ? LogSeverity::kError : LogSeverity::kInfo;
  LogAt(severity, args->file, args->line, args->message);
}

}  // namespace

void ForwardGrpcLogs() { gpr_set_log_function(&Forward); }

}  // namespace astr::rpc
