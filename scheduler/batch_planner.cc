#include "scheduler/batch_planner.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <span>

#include "common/base/scored_rows.h"

namespace astr::sched {

namespace {

void InsertSorted(std::vector<Sequence*>* list, Sequence* seq) {
  auto it = std::upper_bound(list->begin(), list->end(), seq, QueueOrder());
  list->insert(it, seq);
}

// Forgets a sequence's place on the worker: not live, no pages, nothing computed.
void ResetPlacement(Sequence* seq) {
  seq->live_id = 0;
  seq->pages.Release();
  seq->window_pages.Release();
  seq->window_first = 0;
  seq->num_computed = 0;
  seq->num_start_tokens = 0;
  seq->score_from = 0;
  seq->step_tokens = 0;
  seq->in_flight = 0;  // tokens still in flight for the old id are dropped when they arrive
  seq->cache_cursor = {};
}

// The rows of a chunk of `tokens` from seq.num_computed that score a prompt token.
ScoredRows ScoredRowsOf(const Sequence& seq, int32_t tokens) {
  return astr::ScoredRowsOf(seq.score_from, seq.num_prompt_tokens(), seq.num_computed,
                            seq.num_computed + tokens);
}

// Logits rows a chunk of `tokens` takes: its scored rows, plus one if it samples.
int64_t LogitsRowsOf(const Sequence& seq, int32_t tokens) {
  const bool samples = seq.num_computed + tokens >= seq.num_start_tokens;
  return ScoredRowsOf(seq, tokens).size() + (samples ? 1 : 0);
}

// The longest chunk of at most `tokens` whose logits rows fit in `rows` (0 if none does).
int32_t FitLogitsRows(const Sequence& seq, int32_t tokens, int64_t rows) {
  if (LogitsRowsOf(seq, tokens) <= rows) return tokens;
  int64_t fit = tokens;
  if (seq.score_from > 0) {
    // Scored rows are contiguous from the first one: at most `rows` of them.
    const int64_t first = ScoredRowsOf(seq, tokens).begin;
    fit = std::min<int64_t>(fit, first + std::max<int64_t>(rows, 0) - seq.num_computed);
  }
  // The sample row, last of the chunk, may still be one too many.
  while (fit > 0 && LogitsRowsOf(seq, static_cast<int32_t>(fit)) > rows) --fit;
  return static_cast<int32_t>(fit);
}

// Gives back the window pages no later query of `seq` reads (PagePool::window).
void DropBehindWindow(PagePool& pool, Sequence* seq) {
  const int32_t tables = pool.window().tables;
  if (tables == 0) return;
  const int64_t first = pool.FirstWindowPage(seq->num_computed);
  if (first <= seq->window_first) return;
  seq->window_pages.DropFront((first - seq->window_first) * tables);
  seq->window_first = first;
}

// Grows seq's page list (and window list) by `grow` token pages; the pool must have
// pool.IdsFor(grow) free.
void GrowPages(PagePool& pool, Sequence* seq, int64_t grow) {
  if (grow <= 0) return;
  bool ok = seq->pages.GrowTo(seq->pages.size() + grow);
  if (pool.window().tables > 0) {
    ok = ok && seq->window_pages.GrowTo(seq->window_pages.size() + grow * pool.window().tables);
  }
  assert(ok);
  (void)ok;
}

}  // namespace

WorkerQueues::~WorkerQueues() = default;

std::span<const int32_t> WorkerQueues::TokensOf(const Sequence* seq, int64_t limit) {
  const std::vector<int32_t>& prompt = seq->request->req.prompt;
  const int64_t n = std::min<int64_t>(limit, seq->num_tokens());
  tokens_.clear();
  const int64_t from_prompt = std::min<int64_t>(n, static_cast<int64_t>(prompt.size()));
  tokens_.insert(tokens_.end(), prompt.begin(), prompt.begin() + from_prompt);
  tokens_.insert(tokens_.end(), seq->generated.begin(),
                 seq->generated.begin() + (n - from_prompt));
  return tokens_;
}

void WorkerQueues::CachePages(Sequence* seq, uint64_t ready_step) {
  if (cache == nullptr || seq->cache_version != cache_version || seq->pages.pool() != &pool) {
    return;
  }
  // Positions whose K/V the worker holds (or computes in the step being planned) and whose token
  // the loop knows (a decode row feeds a token that may still be on its way).
  const int64_t full = std::min<int64_t>(seq->num_computed, seq->num_tokens()) / pool.page_size();
  const PrefixCache::Cursor& at = seq->cache_cursor;
  if (at.epoch == cache->epoch() && (at.blocked || full <= at.pages)) return;  // nothing new
  const std::span<const int32_t> tokens = TokensOf(seq, full * pool.page_size());
  cache->Insert(seq->cache_ns, tokens, seq->pages.pages(), seq->window_pages.pages(),
                seq->window_first, ready_step, &seq->cache_cursor);
}

PrefixCache::MatchResult WorkerQueues::MatchCachedPrefix(const Sequence* seq, uint64_t ns,
                                                         int64_t reusable, uint64_t step,
                                                         bool touch, std::vector<int32_t>* pages,
                                                         std::vector<int32_t>* window) {
  const int64_t max_pages = reusable / pool.page_size();
  if (cache == nullptr || max_pages <= 0) return {};
  return cache->Match(ns, TokensOf(seq, max_pages * pool.page_size()), max_pages, step, touch,
                      pages, window);
}

uint64_t WorkerQueues::CacheNamespace(const Sequence* seq, int64_t start_tokens) const {
  const bool long_rope = longrope_original > 0 && start_tokens > longrope_original;
  return PrefixCache::Namespace(cache_version, seq->request->req.cache_salt, long_rope ? 1 : 0);
}

int64_t WorkerQueues::FlushCache() { return cache == nullptr ? 0 : cache->Flush(); }

void WorkerQueues::Enqueue(Sequence* seq) {
  seq->state = Sequence::State::kWaiting;
  InsertSorted(&waiting, seq);
}

void WorkerQueues::Remove(Sequence* seq) {
  if (seq->state == Sequence::State::kRunning) {
    auto it = std::find(running.begin(), running.end(), seq);
    if (it != running.end()) running.erase(it);
    release.push_back(seq->live_id);
    CachePages(seq, 0);  // what it computed stays for others (e.g. a conversation's next turn)
    ResetPlacement(seq);
  } else if (seq->state == Sequence::State::kWaiting) {
    auto it = std::find(waiting.begin(), waiting.end(), seq);
    if (it != waiting.end()) waiting.erase(it);
  }
}

void WorkerQueues::Requeue(size_t index, bool count_preemption) {
  Sequence* seq = running[index];
  running.erase(running.begin() + static_cast<std::ptrdiff_t>(index));
  release.push_back(seq->live_id);
  CachePages(seq, 0);  // its restart (here) reuses what it computed
  ResetPlacement(seq);
  if (count_preemption) ++seq->request->preemptions;
  Enqueue(seq);
}

void WorkerQueues::ResetStream() {
  // The worker's KV is gone with its stream (the process may have restarted).
  FlushCache();
  for (Sequence* seq : running) {
    ResetPlacement(seq);
    ++seq->request->preemptions;
    Enqueue(seq);
  }
  running.clear();
  release.clear();
}

void FillConstraintMask(ConstraintMatcher& matcher, std::vector<uint32_t>* words,
                        std::string* bytes) {
  words->resize(static_cast<size_t>(ConstraintMaskWords(matcher.vocab_size())));
  matcher.FillMask(*words);
  static_assert(std::endian::native == std::endian::little, "masks travel as little-endian");
  bytes->assign(reinterpret_cast<const char*>(words->data()), words->size() * sizeof(uint32_t));
}

void PlanOutcome::Clear() {
  step_id = 0;
  sampling.clear();
  sampling_live_ids.clear();
  scoring.clear();
  num_tokens = 0;
  num_started = 0;
  num_preempted = 0;
  requests_started = 0;
  queued_tokens_started = 0;
  cache_query_tokens = 0;
  cache_hit_tokens = 0;
  cache_deferred = 0;
  longrope_restarts = 0;
  token_budget = 0;
  late_masks.clear();
  late_mask_live_ids.clear();
  late_masks_sent = false;
}

void BatchPlanner::Plan(WorkerQueues* q, uint64_t step_id, Clock::time_point now, PlannedStep* plan,
                        PlanOutcome* out) {
  plan->Clear();
  out->Clear();
  plan->step_id = step_id;
  out->step_id = step_id;
  const int64_t used = GrantRunning(q, out, step_id);
  // Decode rows first in batch order, then prefill chunks (a sequence's kind is fixed before
  // EmitEntry advances it).
  for (Sequence* seq : q->running) {
    if (seq->step_tokens > 0 && !seq->prefilling()) EmitEntry(seq, plan, out);
  }
  for (Sequence* seq : q->running) {
    if (seq->step_tokens > 0 && seq->prefilling()) EmitEntry(seq, plan, out);
  }
  // Pages this step fills are cached now, pending until the next step: a sequence admitted below
  // that needs one waits for it rather than computing it again.
  if (q->cache != nullptr) {
    for (Sequence* seq : q->running) q->CachePages(seq, step_id + 1);
  }
  Admit(q, used, step_id, now, plan, out);
  // Releases (finished, cancelled, preempted just now) go out with this plan; the worker applies
  // them before starts, so pages freed here may already be reused by this plan.
  plan->release.assign(q->release.begin(), q->release.end());
  q->release.clear();
}

int64_t BatchPlanner::GrantRunning(WorkerQueues* q, PlanOutcome* out, uint64_t step_id) {
  int64_t used = 0;
  logits_rows_ = 0;
  const int32_t context = limits_.max_context_tokens;
  // LongRoPE: a sequence computed with the short factors that reaches the original context
  // restarts (transformers recomputes it then with the long factors), once the token it feeds next
  // is known (with overlap it may still be in flight: it waits a step).
  for (size_t i = 0; i < q->running.size();) {
    Sequence* seq = q->running[i];
    if (q->NeedsLongRopeRestart(seq) && seq->in_flight == 0 && seq->CanSample(context)) {
      q->Requeue(i, /*count_preemption=*/false);
      ++out->longrope_restarts;
      continue;
    }
    ++i;
  }
  // A decode row is due unless the sequence's last token is already in flight (overlap).
  auto wants_decode = [context, q](const Sequence* seq) {
    return !seq->prefilling() && seq->CanSample(context) && !q->NeedsLongRopeRestart(seq);
  };
  // Decode rows not granted yet: prefill chunks only take budget those rows leave.
  int64_t decode_left = 0;
  int64_t prefilling = 0;
  for (Sequence* seq : q->running) {
    seq->step_tokens = 0;
    DropBehindWindow(q->pool, seq);
    if (wants_decode(seq)) ++decode_left;
    if (seq->prefilling()) ++prefilling;
  }
  // With decode rows in the step, its prefill is bounded so that their next token is not held
  // up by a whole chunk of prompts (StepCostModel).
  const int64_t waiting = prefilling + static_cast<int64_t>(q->waiting.size());
  step_budget_ = cost_ != nullptr ? cost_->Budget(decode_left, waiting, limits_.max_tokens)
                                  : limits_.max_tokens;
  out->token_budget = step_budget_;
  const int64_t budget = step_budget_;
  size_t i = 0;
  while (i < q->running.size()) {
    Sequence* seq = q->running[i];
    int32_t tokens = 0;
    if (!seq->prefilling()) {
      if (!wants_decode(seq)) {
        ++i;
        continue;
      }
      --decode_left;
      tokens = used < budget ? 1 : 0;
    } else {
      const int64_t room = std::max<int64_t>(0, budget - used - decode_left);
      tokens = static_cast<int32_t>(std::min<int64_t>(
          {seq->num_start_tokens - seq->num_computed, limits_.prefill_chunk, room}));
      // One logits row stays for every running sequence after this one.
      const int64_t rows_after = static_cast<int64_t>(q->running.size() - i - 1);
      tokens = FitLogitsRows(*seq, tokens, limits_.max_logits_rows - logits_rows_ - rows_after);
    }
    if (tokens == 0) {
      ++i;
      continue;
    }
    const size_t before = q->running.size();
    const bool kept = GrowOrPreempt(q, i, &tokens, out, step_id);
    // Victims come after i in the list (or are i itself); each was a decode row or a prefill that
    // had not been granted, so recount the decode rows still ahead.
    if (q->running.size() != before) {
      decode_left = 0;
      for (size_t j = kept ? i + 1 : i; j < q->running.size(); ++j) {
        if (wants_decode(q->running[j])) ++decode_left;
      }
    }
    if (!kept) continue;  // running[i] is now the next sequence
    seq->step_tokens = tokens;
    used += tokens;
    logits_rows_ += LogitsRowsOf(*seq, tokens);
    ++i;
  }
  return used;
}

bool BatchPlanner::GrowOrPreempt(WorkerQueues* q, size_t i, int32_t* tokens, PlanOutcome* out,
                                 uint64_t step_id) {
  Sequence* seq = q->running[i];
  PagePool& pool = q->pool;
  seq->step_pages_before = seq->pages.size();
  int64_t grow = pool.PagesFor(seq->num_computed + *tokens) - seq->pages.size();
  if (pool.IdsFor(grow) > pool.num_free() && seq->prefilling()) {
    // A prefill chunk shrinks to the pages it can get before anyone is preempted for it.
    const int64_t fit = (seq->pages.size() + pool.num_free() / pool.IdsFor(1)) * pool.page_size() -
                        seq->num_computed;
    if (fit >= 1) {
      *tokens = static_cast<int32_t>(std::min<int64_t>(*tokens, fit));
      grow = pool.PagesFor(seq->num_computed + *tokens) - seq->pages.size();
    }
  }
  while (pool.IdsFor(grow) > pool.num_free()) {
    std::span<Sequence* const> candidates(q->running.data() + i, q->running.size() - i);
    const size_t victim = i + preemption_.PickVictim(candidates, fair_);
    q->running[victim]->preempted_at_step = step_id;
    q->Requeue(victim);
    ++out->num_preempted;
    if (victim == i) return false;
  }
  GrowPages(pool, seq, grow);
  return true;
}

void BatchPlanner::EmitEntry(Sequence* seq, PlannedStep* plan, PlanOutcome* out) {
  PlannedEntry& entry = plan->AddEntry();
  entry.live_id = seq->live_id;
  entry.start_position = static_cast<int32_t>(seq->num_computed);
  entry.num_tokens = static_cast<int32_t>(seq->step_tokens);
  if (const ScoredRows rows = ScoredRowsOf(*seq, seq->step_tokens); rows.size() > 0) {
    // Row p scores the prompt token at position p + 1.
    out->scoring.push_back({.seq = seq,
                            .live_id = seq->live_id,
                            .first_position = static_cast<int32_t>(rows.begin + 1),
                            .count = static_cast<int32_t>(rows.size())});
  }
  const std::vector<int32_t>& pages = seq->pages.pages();
  entry.new_pages.assign(pages.begin() + seq->step_pages_before, pages.end());
  const PagePool* pool = seq->pages.pool();
  if (const int32_t tables = pool->window().tables; tables > 0) {
    const std::vector<int32_t>& window = seq->window_pages.pages();
    entry.new_window_pages.assign(
        window.begin() + (seq->step_pages_before - seq->window_first) * tables, window.end());
  }
  if (fair_ != nullptr) {
    const int64_t start = seq->num_computed, end = start + seq->step_tokens;
    const int64_t input =
        std::max<int64_t>(0, std::min<int64_t>(end, seq->num_prompt_tokens()) - start);
    fair_->Charge(seq->request->client, input, seq->step_tokens - input);
  }
  seq->num_computed += seq->step_tokens;
  // A decode row always samples; a prefill chunk only when it reaches the end of the known tokens.
  const bool sample = seq->num_computed >= seq->num_start_tokens;
  entry.sample = sample;
  if (sample && seq->matcher != nullptr) {
    if (seq->in_flight > 0) {
      // Its mask follows from the token in flight: sent once that result is applied.
      entry.mask_follows = true;
      out->late_masks.push_back(seq);
      out->late_mask_live_ids.push_back(seq->live_id);
    } else {
      FillConstraintMask(*seq->matcher, &mask_, &entry.allowed_tokens);
    }
  }
  if (sample) {
    out->sampling.push_back(seq);
    out->sampling_live_ids.push_back(seq->live_id);
    ++seq->in_flight;
  }
  out->num_tokens += seq->step_tokens;
}

void BatchPlanner::Admit(WorkerQueues* q, int64_t used, uint64_t step_id, Clock::time_point now,
                         PlannedStep* plan, PlanOutcome* out) {
  PagePool& pool = q->pool;
  // Fair share: priority first, then the client served least, then queue order (stable).
  const std::vector<Sequence*>* order = &q->waiting;
  if (fair_ != nullptr && fair_->active_clients() > 1 && q->waiting.size() > 1) {
    admit_order_.assign(q->waiting.begin(), q->waiting.end());
    std::stable_sort(admit_order_.begin(), admit_order_.end(),
                     [this](const Sequence* a, const Sequence* b) {
                       const RequestState& ra = *a->request;
                       const RequestState& rb = *b->request;
                       if (ra.req.priority != rb.req.priority) {
                         return ra.req.priority > rb.req.priority;
                       }
                       return fair_->Counter(ra.client) < fair_->Counter(rb.client);
                     });
    order = &admit_order_;
  }
  size_t taken = 0;  // admitted so far; they leave the waiting queue once at the end
  for (size_t i = 0; i < order->size() &&
                     static_cast<int64_t>(q->running.size() + taken) < limits_.max_sequences &&
                     used < step_budget_;
       ++i) {
    Sequence* seq = (*order)[i];
    // Held (drain): a request that has not started keeps its place; later sequences of started
    // requests may pass it.
    if (hold_new_requests_ && !seq->request->scheduled) continue;
    // Held (its client stopped reading): it waits, keeping its place, until released.
    if (seq->request->held) continue;
    // Just preempted for lack of pages: restarting it in the same plan would only thrash. Later
    // sequences wait behind it, keeping queue order.
    if (seq->preempted_at_step == step_id) break;
    const int32_t known = seq->num_tokens();
    seq->num_start_tokens = known;
    seq->num_computed = 0;
    seq->score_from = seq->PromptScoreFrom();
    if (seq->pages.pool() != &pool) {
      seq->pages = pool.NewList();
      seq->window_pages = pool.NewList();
    }
    if (!ReuseCachedPrefix(q, seq, step_id, out)) continue;  // waits for a page being computed
    const int32_t cached = seq->num_computed;
    const int32_t tokens = FitLogitsRows(
        *seq,
        static_cast<int32_t>(std::min<int64_t>(
            {known - cached, limits_.prefill_chunk, step_budget_ - used})),
        limits_.max_logits_rows - logits_rows_);
    const int64_t grow = pool.PagesFor(cached + tokens) - seq->pages.size();
    if (tokens == 0 || pool.IdsFor(grow) > pool.num_free()) {  // no logits row, or too few pages
      seq->pages.Release();
      seq->window_pages.Release();
      seq->window_first = 0;
      seq->num_computed = 0;
      break;
    }
    const int64_t rows = LogitsRowsOf(*seq, tokens);
    GrowPages(pool, seq, grow);
    seq->live_id = next_live_id_++;
    seq->state = Sequence::State::kRunning;
    Start(seq, tokens, plan);
    seq->step_pages_before = seq->pages.size();  // its first pages travel in SequenceStart
    seq->step_tokens = tokens;
    EmitEntry(seq, plan, out);
    q->CachePages(seq, step_id + 1);
    RequestState* request = seq->request;
    if (!request->scheduled) {
      request->cached_tokens = std::min(cached, seq->num_prompt_tokens());
      request->scheduled = true;
      request->first_scheduled = now;
      ++out->requests_started;
      out->queued_tokens_started += request->queued_tokens();
    }
    used += tokens;
    logits_rows_ += rows;
    ++out->num_started;
    ++taken;
  }
  if (taken == 0) return;
  // Admitted sequences (now running) join the running list at their queue-order places.
  for (Sequence* seq : q->waiting) {
    if (seq->state == Sequence::State::kRunning) InsertSorted(&q->running, seq);
  }
  std::erase_if(q->waiting, [](const Sequence* seq) { return seq->state == Sequence::State::kRunning; });
}

bool BatchPlanner::ReuseCachedPrefix(WorkerQueues* q, Sequence* seq, uint64_t step_id,
                                     PlanOutcome* out) {
  if (q->cache == nullptr) return true;
  seq->cache_version = q->cache_version;
  seq->cache_ns = q->CacheNamespace(seq, seq->num_start_tokens);
  seq->cache_cursor = {};
  // At least the last known token is fed (it samples), and every scored row is computed here.
  int64_t reusable = seq->num_tokens() - 1;
  if (seq->score_from > 0) reusable = std::min<int64_t>(reusable, seq->score_from - 1);
  matched_.clear();
  matched_window_.clear();
  const PrefixCache::MatchResult m = q->MatchCachedPrefix(
      seq, seq->cache_ns, reusable, step_id, /*touch=*/true, &matched_, &matched_window_);
  if (m.pending_next) {
    ++out->cache_deferred;
    return false;
  }
  for (int32_t page : matched_) seq->pages.AppendShared(page);
  for (int32_t page : matched_window_) seq->window_pages.AppendShared(page);
  seq->window_first = m.window_first;
  seq->num_computed = static_cast<int32_t>(m.pages * q->pool.page_size());
  out->cache_query_tokens += seq->num_tokens();  // counted once the sequence does not wait
  out->cache_hit_tokens += seq->num_computed;
  return true;
}

void BatchPlanner::Start(Sequence* seq, int32_t tokens, PlannedStep* plan) {
  const SchedRequest& req = seq->request->req;
  PlannedStart& start = plan->AddStart();
  start.live_id = seq->live_id;
  start.params = &req.sampling;
  start.sample_index = static_cast<uint64_t>(seq->sample_index);
  start.tokens.reserve(seq->num_tokens());
  start.tokens.insert(start.tokens.end(), req.prompt.begin(), req.prompt.end());
  start.tokens.insert(start.tokens.end(), seq->generated.begin(), seq->generated.end());
  start.num_prompt_tokens = static_cast<int32_t>(req.prompt.size());
  start.num_cached_tokens = static_cast<int32_t>(seq->num_computed);  // the reused prefix
  start.pages.assign(seq->pages.pages().begin(), seq->pages.pages().end());
  start.window_first = static_cast<int32_t>(seq->window_first);
  start.window_pages.assign(seq->window_pages.pages().begin(), seq->window_pages.pages().end());
  start.score_from = seq->score_from;
}

}  // namespace astr::sched
