// Plans one step of one worker: which sequences feed how many tokens, which start, which pages
// they get, which are preempted, written into a reused PlannedStep (step_plan.h), plain C++ that
// the worker connection serializes.
//
// Order of a step (DESIGN.md "The step contract"):
//   1. decode rows of running sequences (one token each) get the token budget first;
//   2. running sequences that are still prefilling get chunks of at most prefill_chunk tokens from
//      what is left (a long prompt spreads over several steps; only its final chunk samples);
//   3. new sequences are admitted from the waiting queue in queue order while the budget, the
//      sequence cap and the free pages allow (their whole first chunk must fit in free pages).
// Every step also fits the worker's logits rows (StepLimits::max_logits_rows): a sampling entry
// takes one, and a chunk of a sequence that scores its prompt (SchedRequest.logprob_start) one
// per scored row, so such a chunk is cut where its rows run out. A running sequence always keeps
// one row for each running sequence after it, so everyone progresses; admission takes what is
// left.
// Prefix cache (when the queues have one): a sequence that starts reuses the longest run of cached
// full pages that prefixes its known tokens (at least one token is always computed, and a scoring
// sequence computes every row it scores), and every entry's newly full pages are inserted as the
// plan is built, pending until the next step. A sequence whose next page is pending (being
// computed by this very step, e.g. by another sample of its request) waits a step to reuse it
// instead of computing it twice; later sequences may pass it.
// Pages are granted to running sequences in queue order. When a running sequence needs a page and
// none is free, the preemption policy picks a victim among the sequences not yet granted this
// step (itself included): its pages are freed, its live id is released in this very plan, and it
// goes back to its place in the waiting queue, to restart later from prompt + generated tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "scheduler/fair_share.h"
#include "scheduler/page_pool.h"
#include "scheduler/policies.h"
#include "scheduler/prefix_cache.h"
#include "scheduler/sequence.h"
#include "scheduler/step_plan.h"

namespace astr::sched {

// One worker's sequences as the planner sees them. Owned by the loop thread.
struct WorkerQueues {
  WorkerQueues(int64_t num_pages, int32_t page_size, KvWindow window = {})
      : pool(num_pages, page_size, window) {}
  ~WorkerQueues();

  PagePool pool;
  // The radix prefix cache over `pool` (nullptr = off) and the weight version whose K/V the loop
  // lets it keep (a sequence computed under another version inserts nothing).
  std::unique_ptr<PrefixCache> cache;
  int64_t cache_version = 0;
  // LongRoPE models (InfoResponse.longrope_original_context; 0 = not one): a sequence (re)started
  // with at most this many tokens is computed with the short factors and restarted before it
  // computes this position; one started with more uses the long factors throughout. Their K/V
  // differ, so the prefix cache keeps them in different namespaces.
  int32_t longrope_original = 0;
  // The prefix-cache namespace of a sequence (re)started with `start_tokens` tokens.
  uint64_t CacheNamespace(const Sequence* seq, int64_t start_tokens) const;
  // Whether running `seq` must restart before its next decode row (see longrope_original).
  bool NeedsLongRopeRestart(const Sequence* seq) const {
    return longrope_original > 0 && !seq->prefilling() &&
           seq->num_start_tokens <= longrope_original && seq->num_computed >= longrope_original;
  }
  void EnableCache() { cache = std::make_unique<PrefixCache>(&pool); }
  // Inserts the full pages of `seq` whose K/V are computed, or computed by step ready_step - 1
  // (0 = already computed), and whose tokens are known.
  void CachePages(Sequence* seq, uint64_t ready_step);
  // Prompt + generated tokens of `seq` (scratch, valid until the next call).
  std::span<const int32_t> TokensOf(const Sequence* seq, int64_t limit);
  // The cached pages (in namespace `ns`) that prefix seq's tokens, covering at most `reusable`
  // tokens, and their window ids (PrefixCache::Match; nothing without a cache).
  PrefixCache::MatchResult MatchCachedPrefix(const Sequence* seq, uint64_t ns, int64_t reusable,
                                             uint64_t step, bool touch, std::vector<int32_t>* pages,
                                             std::vector<int32_t>* window = nullptr);
  std::vector<Sequence*> running;  // live on the worker, in QueueOrder
  std::vector<Sequence*> waiting;  // to be (re)started here, in QueueOrder
  std::vector<uint64_t> release;   // live ids to release with the next plan

  // Inserts a sequence that is not live into the waiting queue at its place.
  void Enqueue(Sequence* seq);
  // Takes `seq` out of this worker (finished, cancelled, moved): a live sequence's id is released
  // with the next plan and its pages are free at once, so that plan may hand them to others.
  void Remove(Sequence* seq);
  // Stops running sequence running[index] and puts it back into the waiting queue; it restarts
  // from prompt + generated tokens. Counts a preemption on its request unless told not to (a
  // restart for new weights is not one).
  void Requeue(size_t index, bool count_preemption = true);
  // The step stream restarted empty (worker failure): every running sequence goes back to the
  // waiting queue as preempted and nothing is left to release.
  void ResetStream();
  // Empties the prefix cache; returns the pages that became unused.
  int64_t FlushCache();
  int64_t num_sequences() const { return static_cast<int64_t>(running.size() + waiting.size()); }

