// astr::client::AdminClient: the C++ client of astr-scheduler's control plane, astr.v1.Admin
// (protos/astr/v1/admin.proto): versioned weight updates, pause / resume, the prefix cache. The
// service listens on its own port (--admin-listen) and every call carries
// `authorization: Bearer <token>`.
//
//   ASTR_ASSIGN_OR_RETURN(auto admin, AdminClient::Connect("127.0.0.1:50053", token, 5s));
//   ASTR_ASSIGN_OR_RETURN(auto paused, admin->Pause(v1::PAUSE_MODE_KEEP));
//   ASTR_ASSIGN_OR_RETURN(auto update, admin->UpdateWeights(manifest, tensor_bytes, 64 << 20));
//   ASTR_RETURN_IF_ERROR(admin->Resume().status());
//
// Every call returns the server's gRPC code and message unchanged (UNAUTHENTICATED,
// PERMISSION_DENIED, FAILED_PRECONDITION, ...). Thread safety as for Client: calls are
// independent and may run concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "astr/call_options.h"
#include "astr/channel.h"
#include "astr/v1/admin.grpc.pb.h"
#include "common/base/status.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace astr::client {

namespace v1 = ::astr::v1;

// OK if `token` can be sent as a bearer token: not empty, visible ASCII only (gRPC metadata
// cannot carry control characters or other bytes); else INVALID_ARGUMENT saying which byte.
Status CheckAdminToken(const std::string& token);

class AdminClient {
 public:
  // Connects to `address` as Client::Connect does; `token` is sent as the bearer token of every
  // call. INVALID_ARGUMENT when CheckAdminToken refuses it.
  static StatusOr<std::unique_ptr<AdminClient>> Connect(const std::string& address,
                                                        const std::string& token,
                                                        std::chrono::milliseconds timeout,
                                                        const ConnectOptions& options = {});
  ~AdminClient();
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;

  // Streams an update: `manifest` in the first message, then the bytes of its tensors
  // (`tensor_data[i]` holds tensor i's) in buckets of at most `bucket_bytes` bytes of data, as
  // PlanWeightBuckets splits them. Each bucket is copied from `tensor_data` into one message just
  // before it is sent, so the caller's bytes (e.g. a memory-mapped checkpoint) are never copied
  // whole. INVALID_ARGUMENT when tensor_data has not one span per manifest tensor.
  StatusOr<v1::UpdateWeightsResponse> UpdateWeights(
      const v1::WeightManifest& manifest, std::span<const std::span<const uint8_t>> tensor_data,
      int64_t bucket_bytes, const CallOptions& options = {});
  // The same update over the direct route (admin.proto BeginDirectUpdate, docs/rl.md): the
  // scheduler reserves the update and names the workers; the messages UpdateWeights would send
  // go from here straight to every worker's StageWeights at once (one stream and thread each,
  // dialled with `worker_options`, e.g. the TLS of the scheduler's --worker-tls-*), then the
  // scheduler commits. The bytes cross one process fewer, so this is the fast route for a
  // trainer that can reach the workers. A failed stream discards every stage and returns that
  // worker's error ("worker ADDRESS: ..."); the served version stays. options.deadline bounds
  // the whole update (and the reservation).
  StatusOr<v1::UpdateWeightsResponse> UpdateWeightsDirect(
      const v1::WeightManifest& manifest, std::span<const std::span<const uint8_t>> tensor_data,
      int64_t bucket_bytes, const CallOptions& options = {},
      const ConnectOptions& worker_options = {});
  StatusOr<v1::UpdateWeightsResponse> UpdateWeightsFromDisk(
      const v1::UpdateWeightsFromDiskRequest& request, const CallOptions& options = {});
  StatusOr<v1::GetWeightVersionResponse> GetWeightVersion(const CallOptions& options = {});
  StatusOr<v1::GetWeightsChecksumResponse> GetWeightsChecksum(
      const v1::GetWeightsChecksumRequest& request, const CallOptions& options = {});
  StatusOr<v1::PauseResponse> Pause(v1::PauseMode mode, const CallOptions& options = {});
  StatusOr<v1::ResumeResponse> Resume(const CallOptions& options = {});
  StatusOr<v1::FlushCacheResponse> FlushCache(const CallOptions& options = {});
  // Drains one worker (no new sequences; its running ones finish there for up to `timeout_s`,
  // 0 = the scheduler's --worker-drain-timeout-s, then move) and returns once it left the pool.
  StatusOr<v1::DrainWorkerResponse> DrainWorker(const std::string& address, int64_t timeout_s,
                                                const CallOptions& options = {});

 private:
  AdminClient(std::shared_ptr<grpc::Channel> channel, std::string token);
  // The bearer token's metadata.
  void Authorize(grpc::ClientContext* ctx) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> stub_;
  std::string authorization_;  // "Bearer <token>"
};

}  // namespace astr::client
