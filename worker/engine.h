// The offline engine: the scheduler's own planner in process, over one backend. `astr run`, the
// benchmark and the model tests drive it.
//
// Each step the scheduler's BatchPlanner (scheduler/batch_planner.h) plans over a WorkerQueues
// sized to the backend's KV pool, exactly as astr-scheduler plans for one worker: decode rows
// first, prefill chunks under the token budget, admission in queue order, pages from the same
// PagePool, the same preemption policy and (when on) the same radix prefix cache. The engine then
// does the worker's part in process, without gRPC or protobuf: releases, starts and entries of the
// plain PlannedStep become one StepBatch, the backend runs it and samples, and each sampled token
// goes back to its sequence under the shared finish rule. So every batching, preemption and
// prefix-cache rule exists once, and `astr run` reproduces what the server serves.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/base/finish_rule.h"
#include "common/base/status.h"
#include "scheduler/batch_planner.h"
#include "scheduler/sequence.h"
#include "scheduler/step_plan.h"
#include "worker/backend.h"
#include "worker/sampler.h"
#include "worker/step_sampling.h"

namespace astr {

struct EngineOptions {
  int64_t max_running = 64;     // most sequences in one step
  int64_t prefill_chunk = 512;  // most prompt tokens one sequence feeds in one step
  // The scheduler's radix prefix cache over the KV pool: requests that start with the same tokens
  // (say, the n samples of one prompt) reuse the K/V computed for them. Off by default so that a
  // benchmark computes every prefill it reports.
  bool prefix_cache = false;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
  uint64_t sample_index = 0;  // which of a request's n samples (keys the RNG stream)
  // Prompt scoring (teacher forcing, as GenerateRequest.logprob_start): 0 = none; else prompt
  // tokens [logprob_start, prompt size) are each scored from the logits of the position before
  // them, as a drawn token would be reported (PromptScorer): GenerationResult.prompt_logprobs.
  int32_t logprob_start = 0;
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
  // With logprob_start: per prompt token from logprob_start on, its logprob and (params.logprobs
  // > 0) the top-n alternatives at its position.
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top;
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
  bool Idle() const { return requests_.empty(); }

  Backend& backend() { return *backend_; }
  // Pages not held by a sequence (cached pages that nothing references count as free: the cache
  // gives them up on demand).
  int64_t free_pages() const { return queues_.pool.num_free(); }
  int64_t total_pages() const { return queues_.pool.num_pages(); }
  const StepStats& last_step() const { return last_step_; }
  // Prompt tokens whose K/V came from the prefix cache, over every start so far.
  int64_t cache_hit_tokens() const { return cache_hit_tokens_; }

 private:
  // A request: the scheduler's view of it (one sample; its prompt and sampling parameters), its
  // stop-string check, and what it returns.
  struct Request {
    sched::RequestState state;
    std::function<bool(const std::vector<int32_t>&)> stop_check;
    GenerationResult result;
  };
  // A live sequence as the worker side keeps it (the executor's table, in process).
  struct Live {
    std::vector<int32_t> context;  // prompt + generated, every token known
    std::vector<int32_t> pages;    // in sequence order
    // Window ids of pages [window_first, ...) (Backend::kv_window_tables per page).
    std::vector<int32_t> window_pages;
    int64_t window_first = 0;
    bool rope_long = false;  // LongRoPE: started holding more than the original context
    std::unique_ptr<SequenceSampler> sampler;
    std::unique_ptr<PromptScorer> scorer;  // while it scores its prompt (start.score_from)
    int64_t first_row = 0;                 // its entry's first row in this step's batch
    int32_t start_position = 0;            // and that row's position
  };

  // The worker's part of plan_: releases, starts, then one batch of its entries; fills
  // step_live_ (per sample row) and step_samplers_.
  void Execute();
  // A sampled token reaches its sequence; the reason it ends with it (kNone: it goes on).
  FinishReason Accept(sched::Sequence* seq, const SampleResult& r);
  void Finish(sched::Sequence* seq, FinishReason reason, std::vector<GenerationResult>* finished);

  std::unique_ptr<Backend> backend_;
  EngineOptions options_;
  sched::WorkerQueues queues_;
  sched::BatchPlanner planner_;
  sched::PlannedStep plan_;
  sched::PlanOutcome outcome_;
  uint64_t next_step_id_ = 1;
  int64_t next_id_ = 0;
  int empty_plans_ = 0;  // consecutive plans without entries
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;  // by id, until finished
  std::unordered_map<uint64_t, Live> live_;                         // by live id
  StepBatch batch_;
  StepSampling sampling_;
  std::vector<const SequenceSampler*> step_samplers_;  // per sample row of the step
  std::vector<Live*> step_live_;                       // per sample row of the step
  std::vector<RowScore> step_scores_;                  // per scored row, after the sample rows
  std::vector<SampleResult> step_results_;
  StepStats last_step_;
  int64_t cache_hit_tokens_ = 0;
};

}  // namespace astr