 private:
  std::vector<int32_t> tokens_;  // TokensOf's scratch
};

// What Plan did, besides the plan itself. Reused across steps (Clear keeps the capacity).
struct PlanOutcome {
  // Prompt tokens [first_position, first_position + count) of `seq`, scored by one entry.
  struct ScoredRun {
    Sequence* seq = nullptr;
    uint64_t live_id = 0;  // as for sampling_live_ids
    int32_t first_position = 0;
    int32_t count = 0;
  };

  uint64_t step_id = 0;
  std::vector<Sequence*> sampling;          // sequences whose entry samples, in entry order
  std::vector<uint64_t> sampling_live_ids;  // their live ids in this plan (a later preemption or
                                            // finish changes Sequence::live_id: the token is stale)
  std::vector<ScoredRun> scoring;           // entries that score prompt rows, in entry order
  int64_t num_tokens = 0;                   // rows in the step
  int32_t num_started = 0;
  int32_t num_preempted = 0;
  int32_t requests_started = 0;       // requests whose first sequence started
  int64_t queued_tokens_started = 0;  // their RequestState::queued_tokens()
  // Prefix cache, over the sequences started: tokens looked up and tokens found.
  int64_t cache_query_tokens = 0;
  int64_t cache_hit_tokens = 0;
  int32_t cache_deferred = 0;  // sequences that wait a step for a pending page
  int32_t longrope_restarts = 0;  // sequences restarted to take LongRoPE's long factors
  int64_t token_budget = 0;    // the step's token budget (StepCostModel; else max_tokens)
  // Constrained entries planned while their last token was in flight (StepEntry.mask_follows):
  // their masks go out once the result before this plan is applied (late_masks_sent).
  std::vector<Sequence*> late_masks;
  std::vector<uint64_t> late_mask_live_ids;
  bool late_masks_sent = false;
  void Clear();
};

// The mask of `matcher`'s next token as StepEntry.allowed_tokens bytes (`words`: scratch).
void FillConstraintMask(ConstraintMatcher& matcher, std::vector<uint32_t>* words,
                        std::string* bytes);

class BatchPlanner {
 public:
  explicit BatchPlanner(StepLimits limits) : limits_(limits) {
    if (limits_.max_logits_rows <= 0) limits_.max_logits_rows = limits_.max_sequences;
  }
  const StepLimits& limits() const { return limits_; }
  // While set (Pause in drain mode), only sequences of requests that already started are
  // admitted; the others keep their places in the queue.
  void set_hold_new_requests(bool hold) { hold_new_requests_ = hold; }
  bool hold_new_requests() const { return hold_new_requests_; }
  // Bounds the tokens of a step that has decode rows (StepCostModel::Budget); nullptr = the
  // limits' max_tokens always. `cost` must outlive the planner's use of it.
  void set_cost_model(const StepCostModel* cost) { cost_ = cost; }
  // Fair share across clients: admission and preemption order, and the service each step gives
  // (charged as entries are planned). nullptr = arrival order. Must outlive the planner's use.
  void set_fair_share(FairShare* fair) { fair_ = fair; }

  // Plans one step of `queues` into `plan` (cleared first, storage reused) and `outcome`.
  // `now` stamps the first scheduling of a request.
  void Plan(WorkerQueues* queues, uint64_t step_id, Clock::time_point now, PlannedStep* plan,
            PlanOutcome* outcome);

 private:
  // Phase 1+2: grants tokens and pages to running sequences (sets step_tokens), preempting.
  int64_t GrantRunning(WorkerQueues* q, PlanOutcome* out, uint64_t step_id);
  // Grows running[i] to hold `tokens` more positions, preempting per policy; false if running[i]
  // itself was preempted.
  bool GrowOrPreempt(WorkerQueues* q, size_t i, int32_t* tokens, PlanOutcome* out,
                     uint64_t step_id);
  void EmitEntry(Sequence* seq, PlannedStep* plan, PlanOutcome* out);
  // Phase 3: starts sequences from the waiting queue.
  void Admit(WorkerQueues* q, int64_t used, uint64_t step_id, Clock::time_point now,
             PlannedStep* plan, PlanOutcome* out);
  void Start(Sequence* seq, int32_t tokens, PlannedStep* plan);
  // Prefix cache at a start: takes the cached pages that prefix seq's tokens (sets num_computed);
  // false when it should wait for a page this step is computing.
  bool ReuseCachedPrefix(WorkerQueues* q, Sequence* seq, uint64_t step_id, PlanOutcome* out);

  StepLimits limits_;
  int64_t logits_rows_ = 0;  // logits rows granted in the step being planned
  QueueOrder order_;
  PreemptionPolicy preemption_;
  uint64_t next_live_id_ = 1;
  bool hold_new_requests_ = false;
  const StepCostModel* cost_ = nullptr;
  FairShare* fair_ = nullptr;
  std::vector<Sequence*> admit_order_;  // Admit's scratch: waiting in fair-share order
  int64_t step_budget_ = 0;  // token budget of the step being planned
  std::vector<int32_t> matched_;         // ReuseCachedPrefix's scratch
  std::vector<int32_t> matched_window_;  // ReuseCachedPrefix's scratch
  std::vector<uint32_t> mask_;    // EmitEntry's scratch: a constrained draw's token mask
};

}  // namespace astr::sched
