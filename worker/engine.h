// The offline engine: an in-process loop that owns sequences, assigns KV pages, packs each step
// (decode rows first, then prefill chunks under a token budget), runs the backend and samples.
// `astr run`, the benchmark and the model tests drive it. (The services split the same work between
// the scheduler, which plans, and the worker, which executes.)
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "common/base/finish_rule.h"
#include "common/base/status.h"
#include "worker/backend.h"
#include "worker/page_allocator.h"
#include "worker/sampler.h"
#include "worker/step_sampling.h"

namespace astr {

struct EngineOptions {
  int64_t max_running = 64;     // most sequences in one step
  int64_t prefill_chunk = 512;  // most prompt tokens one sequence feeds in one step
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
  uint64_t sample_index = 0;  // which of a request's n samples (keys the RNG stream)
  // Optional: called after each accepted token with the tokens generated so far; true ends the
  // sequence with FinishReason::kStop (used for stop strings).
  std::function<bool(const std::vector<int32_t>&)> stop_check;
};

struct GenerationResult {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;                 // generated ids
  std::vector<float> logprobs;                 // per generated token (if requested)
  std::vector<std::vector<TokenLogprob>> top;  // per generated token: top-n alternatives
  FinishReason finish = FinishReason::kNone;
  int64_t preemptions = 0;
};

struct StepStats {
  int64_t tokens = 0;       // rows in the step
  int64_t entries = 0;      // sequences in the step
  int64_t sampled = 0;      // sample rows
  double forward_ms = 0.0;  // backend time
};

class Engine {
 public:
  Engine(std::unique_ptr<Backend> backend, EngineOptions options);

  // Validates and queues a request; returns its id. Errors name the field.
  StatusOr<int64_t> Submit(GenerationRequest request);
  // Runs one step; appends the sequences that finished in it to `finished`.
  Status Step(std::vector<GenerationResult>* finished);
  // Steps until every submitted sequence has finished; returns them in submission order.
  StatusOr<std::vector<GenerationResult>> RunToCompletion();
  bool Idle() const { return waiting_.empty() && running_.empty(); }

  Backend& backend() { return *backend_; }
  int64_t free_pages() const { return pages_.num_free(); }
  int64_t total_pages() const { return pages_.num_pages(); }
  const StepStats& last_step() const { return last_step_; }

 private:
  struct Sequence {
    int64_t id;
    GenerationRequest request;
    std::unique_ptr<SequenceSampler> sampler;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t num_computed = 0;     // tokens whose K/V are in the pool
    bool planned = false;         // already an entry of the step being planned
    bool preempted = false;       // moved back to waiting during the step being planned
    PageList<PageAllocator> pages;
    GenerationResult result;
  };
  // Plans the step into batch_; returns the sequence of each batch entry.
  std::vector<Sequence*> Plan();
  // Frees the newest running sequence that is not yet part of the step being planned (it is
  // recomputed later); false if there is none.
  bool PreemptNewest(const Sequence* keep);
  void Finish(Sequence* seq, FinishReason reason, std::vector<GenerationResult>* finished);

  std::unique_ptr<Backend> backend_;
  EngineOptions options_;
  PageAllocator pages_;
  int64_t next_id_ = 0;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  StepBatch batch_;
  StepSampling sampling_;
  std::vector<const SequenceSampler*> step_samplers_;  // per sample row of the step
  std::vector<SampleResult> step_results_;
  StepStats last_step_;
};

}  // namespace astr
