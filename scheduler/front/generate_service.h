// The astr.v1.Generate RPCs (sync gRPC API): each call runs on its own server thread, which
// validates and submits the request, then waits on the request's channel, turning the scheduler's
// SampleEvents into text (OutputProcessor) and writing responses, until the request closes or the
// client goes away.
//
// The sync API has no cancel callback: a client that cancels or whose deadline passes only shows
// in ServerContext::IsCancelled. One watcher thread polls that for every open call (every 5 ms)
// and cancels the request in the scheduler, which closes its channel and so wakes the call's
// thread; waiting calls themselves do not poll (256 calls each polling every 5 ms cost a third of
// a core).
//
// GenerateGrpcService (grpc_service.h) registers these methods with the server.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
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
  // Stops the watcher thread. Every call must have returned (shut the server down first).
  ~GenerateService();

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
  // Waits for the call's next output. False when the client went away (the watcher has then
  // cancelled the request in the scheduler).
  bool Next(Call* call, Update* update);
  void Register(Call* call, grpc::ServerContext* context);
  void Unregister(uint64_t key);
  // The watcher thread: cancels the requests of calls whose client went away.
  void WatchCancellations();

  sched::Scheduler* const scheduler_;
  const ServedModel model_;
  const RequestLimits limits_;
  const std::vector<std::string> worker_addresses_;
  std::atomic<bool> draining_{false};
  struct OpenCall {
    grpc::ServerContext* context;
    Call* call;
  };
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;                  // guarded by mu_
  std::map<uint64_t, OpenCall> open_;  // guarded by mu_; by request key
  std::thread watcher_;
};

}  // namespace astr::front
