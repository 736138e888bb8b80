// The astr.v1.Generate service on gRPC's callback API: no call holds a thread. A call's reactor
// takes the request's raw bytes, and the front's TaskPool parses and admits it; output reaches
// the call through its scheduler channel's listener, which schedules a pump on the pool; writes
// complete in OnWriteDone. So 1,000 open streams, or streams whose clients never read, cost
// memory (bounded per stream) and no threads, and GetServerStats always answers.
//
// Every method is registered raw (grpc::ByteBuffer in and out) so that the request's wire bytes
// can be checked for UTF-8 before protobuf parses them: a bad string is INVALID_ARGUMENT naming
// the field instead of protobuf's anonymous parse failure (see utf8_check.h); any other parse
// failure is INVALID_ARGUMENT too.
//
// Protections (FrontLimits): at most max_calls_per_peer generation/tokenization calls per client
// connection (RESOURCE_EXHAUSTED naming --max-calls-per-peer); a stream whose client has read
// nothing for stream_stall_timeout is cancelled (its request aborted, its pages freed); while a
// write waits for the client, new output accumulates in one delta per sample instead of a
// message per token, so a stream buffers at most its own request's output.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "astr/v1/generate.grpc.pb.h"
#include "scheduler/front/generate_service.h"
#include "scheduler/front/task_pool.h"

namespace astr::front {

class StreamReactor;

using RawGenerateService =
    v1::Generate::WithRawCallbackMethod_Generate<v1::Generate::WithRawCallbackMethod_GenerateStream<
        v1::Generate::WithRawCallbackMethod_Tokenize<v1::Generate::WithRawCallbackMethod_Detokenize<
            v1::Generate::WithRawCallbackMethod_GetModelInfo<
                v1::Generate::WithRawCallbackMethod_GetServerStats<v1::Generate::Service>>>>>>;

class GenerateGrpcService final : public RawGenerateService {
 public:
  // `impl` must outlive this object. Starts the task pool and the stall watchdog.
  explicit GenerateGrpcService(GenerateService* impl);
  // Shut the server down (every call done) before destroying the service.
  ~GenerateGrpcService() override;

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateStream(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerStats(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;

  GenerateService* impl() const { return impl_; }
  TaskPool* pool() { return &pool_; }

  // Every reactor counts itself from construction to the end of its OnDone, so that destroying
  // the service after the server waits for reactions still finishing on gRPC's threads.
  void ReactorStarted() { live_reactors_.fetch_add(1, std::memory_order_relaxed); }
  void ReactorDone() { live_reactors_.fetch_sub(1, std::memory_order_release); }

  // Streams register while open so the watchdog can find stalled writers.
  void RegisterStream(const std::shared_ptr<StreamReactor>& stream);
  void UnregisterStream(const StreamReactor* stream);

 private:
  // Every stall_check_interval: cancels streams whose pending write is older than the timeout.
  void WatchStalls();

  GenerateService* const impl_;
  TaskPool pool_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by mu_
  std::unordered_map<const StreamReactor*, std::weak_ptr<StreamReactor>> streams_;  // mu_
  std::thread watchdog_;
  std::atomic<int64_t> live_reactors_{0};
};

}  // namespace astr::front
