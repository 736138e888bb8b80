// astr.v1.Admin (protos/astr/v1/admin.proto, docs/rl.md): the trainer's and operator's control
// plane, on its own port. Every call needs `authorization: Bearer <token>` metadata equal to the
// token of --admin-token-file; without a token file every call is refused.
//
// A weight update runs in three phases: stage (the manifest and each bucket of chunks are
// forwarded to every worker that is up as they arrive, through one bounded queue per worker, so
// the scheduler never holds more than a few buckets; each worker checks and builds the new
// weights beside the served ones), commit (the scheduler loop stops at a step boundary of every
// worker and each worker switches; if one cannot, the others switch back), finish (the old
// weights are dropped). Any failure before the commit leaves every worker on the served version.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "astr/v1/admin.grpc.pb.h"
#include "astr/v1/worker.grpc.pb.h"
#include "common/grpc/tls.h"
#include "scheduler/scheduler.h"

namespace astr::front {

class AdminService final : public v1::Admin::Service {
 public:
  // `token` empty: every call is refused (PERMISSION_DENIED naming --admin-token-file).
  // `worker_security`: how pushes dial the workers (--worker-tls-*).
  AdminService(sched::Scheduler* scheduler, std::string token,
               rpc::ChannelSecurity worker_security = {});
  ~AdminService() override;

  // Admin.UpdateWeights, served from the received bytes (the constructor installs it in place of
  // the generated handler; UpdateWeights below is never called).
  grpc::Status UpdateWeightsRaw(grpc::ServerContext* context,
                                grpc::ServerReader<grpc::ByteBuffer>* reader,
                                v1::UpdateWeightsResponse* response);
  grpc::Status UpdateWeights(grpc::ServerContext* context,
                             grpc::ServerReader<v1::UpdateWeightsRequest>* reader,
                             v1::UpdateWeightsResponse* response) override;
  grpc::Status BeginDirectUpdate(grpc::ServerContext* context,
                                 const v1::BeginDirectUpdateRequest* request,
                                 v1::BeginDirectUpdateResponse* response) override;
  grpc::Status CommitDirectUpdate(grpc::ServerContext* context,
                                  const v1::CommitDirectUpdateRequest* request,
                                  v1::UpdateWeightsResponse* response) override;
  grpc::Status UpdateWeightsFromTensor(grpc::ServerContext* context,
                                       const v1::UpdateWeightsFromTensorRequest* request,
                                       v1::UpdateWeightsResponse* response) override;
  // UpdateWeightsFromTensor after authorization (the HTTP route calls it too).
  grpc::Status UpdateFromTensorNow(const v1::UpdateWeightsFromTensorRequest& request,
                                   v1::UpdateWeightsResponse* response);
  grpc::Status UpdateWeightsFromDisk(grpc::ServerContext* context,
                                     const v1::UpdateWeightsFromDiskRequest* request,
                                     v1::UpdateWeightsResponse* response) override;
  grpc::Status InitWeightUpdateGroup(grpc::ServerContext* context,
                                     const v1::InitWeightUpdateGroupRequest* request,
                                     v1::InitWeightUpdateGroupResponse* response) override;
  grpc::Status UpdateWeightsFromDistributed(grpc::ServerContext* context,
                                            const v1::UpdateWeightsFromDistributedRequest* request,
                                            v1::UpdateWeightsResponse* response) override;
  grpc::Status DestroyWeightUpdateGroup(grpc::ServerContext* context,
                                        const v1::DestroyWeightUpdateGroupRequest* request,
                                        v1::DestroyWeightUpdateGroupResponse* response) override;
  grpc::Status GetWeightVersion(grpc::ServerContext* context,
                                const v1::GetWeightVersionRequest* request,
                                v1::GetWeightVersionResponse* response) override;
  grpc::Status GetWeightsChecksum(grpc::ServerContext* context,
                                  const v1::GetWeightsChecksumRequest* request,
                                  v1::GetWeightsChecksumResponse* response) override;
  grpc::Status Pause(grpc::ServerContext* context, const v1::PauseRequest* request,
                     v1::PauseResponse* response) override;
  grpc::Status Resume(grpc::ServerContext* context, const v1::ResumeRequest* request,
                      v1::ResumeResponse* response) override;
  grpc::Status FlushCache(grpc::ServerContext* context, const v1::FlushCacheRequest* request,
                          v1::FlushCacheResponse* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context, const v1::DrainWorkerRequest* request,
                           v1::DrainWorkerResponse* response) override;
  grpc::Status ReleaseMemory(grpc::ServerContext* context, const v1::ReleaseMemoryRequest* request,
                             v1::ReleaseMemoryResponse* response) override;
  grpc::Status ResumeMemory(grpc::ServerContext* context, const v1::ResumeMemoryRequest* request,
                            v1::ResumeMemoryResponse* response) override;

