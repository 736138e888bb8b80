// The plain types the planner core (page pool, prefix cache, planner, policies) and the loop share:
// a request as the scheduler queues it and the scheduler's options. No protobuf and no gRPC, so
// the offline engine (worker/engine.h), which drives the same planner in process, builds where
// neither exists (the bare GPU machine).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/sampling_params.h"

namespace astr::sched {

class CompiledConstraint;

using Clock = std::chrono::steady_clock;

// A request the front end has validated, tokenized and resolved; ready to queue.
struct SchedRequest {
  std::string request_id;
  std::vector<int32_t> prompt;  // non-empty; every id < vocab_size
  SamplingParams sampling;  // resolved (defaults applied, eos_token_ids filled); max_tokens below
  int32_t max_tokens = 16;  // >= 1; prompt.size() + max_tokens <= max_context_tokens
  int32_t n = 1;            // samples; sample i uses RNG stream sample_index = i
  int32_t priority = 0;     // larger is scheduled first and preempted last
  // When new weights are committed while it runs: keep its KV (true) or re-prefill it (false).
  bool reuse_kv_on_weight_update = false;
  Clock::time_point arrival = Clock::now();
  std::optional<Clock::time_point> deadline;  // aborted with DEADLINE_EXCEEDED when passed
  // Prompt scoring (GenerateRequest.logprob_start): 0 = none; else in [1, prompt.size()], and the
  // logprobs of prompt tokens [logprob_start, prompt.size()) arrive as kPromptLogprob events, each
  // once, before sample 0's first token (sample 0 scores them during its prefill).
  int32_t logprob_start = 0;
  // Prefix cache isolation (GenerateRequest.cache_salt): only requests with the same salt share
  // cached K/V. Empty = the shared namespace.
  std::string cache_salt;
  // Who sent it, the unit of fair share (SchedulerOptions::fair_share): "key NAME" when API keys
  // are on, else "peer ADDRESS" (the client connection). Empty: one anonymous client.
  std::string client;
  // Structured outputs: each sample's matcher starts from this (null: unconstrained).
  std::shared_ptr<const CompiledConstraint> constraint;
};

struct SchedulerOptions {
  int64_t max_batch_tokens = 2048;      // tokens per worker step (capped by the worker's own limit)
  int64_t max_running = 256;            // sequences per worker step (capped by the worker's limit)
  int64_t prefill_chunk = 512;          // most prompt tokens one sequence feeds in one step
  int64_t max_queued_requests = 1024;   // admission: waiting requests
  int64_t max_queued_tokens = 1 << 22;  // admission: prompt tokens (length * n) of waiting requests
  // A worker whose step stream broke is reconnected; after this long unreachable it is marked
  // down and its sequences move to the other workers.
  int64_t worker_down_after_ms = 3000;
  // Longest single reconnection attempt (the helper thread retries until the worker is back).
  int64_t reconnect_attempt_ms = 500;
  // Send plan N+1 before reading result N, so a worker never idles while the loop applies a
  // result and plans (DESIGN.md "The step contract"). A token that arrives for a sequence that
  // finished meanwhile is dropped; releases then reach the worker one plan later.
  bool overlap_steps = true;
  // A request running on a worker whose stream breaks restarts elsewhere or after the reconnect;
  // one caught in more than this many breaks is aborted with UNAVAILABLE, so a request that makes
  // its worker fail every time cannot keep restarting it forever.
  int64_t max_worker_failures = 3;
  // A worker being drained (it left the --workers DNS name, DrainWorker, or it said it shuts
  // down) gets no new sequence; its running ones may finish there for this long, then restart on
  // the other workers.
  int64_t worker_drain_timeout_ms = 60000;
  // Radix prefix cache over each worker's full KV pages (scheduler/prefix_cache.h): requests that
  // start with the same tokens reuse the K/V computed for them, and an n-sample request prefills
  // its prompt once.
  bool prefix_cache = true;
  // Cache-aware routing: a sequence goes to the worker holding the longest cached prefix of it
  // unless that worker has more than this many sequences over the least-loaded one.
  int64_t cache_route_slack = 8;
  // Latency-bounded steps (StepCostModel): a step with decode rows holds at most the tokens its
  // cost model predicts fit in this many ms (0 = auto: 3x a step of its decode rows alone, times
  // waiting / decode rows when more sequences wait for their first token; -1 = unbounded, only
  // max_batch_tokens), and always the decode rows plus 64 prefill tokens.
  int64_t max_step_ms = 0;
  // Fair share across clients (scheduler/fair_share.h, VTC): waiting sequences of the client
  // that received the least service start first, those of the client that received the most
  // are preempted first; priorities come before both. Off: arrival order.
  bool fair_share = true;
};

}  // namespace astr::sched
