// The scheduler's policies, one small class each (CONVENTIONS #4). The loop and the planner call
// them and contain no policy of their own, so changing one (say, shortest-prompt-first order)
// touches one class.
//
//   QueueOrder        which sequence goes first: the waiting queue's and the running list's order
//   StepCapacity      how much one worker step may hold (tokens, sequences, prefill chunk)
//   PreemptionPolicy  which running sequence gives up its pages when a page is missing
//   AdmissionPolicy   whether Submit queues a request
//   Router            which worker a sequence is placed on
//   StepCostModel     what a step of T tokens costs on a worker, and how many tokens fit a target
#pragma once

#include <cstdint>
#include <span>

#include "common/base/status.h"
#include "scheduler/fair_share.h"
#include "scheduler/sched_types.h"
#include "scheduler/sequence.h"

namespace astr::sched {

// Priority descending, then arrival (request key) ascending, then sample index ascending. A strict
// total order over live sequences, so a preempted sequence goes back to exactly its old place.
class QueueOrder {
 public:
  bool operator()(const Sequence* a, const Sequence* b) const;
};

// Limits of one step on one worker: the scheduler's flags capped by what the worker accepts.
struct StepLimits {
  int64_t max_tokens = 0;     // token budget (rows) of a step
  int64_t max_sequences = 0;  // sequences live on the worker (each has at most one entry a step)
  int64_t prefill_chunk = 0;  // most prompt tokens one sequence feeds in one step
  int32_t max_context_tokens = 0;  // positions one sequence may use (0 = unknown)
  // Logits rows of a step: one per sampling entry plus one per scored prompt row; the worker's
  // max_batch (>= max_sequences). 0 = max_sequences.
  int64_t max_logits_rows = 0;
};

class StepCapacity {
 public:
  explicit StepCapacity(const SchedulerOptions& options) : options_(options) {}
  // A worker's own limits (InfoResponse max_batch_tokens, max_batch, max_context_tokens; 0 =
  // none).
  StepLimits For(int64_t worker_max_batch_tokens, int64_t worker_max_batch,
                 int32_t max_context_tokens) const;

 private:
  SchedulerOptions options_;
};

// Lowest priority first; among equals the newest (latest arrival, highest sample index), whose
// recompute costs the least and whose client has waited the least.
// With fair share, among equal priorities the sequence of the client with the largest virtual
// counter goes first.
class PreemptionPolicy {
 public:
  // Index in `candidates` (non-empty) of the sequence to preempt.
  size_t PickVictim(std::span<Sequence* const> candidates, const FairShare* fair = nullptr) const;
};

// What admission looks at, as of the Submit call.
struct QueueCounters {
  int64_t waiting_requests = 0;  // admitted, not yet scheduled
  int64_t waiting_tokens = 0;    // their prompt tokens (prompt length * n)
  bool draining = false;
};

// Bounds the admission queue: RESOURCE_EXHAUSTED past --max-queued-requests or
// --max-queued-tokens, UNAVAILABLE while draining.
class AdmissionPolicy {
 public:
  explicit AdmissionPolicy(const SchedulerOptions& options) : options_(options) {}
  Status Admit(const QueueCounters& queue, const SchedRequest& request) const;

 private:
  SchedulerOptions options_;
};

// A worker as routing sees it.
struct WorkerLoad {
  bool accepting = false;       // step stream up (or, as a last resort, reconnecting)
  int64_t sequences = 0;        // running + waiting sequences placed on it
  int64_t tokens = 0;           // their tokens still to be computed or generated
  int64_t capacity_tokens = 0;  // tokens its whole KV pool holds
  int64_t cached_tokens = 0;    // leading tokens of the sequence its prefix cache holds
};

// Cache-aware least loaded. Only workers whose pool can hold the sequence alone qualify. The
// least-loaded one has the fewest sequences, then the fewest tokens, then the lowest index. Among
// the workers with at most `cache_slack` sequences more than it, the one whose prefix cache holds
// the longest prefix of the sequence's tokens is chosen instead (ties: fewer sequences, lower
// index): reusing K/V beats spreading load until the imbalance passes
// SchedulerOptions::cache_route_slack (SGLang's router applies the same idea with its balance
// thresholds).
class Router {
 public:
  explicit Router(int64_t cache_slack = 0) : cache_slack_(cache_slack) {}
  // Index of the chosen worker, or -1 when none qualifies.
  int Pick(std::span<const WorkerLoad> workers, int64_t sequence_tokens) const;

 private:
  int64_t cache_slack_;
};

// A worker's step time as a function of its tokens, t(T) = fixed + per_token * T, fitted by least
// squares with exponential forgetting over the worker's own step timings (StepResult.step_ns),
// so it follows the model, the backend, the machine and its load. The planner asks it how many
// tokens a step may hold so that the decode rows' inter-token latency stays bounded:
//
//   target = --max-step-ms, or (0 = auto) kAutoFactor * max(1, waiting / decode rows)
//                                          * t(decode rows alone)
//   budget = max(decode rows + kMinPrefillTokens, the largest T with t(T) <= target)
//
// so a step that also prefills takes at most about kAutoFactor decode steps (prefill spreads over
// steps instead of stalling every stream for a whole chunk), while prompts always progress by at
// least kMinPrefillTokens a step. `waiting` counts the sequences that wait for their first token
// (queued or still prefilling): when more of them wait than decode, the auto target grows in
// proportion, so a burst of arrivals is not held back for the sake of a few streams. A step
// without decode rows is not bounded (nobody waits on it).
class StepCostModel {
 public:
  static constexpr double kAutoFactor = 3.0;
  static constexpr int64_t kMinPrefillTokens = 64;
  static constexpr int kMinSamples = 8;  // steps observed before the model bounds anything

  // `max_step_ms`: > 0 a fixed target, 0 auto, < 0 no bound.
  explicit StepCostModel(int64_t max_step_ms = 0) : max_step_ms_(max_step_ms) {}

  void Observe(int64_t tokens, int64_t step_ns);
  bool calibrated() const { return samples_ >= kMinSamples; }
  double fixed_ms() const { return fixed_ms_; }
  double per_token_ms() const { return per_token_ms_; }
  double PredictMs(int64_t tokens) const { return fixed_ms_ + per_token_ms_ * tokens; }
  // Token budget of a step with `decode_rows` decode rows and `waiting` sequences waiting for
  // their first token, at most `max_tokens`.
  int64_t Budget(int64_t decode_rows, int64_t waiting, int64_t max_tokens) const;

 private:
  int64_t max_step_ms_;
  int samples_ = 0;
  // Decayed sums of the fit: weights, T, T^2, t, T*t.
  double s0_ = 0, s1_ = 0, s2_ = 0, sy_ = 0, sty_ = 0;
  double fixed_ms_ = 0, per_token_ms_ = 0;
};

}  // namespace astr::sched