  // The same calls for the admin HTTP routes (admin_http.h), which check the token themselves.
  // `authorization`: the request's Authorization value (null: none). OK, UNAUTHENTICATED (none, or
  // not `Bearer <token>`) or PERMISSION_DENIED (no token file, or the wrong token).
  grpc::Status AuthorizeValue(const std::string* authorization) const;
  // The NCCL group calls after authorization (the admin HTTP routes).
  grpc::Status InitGroupNow(const v1::InitWeightUpdateGroupRequest& request,
                            v1::InitWeightUpdateGroupResponse* response);
  grpc::Status UpdateFromDistributedNow(const v1::UpdateWeightsFromDistributedRequest& request,
                                        v1::UpdateWeightsResponse* response);
  grpc::Status DestroyGroupNow(const v1::DestroyWeightUpdateGroupRequest& request);
  // ReleaseMemory / ResumeMemory after authorization (docs/rl.md "Releasing GPU memory").
  // `pause_if_running` (the HTTP routes): pauses in drain mode first instead of refusing, and
  // generation continues by itself once everything is back.
  grpc::Status ReleaseMemoryNow(const v1::ReleaseMemoryRequest& request,
                                v1::ReleaseMemoryResponse* response, bool pause_if_running = false);
  grpc::Status ResumeMemoryNow(const v1::ResumeMemoryRequest& request,
                               v1::ResumeMemoryResponse* response);
  // OK unless GPU memory is released (or discarded weights were not updated yet): generation
  // must not resume then. Resume and the HTTP resume routes check it.
  grpc::Status ResumeAllowed() const;
  // UpdateWeightsFromDisk after authorization: stage on every worker that is up, then commit.
  grpc::Status UpdateFromDisk(const v1::UpdateWeightsFromDiskRequest& request,
                              v1::UpdateWeightsResponse* response);

  struct Staged {
    std::string address;
    uint64_t staged_id = 0;
  };
  // An update staged on every worker of a group and not committed yet (vLLM's
  // start_weight_update / update_weights / finish_weight_update, admin_http.cc).
  struct PendingUpdate {
    std::vector<Staged> staged;
    int64_t served = 0;                  // the version served when it was staged
    v1::UpdateWeightsResponse response;  // its stage fields
  };
  // UpdateFromDistributedNow without the commit: stages on every member of the group (nothing
  // staged on failure).
  grpc::Status StageFromDistributedNow(const v1::UpdateWeightsFromDistributedRequest& request,
                                       PendingUpdate* pending);
  // Commits `pending` (emptied): ABORTED, dropping it, when another update committed meanwhile.
  grpc::Status CommitPendingNow(PendingUpdate* pending, const std::string& label,
                                v1::UpdateWeightsResponse* response);
  void DiscardPending(PendingUpdate* pending);

