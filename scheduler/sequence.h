// The loop's state of a request and of each of its samples (sequences). Owned and touched only by
// the scheduler's loop thread (and by tests that drive the planner directly).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/finish_rule.h"
#include "scheduler/constraint.h"
#include "scheduler/page_pool.h"
#include "scheduler/prefix_cache.h"
#include "scheduler/sched_types.h"

namespace astr::sched {

struct RequestState;
class RequestChannel;

// One sample of a request: the unit the planner schedules, preempts and moves between workers.
struct Sequence {
  enum class State { kWaiting, kRunning, kDone };

  RequestState* request = nullptr;
  int32_t sample_index = 0;
  State state = State::kWaiting;
  int worker = -1;  // index of the worker whose queues hold it; -1 before routing
  // Tokens generated so far (accepted by the loop). On a restart the worker is given
  // prompt + generated, so it continues the same RNG stream.
  std::vector<int32_t> generated;
  Clock::time_point last_token_at{};  // when the loop accepted generated.back()
  // Structured outputs (request->req.constraint): the matcher has accepted exactly `generated`,
  // so restarts and moves need nothing replayed. Its next draw needs the mask of the state after
  // the last token, so it is never planned with a token in flight (no overlap for it).
  std::unique_ptr<ConstraintMatcher> matcher;

  // While running on a worker. A sequence is known across restarts, preemptions and moves by
  // (request->key, sample_index); its live id names one start on one worker: a fresh one on every
  // (re)start, on the worker's step stream (SequenceStart.live_id), 0 = not live.
  uint64_t live_id = 0;
  PageList<PagePool> pages;
  // With sliding-window page groups (PagePool::window): the window ids of its token pages
  // [window_first, pages.size()), window().tables per page (page-major); those of earlier pages,
  // behind every query's window, went back to the pool.
  PageList<PagePool> window_pages;
  int64_t window_first = 0;
  int32_t num_start_tokens = 0;  // prompt + generated at the (re)start: the prefill target
  int32_t num_computed = 0;      // positions whose K/V the worker holds (fed so far)
  // This start scores prompt tokens [score_from, prompt size) (SequenceStart.score_from); 0 =
  // none. Set from PromptScoreFrom() when it starts.
  int32_t score_from = 0;
  // Prefix cache: the namespace its K/V goes under (weight version at the start + cache_salt),
  // the version it was computed under, and where its pages stand in the worker's tree.
  uint64_t cache_ns = 0;
  int64_t cache_version = -1;
  PrefixCache::Cursor cache_cursor;
  // Sampling entries sent whose tokens have not come back yet (0 or 1 without overlap; up to 2
  // with it). A sequence is not planned past its last token: see CanSample.
  int32_t in_flight = 0;

  // Planner scratch for the step being planned.
  int32_t step_tokens = 0;         // tokens fed in this step (0 = no entry)
  int64_t step_pages_before = 0;   // pages held before this step's growth
  uint64_t preempted_at_step = 0;  // step id of its last preemption (not re-admitted then)

  int32_t num_prompt_tokens() const;
  // What routing counts against a worker: prompt + max_tokens positions.
  int64_t footprint() const;
  int32_t num_tokens() const {
    return num_prompt_tokens() + static_cast<int32_t>(generated.size());
  }
  // A (re)started sequence feeds its known tokens in chunks; afterwards it decodes one token per
  // step (the one it sampled last, at position num_computed == num_tokens() - 1).
  bool prefilling() const { return num_computed < num_start_tokens; }
  // Whether one more token may be sampled, counting those in flight: it stops at max_tokens and
  // at the end of the context (`max_context_tokens` 0 = unknown).
  bool CanSample(int32_t max_context_tokens) const;
  // The score_from a (re)start gets now: sample 0 of a scoring request scores the prompt tokens
  // whose scores were not delivered yet; 0 when there are none (or for another sample).
  int32_t PromptScoreFrom() const;
};

// A submitted request: its parameters, channel, samples and timings.
struct RequestState {
  uint64_t key = 0;  // also the arrival order: keys increase with Submit calls
  SchedRequest req;
  std::shared_ptr<RequestChannel> channel;
  std::vector<std::unique_ptr<Sequence>> samples;  // [n]
  int32_t open_samples = 0;                        // samples not finished yet
  bool scheduled = false;                          // some sample was started on a worker
  bool closed = false;
  Clock::time_point first_scheduled{};
  Clock::time_point first_token{};
  bool has_first_token = false;
  int32_t preemptions = 0;
  // Prompt scoring: scores delivered so far, positions [req.logprob_start, + this).
  int32_t prompt_scores_sent = 0;
  // Prompt tokens whose K/V came from the prefix cache at the request's first start (usage).
  int32_t cached_tokens = 0;
  // Fair share (FairShare): its client's id, -1 when fair share is off.
  int32_t client = -1;
  // Held (Scheduler::Hold, its client stopped reading): its sequences were preempted and none is
  // started again until it is released.
  bool held = false;
  int32_t worker_failures = 0;      // worker stream breaks this request was running through
  uint64_t last_failure_break = 0;  // the loop's break counter when it was last counted
  // Prompt tokens it counts for in the admission queue (prompt length * n) until scheduled.
  int64_t queued_tokens() const { return static_cast<int64_t>(req.prompt.size()) * req.n; }
};

inline int32_t Sequence::num_prompt_tokens() const {
  return static_cast<int32_t>(request->req.prompt.size());
}

inline int64_t Sequence::footprint() const {
  return num_prompt_tokens() + static_cast<int64_t>(request->req.max_tokens);
}

inline int32_t Sequence::PromptScoreFrom() const {
  const SchedRequest& req = request->req;
  if (sample_index != 0 || req.logprob_start <= 0) return 0;
  const int32_t next = req.logprob_start + request->prompt_scores_sent;
  return next < num_prompt_tokens() ? next : 0;
}

inline bool Sequence::CanSample(int32_t max_context_tokens) const {
  const int32_t ahead = static_cast<int32_t>(generated.size()) + in_flight;
  const StopConditions length{.max_tokens = request->req.max_tokens,
                              .max_context_tokens = max_context_tokens};
  return !ReachedLength(length, ahead, num_prompt_tokens() + ahead);
}

}  // namespace astr::sched
