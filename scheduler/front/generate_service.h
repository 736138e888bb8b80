// The astr.v1.Generate RPCs (sync gRPC API): each call runs on its own server thread, which
// validates and submits the request, then waits on the request's channel, turning the scheduler's
// SampleEvents into text (OutputProcessor) and writing responses, until the request closes or the
// client goes away (cancel and deadline both show in ServerContext::IsCancelled).
//
// GenerateGrpcService (grpc_service.h) registers these methods with the server.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "astr/v1/generate.pb.h"
#include "common/status.h"
#include "scheduler/front/request_builder.h"
#include "scheduler/scheduler.h"

namespace astr::front {

class GenerateService {
 public:
  // `scheduler` must outlive the service. `worker_addresses`: as given to --workers (the order of
  // Scheduler::WorkerInfos).
  GenerateService(sched::Scheduler* scheduler, ServedModel model, RequestLimits limits,
                  std::vector<std::string> worker_addresses);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        v1::GenerateResponse* response);
  grpc::Status GenerateStream(grpc::ServerContext* context, const v1::GenerateRequest* request,
                              grpc::ServerWriter<v1::GenerateStreamResponse>* writer);
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response);
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response);
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::GetModelInfoResponse* response);
  grpc::Status GetServerStats(grpc::ServerContext* context,
                              const v1::GetServerStatsRequest* request,
                              v1::GetServerStatsResponse* response);

  // From now on Generate / GenerateStream answer UNAVAILABLE; calls already admitted go on.
  void StartDrain();
  // Aborts every admitted request still open (drain timeout); their calls end with `why`.
  void CancelAll(const Status& why);
  // Generate / GenerateStream calls admitted and not yet returned.
  int64_t open_calls() const;

  const ServedModel& model() const { return model_; }

 private:
  class Call;
  struct Update;

  // Validates, resolves and submits; on success `call` is admitted.
  Status Admit(grpc::ServerContext* context, const v1::GenerateRequest& request, Call* call);
  // Waits for the call's next output. False when the client went away (the request is then
  // cancelled in the scheduler).
  bool Next(grpc::ServerContext* context, Call* call, Update* update);
  void Register(uint64_t key);
  void Unregister(uint64_t key);

  sched::Scheduler* const scheduler_;
  const ServedModel model_;
  const RequestLimits limits_;
  const std::vector<std::string> worker_addresses_;
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  std::set<uint64_t> open_keys_;  // guarded by mu_
};

}  // namespace astr::front
