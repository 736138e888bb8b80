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
//   vLLM's weight transfer (NCCL engine): GET /get_world_size, POST /init_weight_transfer_engine
//   {"init_info": {master_address, master_port, rank_offset, world_size}}, POST
//   /start_weight_update, POST /update_weights {"update_info": {names, dtype_names, shapes,
//   packed, packed_buffer_size_bytes}}, POST /finish_weight_update {"weight_version"}
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
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
  // vLLM's /init_weight_transfer_engine and /update_weights.
  Reply InitWeightTransfer(const nlohmann::json& body);
  Reply UpdateWeightsVllm(const nlohmann::json& body);

  // The NCCL group vLLM's routes make, how long its rendezvous may take, and vLLM's default
  // packed buffer (DEFAULT_PACKED_BUFFER_SIZE_BYTES).
  static constexpr const char* kVllmGroup = "vllm-weight-transfer";
  static constexpr std::chrono::milliseconds kVllmRendezvousTimeout{300000};
  static constexpr int64_t kVllmPackedBufferBytes = int64_t{1} << 30;

  AdminService* const admin_;
  sched::Scheduler* const scheduler_;
  http::ServerOptions options_;
  // Admin calls block (a disk update takes seconds): they run here, off the I/O threads.
  std::unique_ptr<TaskPool> pool_;
  std::unique_ptr<http::Server> server_;
  // vLLM's weight transfer: one at a time (the routes hold vllm_mu_ while they run).
  std::mutex vllm_mu_;
  int vllm_workers_ = 0;       // > 0 once its group is made
  bool vllm_started_ = false;  // between /start_weight_update and /finish_weight_update
  std::unique_ptr<AdminService::PendingUpdate> vllm_pending_;  // staged, not committed
};

}  // namespace astr::front
