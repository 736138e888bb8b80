// astr::bench::GenerationLoad: Generate streams that keep decoding while a benchmark does
// something else (a weight push), recording when each message with tokens arrived and which
// weight version made them, so that the benchmark can tell whether serving went on and how long
// it stood still.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "astr/client.h"
#include "common/base/status.h"

namespace astr::bench {

namespace v1 = ::astr::v1;

struct GenerationLoadOptions {
  int64_t streams = 4;
  int64_t prompt_tokens = 16;  // token ids: BOS, then ids 3..202 (in any vocabulary above 202)
  int64_t max_tokens = 256;    // per request; a finished request is sent again
  // What a running request does when new weights are committed.
  v1::KvOnWeightUpdate kv_on_update = v1::KV_ON_WEIGHT_UPDATE_RECOMPUTE;
};

class GenerationLoad {
 public:
  // Tokens in a time window, and the longest silence of a stream overlapping it.
  struct Window {
    int64_t tokens = 0;
    double tokens_per_s = 0;
    double max_gap_ms = 0;
    // Where that gap lies, in ms from the window's start (negative: it began before).
    double gap_from_ms = 0, gap_to_ms = 0;
  };

  // `client` must outlive this.
  GenerationLoad(client::Client* client, GenerationLoadOptions options);
  ~GenerationLoad() { Stop(); }
  GenerationLoad(const GenerationLoad&) = delete;
  GenerationLoad& operator=(const GenerationLoad&) = delete;

  // Starts the streams (one thread each) with no events recorded.
  void Start();
  // Ends every stream at its next message; joins the threads.
  void Stop();
  // Waits until every stream has a message that arrived after `after_ns` (steady clock) and was
  // made by weight version >= `version`; returns the latest of those arrival times.
  // DEADLINE_EXCEEDED after `timeout`, with the last stream error if there was one.
  StatusOr<int64_t> WaitAll(int64_t after_ns, int64_t version, std::chrono::seconds timeout);
  // Tokens that arrived in (t0_ns, t1_ns]; max_gap_ms: the longest time between two messages of
  // one stream where the gap overlaps the window.
  Window Measure(int64_t t0_ns, int64_t t1_ns);

 private:
  struct Event {
    int64_t t_ns;
    int32_t tokens;
    int64_t version;
  };
  void Run(int64_t stream);

  client::Client* client_;
  GenerationLoadOptions options_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<Event>> events_;  // per stream; guarded by mu_
  std::string error_;                       // the last stream error; guarded by mu_
};

}  // namespace astr::bench
