// RequestChannel: the loop -> front channel of one request, and the events it carries
// (SampleEvent, RequestTimings). The scheduler's output thread fills it; the front drains it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "astr/v1/generate.pb.h"
#include "common/base/sampling_params.h"
#include "common/base/status.h"

namespace astr::sched {

// Something that happened to one sample of a request.
struct SampleEvent {
  // kPromptLogprob: the score of one prompt token (SchedRequest.logprob_start), index 0; they come
  // in position order, each once, before any kToken of sample 0.
  enum class Kind { kToken, kFinished, kPromptLogprob };
  Kind kind = Kind::kToken;
  int32_t index = 0;  // sample index
  // kToken: an accepted generated token. kPromptLogprob: the prompt token at `position`.
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // empty unless top_logprobs > 0
  SamplingMask mask;              // kToken: count 0 unless return_sampling_mask
  int64_t weight_version = 0;
  int32_t position = 0;  // kPromptLogprob: the token's position in the prompt
  // kFinished: why the sample ended (after its last kToken). Not sent for a sample the front
  // finished itself with FinishSample.
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  int32_t stop_token_id = -1;  // the stop id produced, when finish == STOP by a stop id
};

// Scheduler-side timings of one request (see v1::Timings).
struct RequestTimings {
  int64_t queue_ns = 0;
  int64_t time_to_first_token_ns = 0;
  int64_t total_ns = 0;
  int32_t preemptions = 0;
  int32_t cached_tokens = 0;
};

// The loop -> front channel of one request. The output thread pushes; the front either waits
// (Wait) or registers a listener that is told when something arrives (the callback gRPC front)
// and then takes it (Take). Thread-safe.
class RequestChannel {
 public:
  explicit RequestChannel(uint64_t key) : key_(key) {}
  uint64_t key() const { return key_; }

  struct Batch {
    std::vector<SampleEvent> events;
    bool closed = false;  // nothing more will come; `status` and `timings` are final
    Status status;        // OK when every sample finished; else why the request was aborted
    RequestTimings timings;
  };
  // Waits until events arrive, the channel closes, or `timeout` passes (then the batch may be
  // empty). Moves out everything pending.
  Batch Wait(std::chrono::milliseconds timeout);
  // Moves out everything pending without waiting.
  Batch Take();
  // `listener` runs (on the output thread, under the channel's lock, so it must only schedule
  // work and never call back into the channel) whenever events arrive or the channel closes; at
  // once when something is already pending. An empty function detaches: once SetListener
  // returns, the previous listener is not running and will not run again.
  void SetListener(std::function<void()> listener);

  // Output thread side.
  void Push(std::vector<SampleEvent>* events);  // appends and clears *events
  void Close(Status status, RequestTimings timings);

 private:
  const uint64_t key_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SampleEvent> pending_;
  std::function<void()> listener_;
  bool closed_ = false;
  Status status_;
  RequestTimings timings_;
};

}  // namespace astr::sched
