// SGLang's weight-sync and generation-control HTTP routes, and vLLM's pause routes (docs/rl.md
// "SGLang's HTTP routes"), so that RL frameworks written against SGLang (verl, slime, AReaL,
// OpenRLHF) or vLLM drive astr unchanged.
// Served on their own listener (--admin-http-listen), never on the public port, and only with the
// admin token: every route needs `Authorization: Bearer <token>` or `X-API-Key: <token>` (401
// without it, 403 for a wrong one or when the scheduler has no --admin-token-file). The routes run
// the same calls as astr.v1.Admin (AdminService, Scheduler), so a disk update goes through the one
// staging and atomic commit path.
//
//   POST /update_weights_from_disk  {"model_path", "weight_version"?, "abort_all_requests"?}
//   GET  /get_weight_version        {"weight_version"}
//   GET  /model_info, /get_model_info  {"model_path", "weight_version", ...}
//   POST /pause_generation          {"mode": "abort" | "retract" | "in_place"}
//   POST /continue_generation
//   POST /abort_request             {"rid": id or [ids], "abort_all"}
//   POST /flush_cache  (GET too)
//   vLLM: POST /pause?mode=abort|wait|keep, POST /resume, GET /is_paused
#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/http/http_server.h"
#include "scheduler/front/admin_service.h"
#include "scheduler/front/task_pool.h"
#include "scheduler/scheduler.h"

namespace astr::front {

class AdminHttp {
 public:
  // `admin` and `scheduler` must outlive it.
  AdminHttp(AdminService* admin, sched::Scheduler* scheduler, http::ServerOptions options);
  ~AdminHttp();

  Status Start();
  int port() const;
  // Reads the TLS files again (SIGHUP), as the other listeners do.
  Status ReloadTls();
  // Stops accepting; admin calls under way finish first (the pool joins).
  void Stop();

  // One route's answer: status and JSON body (or text for /flush_cache).
  struct Reply {
    int status = 200;
    std::string body;
    std::string content_type = "application/json";
  };
  // Routes one request (after the token check). Blocking: runs on the pool.
  Reply Route(const http::Request& request);

 private:
  void Handle(std::shared_ptr<http::Exchange> exchange);

  AdminService* const admin_;
  sched::Scheduler* const scheduler_;
  http::ServerOptions options_;
  // Admin calls block (a disk update takes seconds): they run here, off the I/O threads.
  std::unique_ptr<TaskPool> pool_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace astr::front