 private:
  grpc::Status Authorize(grpc::ServerContext* context) const;
  // Takes the one-update-at-a-time lock into `one` (waiting up to kUpdateWait): ABORTED while
  // another update runs or a direct update's reservation holds (`what` names the refused call
  // when not empty). A lapsed reservation is dropped here.
  grpc::Status LockUpdate(std::unique_lock<std::timed_mutex>* one, const std::string& what = "");
  std::unique_ptr<v1::Worker::Stub> Stub(const std::string& address);
  // The channel to a worker (one per address, kept), for stubs and raw streams.
  std::shared_ptr<grpc::Channel> WorkerChannel(const std::string& address);
  // Commits the staged update on every worker of `staged` (scheduler loop boundary), then
  // finishes it; fills the commit fields of `response`.
  grpc::Status Commit(const std::vector<Staged>& staged, const std::string& label,
                      v1::UpdateWeightsResponse* response);
  // One ControlWeights call to the worker of `s`.
  grpc::Status Control(const Staged& s, v1::ControlWeightsRequest::Action action, int64_t version);
  // Stages an update on every worker of `addresses` at once (`stage` is one worker's call) into
  // `staged`, with the stage fields of `response`; on any failure drops every stage and answers
  // the first worker's error, ending "version `served` still serving".
  grpc::Status StageEach(
      const std::vector<std::string>& addresses, int64_t served,
      std::chrono::steady_clock::time_point start,
      const std::function<grpc::Status(const std::string&, v1::StageWeightsResponse*)>& stage,
      std::vector<Staged>* staged, v1::UpdateWeightsResponse* response);
  // The checks of an UpdateWeightsFromDistributed request, and the workers of its group.
  grpc::Status DistributedMembers(const v1::UpdateWeightsFromDistributedRequest& request,
                                  std::vector<std::string>* members);
  // Stages an update on every worker of `addresses` at once (`stage` is one worker's call), then
  // commits it; on any failure drops every stage and answers the first worker's error, ending
  // "version `served` still serving". `start`: when the update began (stage_ns).
  grpc::Status StageEachAndCommit(
      const std::vector<std::string>& addresses, int64_t served,
      std::chrono::steady_clock::time_point start,
      const std::function<grpc::Status(const std::string&, v1::StageWeightsResponse*)>& stage,
      const std::string& label, v1::UpdateWeightsResponse* response);
  // Drops staged updates (best effort, after a failure).
  void Discard(const std::vector<Staged>& staged);
  // The workers of a new NCCL group: every member that is up, in pool order; FAILED_PRECONDITION
  // naming those not on the cuda backend.
  grpc::Status GroupMembers(std::vector<std::string>* addresses) const;
  // Every member that is up, in pool order; FAILED_PRECONDITION ("`what` needs ...") naming those
  // not on the cuda backend.
  grpc::Status CudaMembers(const std::string& what, std::vector<std::string>* addresses) const;
  // Every worker of `addresses` leaves group `name` (best effort).
  void LeaveGroup(const std::string& name, const std::vector<std::string>& addresses);

  sched::Scheduler* const scheduler_;
  const std::string token_;
  const rpc::ChannelSecurity worker_security_;
  // One weight update at a time; the next waits this long for the one before (a cancelled push
  // takes a moment to tear down) before it is refused with ABORTED.
  std::timed_mutex update_mu_;
  static constexpr std::chrono::seconds kUpdateWait{30};
  // The reservation of BeginDirectUpdate, until CommitDirectUpdate or its deadline.
  struct DirectUpdate {
    std::string id;
    std::vector<std::string> workers;
    std::chrono::steady_clock::time_point begun, deadline;
  };
  std::mutex direct_mu_;
  std::unique_ptr<DirectUpdate> direct_;
  // What ReleaseMemory gave back (until ResumeMemory), and whether weights were discarded (until
  // the next committed update).
  mutable std::mutex memory_mu_;
  bool weights_released_ = false, kv_released_ = false, weights_need_update_ = false;
  bool implicit_pause_ = false;  // ReleaseMemoryNow paused generation itself
  // Resumes generation once nothing is released and the weights are valid, if the release paused.
  void MaybeEndImplicitPause();
  // NCCL weight-update groups: name -> the workers of ranks 1.., in order.
  std::mutex groups_mu_;
  std::map<std::string, std::vector<std::string>> groups_;
  std::mutex channels_mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
};

// Reads the bearer token of --admin-token-file: the file's content without surrounding
// whitespace. Errors name the flag and the file; an empty token is an error.
StatusOr<std::string> ReadAdminToken(const std::string& path);

}  // namespace astr::front
