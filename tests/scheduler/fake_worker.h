// An in-process worker for the scheduler core's tests: it checks every plan strictly (the
// invariants a real worker validates, and more), keeps a record of each plan, and samples
// deterministic tokens: FakeToken(sample_index, position, seed), so a test computes the expected
// output of a request without running any scheduler code.
//
// Its KV pool is modelled by what each slot holds (the token written at a position): a start
// that reuses cached pages (num_cached_tokens) must find exactly its tokens there, and a write
// must go into a page that no other live sequence maps (a sequence never appends into a shared
// page). A worker that dies or whose stream ends forgets every slot.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/scheduler.h"
#include "scheduler/worker_connection.h"

namespace astr::sched::testing {

// The token a fake worker samples at `position` (the index the new token takes in its sequence).
inline int32_t FakeToken(uint64_t sample_index, int64_t position, uint64_t seed, int32_t vocab) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (sample_index + 1) * 0xBF58476D1CE4E5B9ull +
               (static_cast<uint64_t>(position) + 1) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
}

// The logprob a fake worker reports for the prompt token at `position` of a scoring sequence
// (SequenceStart.score_from); its one top alternative is (position, this logprob).
inline float FakePromptLogprob(uint64_t sample_index, int64_t position, uint64_t seed) {
  return -0.125f * static_cast<float>(FakeToken(sample_index, position, seed, 64) + 1);
}

struct FakeWorkerConfig {
  std::string address = "fake-worker";
  int64_t num_pages = 64;
  int32_t page_size = 4;
  int32_t max_batch = 64;
  int32_t max_batch_tokens = 256;
  int32_t max_context_tokens = 4096;
  int32_t vocab_size = 1000;
  std::string content_hash = "fake-model";
  int64_t weight_version = 0;  // as Info reports it
  // Sliding-window page groups (InfoResponse.kv_window_tables / kv_window_tokens): each token
  // page also has window_tables window pages, read only by queries whose window reaches them.
  int32_t window_tables = 0;
  int64_t window_tokens = 0;
  std::chrono::microseconds step_delay{0};  // simulated compute per step
};

// What one plan contained, for iteration-table assertions.
struct PlanRecord {
  struct Entry {
    uint64_t live_id;
    uint64_t seed;
    uint64_t sample_index;
    int32_t start;
    int32_t num_tokens;
    bool sample;
    bool decode;  // fed the token sampled last (a decode row)
  };
  uint64_t step_id = 0;
  std::vector<Entry> entries;
  std::vector<uint64_t> started;            // live ids
  std::vector<int32_t> started_score_from;  // their SequenceStart.score_from
  std::vector<uint64_t> released;           // live ids
  std::vector<uint64_t> released_seeds;
  int64_t tokens = 0;
  int64_t scored_rows = 0;  // prompt rows scored (SequenceStart.score_from)
  int64_t pages_in_use_after = 0;
};

class FakeWorker {
 public:
  explicit FakeWorker(FakeWorkerConfig config = {})
      : config_(std::move(config)),
        page_maps_(config_.num_pages, 0),
        slots_(config_.num_pages * config_.page_size, -1) {}

  const FakeWorkerConfig& config() const { return config_; }

  v1::InfoResponse Info() const {
    v1::InfoResponse info;
    info.set_model_name("fake");
    info.set_content_hash(config_.content_hash);
    info.set_vocab_size(config_.vocab_size);
    info.set_max_context_tokens(config_.max_context_tokens);
    info.set_backend("fake");
    info.set_num_pages(config_.num_pages);
    info.set_page_size(config_.page_size);
    info.set_max_batch(config_.max_batch);
    info.set_max_batch_tokens(config_.max_batch_tokens);
    info.set_weight_version(config_.weight_version);
    info.set_draining(draining_.load());
    info.set_kv_window_tables(config_.window_tables);
    info.set_kv_window_tokens(config_.window_tokens);
    return info;
  }

  // Checks and executes one plan (the worker side of Send + Receive).
  v1::StepResult Execute(const v1::StepPlan& plan) {
    std::lock_guard<std::mutex> lock(mu_);
    PlanRecord record;
    record.step_id = plan.step_id();
    const size_t violations_before = violations_.size();
    if (plan.step_id() <= last_step_id_) Violation(plan, "step_id not increasing");
    last_step_id_ = plan.step_id();
    for (uint64_t id : plan.release()) {
      auto it = live_.find(id);
      if (it == live_.end()) {
        Violation(plan, "release of unknown seq " + std::to_string(id));
        continue;
      }
      for (int32_t p : it->second.pages) --page_maps_[p];
      for (int32_t p : it->second.window_pages) --page_maps_[p];
      record.released.push_back(id);
      record.released_seeds.push_back(it->second.seed);
      live_.erase(it);
    }
    // The scheduler gave back every live sequence's window pages behind its next query's window.
    for (auto& [id, seq] : live_) DropBehindWindow(&seq);
    for (const v1::SequenceStart& s : plan.start()) CheckStart(plan, s, &record);
    CheckEntries(plan, &record);
    v1::StepResult result;
    result.set_step_id(plan.step_id());
    if (violations_.size() != violations_before) {
      result.set_error_code(3);  // INVALID_ARGUMENT, as the real worker refuses a bad plan
      result.set_error_message(violations_.back());
    } else {
      RunEntries(plan, &result);
    }
    for (const auto& [id, seq] : live_) {
      record.pages_in_use_after += seq.pages.size() + seq.window_pages.size();
    }
    history_.push_back(std::move(record));
    ++plans_;
    cv_.notify_all();
    return result;
  }

  // --- Failure injection and stepping control (called by the test thread).
  // The worker dies while running its `plan`-th plan (1-based): that Receive fails.
  void FailAtPlan(int64_t plan) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_at_plan_ = plan;
  }
  // The worker dies on every plan that starts a sequence with this seed (a request that makes
  // its worker fail whatever happens).
  void FailPlansStartingSeed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    poison_seed_ = seed;
  }
  bool IsPoisoned(const v1::StepPlan& plan) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_seed_) return false;
    for (const v1::SequenceStart& s : plan.start()) {
      if (s.params().seed() == *poison_seed_) return true;
    }
    return false;
  }
  void SetReconnectable(bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    reconnectable_ = ok;
  }
  // Gated: the result of plan k is returned only after AllowPlans(k).
  void SetGated(bool gated) {
    std::lock_guard<std::mutex> lock(mu_);
    gated_ = gated;
    cv_.notify_all();
  }
  void AllowPlans(int64_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    allowed_ = std::max(allowed_, k);
    cv_.notify_all();
  }
  // Waits until `k` plans were received; false on timeout.
  bool WaitForPlans(int64_t k, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return plans_ >= k; });
  }

  // --- Observations.
  int64_t plans() const {
    std::lock_guard<std::mutex> lock(mu_);
    return plans_;
  }
  std::vector<PlanRecord> history() const {
    std::lock_guard<std::mutex> lock(mu_);
    return history_;
  }
  std::vector<std::string> violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  // Tokens the starts took from cached pages instead of computing them.
  int64_t cached_tokens() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_tokens_;
  }
  int64_t live_sequences() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(live_.size());
  }
  int64_t reconnects() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reconnects_;
  }

  // --- Connection side.
  bool ShouldFail(int64_t plan_number) {
    std::lock_guard<std::mutex> lock(mu_);
    return plan_number == fail_at_plan_;
  }
  void WaitGate(int64_t plan_number) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !gated_ || allowed_ >= plan_number; });
  }
  // The process died: all state gone.
  void Die() {
    std::lock_guard<std::mutex> lock(mu_);
    live_.clear();
    ForgetKv();
  }
  bool Reconnect() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reconnectable_) return false;
    live_.clear();  // a new stream starts with no live sequences
    ForgetKv();
    ++reconnects_;
    return true;
  }

 private:
  struct Seq {
    uint64_t seed = 0;
    uint64_t sample_index = 0;
    std::vector<int32_t> tokens;  // prompt + generated (the last one not fed yet once decoding)
    int32_t num_computed = 0;
    std::vector<int32_t> pages;
    // Window pages (config_.window_tables per token page) of token pages [window_first, ...).
    std::vector<int32_t> window_pages;
    int64_t window_first = 0;
    bool decoding = false;  // sampled since its start: entries feed the token sampled last
    int32_t num_prompt = 0;
    int32_t score_from = 0;  // prompt tokens [score_from, num_prompt) are scored; 0 = none
  };

  // Positions of the rows of entry `e` that score a prompt token (the worker's rule).
  static std::pair<int32_t, int32_t> ScoredRows(const Seq& seq, const v1::StepEntry& e) {
    if (seq.score_from <= 0) return {0, 0};
    return {std::max(e.start_position(), seq.score_from - 1),
            std::min(e.start_position() + e.num_tokens(), seq.num_prompt - 1)};
  }

  void Violation(const v1::StepPlan& plan, const std::string& what) {
    violations_.push_back("step " + std::to_string(plan.step_id()) + ": " + what);
  }

  // Maps `page` for `owner`; false (with a violation) when out of range, or when it must be
  // private (`shared_ok` false: it will be written) and another live sequence maps it.
  bool TakePage(const v1::StepPlan& plan, int32_t page, uint64_t owner, bool shared_ok = false) {
    if (page < 0 || page >= config_.num_pages) {
      Violation(plan, "page " + std::to_string(page) + " out of range");
      return false;
    }
    if (!shared_ok && page_maps_[page] != 0) {
      Violation(plan, "page " + std::to_string(page) + " of seq " + std::to_string(owner) +
                          " is mapped by " + std::to_string(page_maps_[page]) +
                          " other live sequence(s)");
      return false;
    }
    ++page_maps_[page];
    return true;
  }

  // The first token page a query at `position` reads through the window tables.
  int64_t FirstWindowPage(int64_t position) const {
    if (config_.window_tables == 0) return 0;
    return std::max<int64_t>(0, position - config_.window_tokens + 1) / config_.page_size;
  }
  void DropBehindWindow(Seq* seq) {
    const int64_t first = FirstWindowPage(seq->num_computed);
    if (first <= seq->window_first) return;
    const int64_t drop = (first - seq->window_first) * config_.window_tables;
    for (int64_t i = 0; i < drop && i < static_cast<int64_t>(seq->window_pages.size()); ++i) {
      --page_maps_[seq->window_pages[i]];
    }
    seq->window_pages.erase(
        seq->window_pages.begin(),
        seq->window_pages.begin() + std::min<int64_t>(drop, seq->window_pages.size()));
    seq->window_first = first;
  }
  // The window slot of position `pos` in window table `u` (-1 when the page has no window page).
  int64_t WindowSlot(const Seq& seq, int64_t pos, int32_t u) const {
    const int64_t k = (pos / config_.page_size - seq.window_first) * config_.window_tables + u;
    if (pos / config_.page_size < seq.window_first ||
        k >= static_cast<int64_t>(seq.window_pages.size())) {
      return -1;
    }
    return int64_t{seq.window_pages[k]} * config_.page_size + pos % config_.page_size;
  }
  // A query at `position` reads the window tables' positions [position - W + 1, position): they
  // must hold the sequence's own tokens.
  void CheckWindowReads(const v1::StepPlan& plan, uint64_t id, const Seq& seq, int64_t position) {
    for (int64_t pos = std::max<int64_t>(0, position - config_.window_tokens + 1);
         config_.window_tables > 0 && pos < position; ++pos) {
      for (int32_t u = 0; u < config_.window_tables; ++u) {
        const int64_t slot = WindowSlot(seq, pos, u);
        const int32_t held = slot < 0 ? -2 : slots_[slot];
        if (held != seq.tokens[pos]) {
          Violation(plan, "seq " + std::to_string(id) + " reads window position " +
                              std::to_string(pos) + " (table " + std::to_string(u) +
                              "), which holds " + std::to_string(held) + ", not " +
                              std::to_string(seq.tokens[pos]));
          return;
        }
      }
    }
  }

  void ForgetKv() {
    std::fill(page_maps_.begin(), page_maps_.end(), 0);
    std::fill(slots_.begin(), slots_.end(), -1);
  }

  void CheckStart(const v1::StepPlan& plan, const v1::SequenceStart& s, PlanRecord* record) {
    if (s.live_id() == 0 || live_.count(s.live_id())) {
      Violation(plan, "start of live or zero seq " + std::to_string(s.live_id()));
      return;
    }
    if (s.tokens_size() == 0 || s.num_prompt_tokens() < 1 ||
        s.num_prompt_tokens() > s.tokens_size() || s.num_cached_tokens() < 0 ||
        s.num_cached_tokens() >= s.tokens_size() ||
        static_cast<int64_t>(s.pages_size()) * config_.page_size < s.num_cached_tokens()) {
      Violation(plan, "bad start of seq " + std::to_string(s.live_id()));
      return;
    }
    if (s.score_from() != 0 &&
        (s.score_from() <= s.num_cached_tokens() || s.score_from() >= s.num_prompt_tokens())) {
      Violation(plan, "bad score_from " + std::to_string(s.score_from()) + " of seq " +
                          std::to_string(s.live_id()));
      return;
    }
    Seq seq;
    seq.seed = s.params().seed();
    seq.sample_index = s.sample_index();
    seq.num_prompt = s.num_prompt_tokens();
    seq.score_from = s.score_from();
    seq.tokens.assign(s.tokens().begin(), s.tokens().end());
    const int32_t cached = s.num_cached_tokens();
    seq.num_computed = cached;
    // The cached positions must hold this sequence's tokens (written by whoever computed them).
    for (int32_t pos = 0; pos < cached; ++pos) {
      const int32_t page = s.pages(pos / config_.page_size);
      if (page < 0 || page >= config_.num_pages) break;  // TakePage reports it
      const int32_t held = slots_[page * config_.page_size + pos % config_.page_size];
      if (held != seq.tokens[pos]) {
        Violation(plan, "seq " + std::to_string(s.live_id()) + " reuses position " +
                            std::to_string(pos) + " of page " + std::to_string(page) +
                            ", which holds token " + std::to_string(held) + ", not " +
                            std::to_string(seq.tokens[pos]));
        break;
      }
    }
    cached_tokens_ += cached;
    for (int j = 0; j < s.pages_size(); ++j) {
      // Pages wholly inside the cached prefix are read only and may be shared.
      const bool read_only = (j + 1) * config_.page_size <= cached;
      if (TakePage(plan, s.pages(j), s.live_id(), read_only)) seq.pages.push_back(s.pages(j));
    }
    seq.window_first = s.window_first_page();
    if (s.window_first_page() < 0 || s.window_first_page() > FirstWindowPage(cached) ||
        s.window_pages_size() != config_.window_tables * (s.pages_size() - s.window_first_page())) {
      Violation(plan, "bad window pages of seq " + std::to_string(s.live_id()));
    }
    for (int j = 0; j < s.window_pages_size(); ++j) {
      const int64_t page = s.window_first_page() + j / std::max(1, config_.window_tables);
      const bool read_only = (page + 1) * config_.page_size <= cached;
      if (TakePage(plan, s.window_pages(j), s.live_id(), read_only)) {
        seq.window_pages.push_back(s.window_pages(j));
      }
    }
    CheckWindowReads(plan, s.live_id(), seq, cached);
    live_.emplace(s.live_id(), std::move(seq));
    record->started.push_back(s.live_id());
    record->started_score_from.push_back(s.score_from());
  }

  void CheckEntries(const v1::StepPlan& plan, PlanRecord* record) {
    if (plan.entries_size() > config_.max_batch) Violation(plan, "more entries than max_batch");
    int64_t logits_rows = 0;
    std::set<uint64_t> seen;
    for (const v1::StepEntry& e : plan.entries()) {
      auto it = live_.find(e.live_id());
      if (it == live_.end() || !seen.insert(e.live_id()).second) {
        Violation(plan, "entry of unknown or repeated seq " + std::to_string(e.live_id()));
        continue;
      }
      Seq& seq = it->second;
      const int32_t known = static_cast<int32_t>(seq.tokens.size());
      if (e.start_position() != seq.num_computed || e.num_tokens() < 1 ||
          e.start_position() + e.num_tokens() > known) {
        Violation(plan, "seq " + std::to_string(e.live_id()) + " feeds [" +
                            std::to_string(e.start_position()) + ", +" +
                            std::to_string(e.num_tokens()) + ") with " +
                            std::to_string(seq.num_computed) + " computed of " +
                            std::to_string(known) + " known");
      }
      if (e.sample() != (e.start_position() + e.num_tokens() == known)) {
        Violation(plan, "seq " + std::to_string(e.live_id()) + " sample flag wrong");
      }
      for (int32_t p : e.new_pages()) {
        if (TakePage(plan, p, e.live_id())) seq.pages.push_back(p);
      }
      if (e.new_window_pages_size() != config_.window_tables * e.new_pages_size()) {
        Violation(plan, "seq " + std::to_string(e.live_id()) + " has " +
                            std::to_string(e.new_window_pages_size()) + " new window pages for " +
                            std::to_string(e.new_pages_size()) + " new pages");
      }
      for (int32_t p : e.new_window_pages()) {
        if (TakePage(plan, p, e.live_id())) seq.window_pages.push_back(p);
      }
      CheckWindowReads(plan, e.live_id(), seq, e.start_position());
      if (static_cast<int64_t>(seq.pages.size()) * config_.page_size <
          e.start_position() + e.num_tokens()) {
        Violation(plan, "seq " + std::to_string(e.live_id()) + " lacks pages");
      }
      record->tokens += e.num_tokens();
      const auto [first, end] = ScoredRows(seq, e);
      const int32_t scored = std::max(0, end - first);
      logits_rows += scored + (e.sample() ? 1 : 0);
      record->scored_rows += scored;
      record->entries.push_back({e.live_id(), seq.seed, seq.sample_index, e.start_position(),
                                 e.num_tokens(), e.sample(), seq.decoding});
    }
    if (record->tokens > config_.max_batch_tokens) Violation(plan, "token budget exceeded");
    if (logits_rows > config_.max_batch) {
      Violation(plan, std::to_string(logits_rows) + " logits rows (sampling entries + scored " +
                          "rows) exceed max_batch");
    }
  }

  void RunEntries(const v1::StepPlan& plan, v1::StepResult* result) {
    for (const v1::StepEntry& e : plan.entries()) {
      Seq& seq = live_.at(e.live_id());
      for (int32_t pos = e.start_position(); pos < e.start_position() + e.num_tokens(); ++pos) {
        const int32_t page = seq.pages[pos / config_.page_size];
        if (page_maps_[page] != 1) {
          ADD_FAILURE() << "step " << plan.step_id() << ": seq " << e.live_id()
                        << " writes position " << pos << " into page " << page << ", mapped by "
                        << page_maps_[page] << " live sequences";
        }
        slots_[page * config_.page_size + pos % config_.page_size] = seq.tokens[pos];
        for (int32_t u = 0; u < config_.window_tables; ++u) {
          const int64_t slot = WindowSlot(seq, pos, u);
          if (slot < 0 || page_maps_[slot / config_.page_size] != 1) {
            ADD_FAILURE() << "step " << plan.step_id() << ": seq " << e.live_id()
                          << " writes position " << pos << " into window table " << u
                          << " without a window page of its own";
            continue;
          }
          slots_[slot] = seq.tokens[pos];
        }
      }
      seq.num_computed = e.start_position() + e.num_tokens();
      const auto [first, end] = ScoredRows(seq, e);
      for (int32_t row = first; row < end; ++row) {
        v1::PromptTokenScore* score = result->add_prompt_scores();
        score->set_live_id(e.live_id());
        score->set_position(row + 1);
        score->set_logprob(FakePromptLogprob(seq.sample_index, row + 1, seq.seed));
        v1::TokenLogprob* top = score->add_top();
        top->set_token_id(row + 1);
        top->set_logprob(score->logprob());
      }
      if (!e.sample()) continue;
      const int64_t position = static_cast<int64_t>(seq.tokens.size());
      const int32_t token = FakeToken(seq.sample_index, position, seq.seed, config_.vocab_size);
      seq.tokens.push_back(token);
      seq.decoding = true;
      v1::SampledToken* t = result->add_samples();
      t->set_live_id(e.live_id());
      t->set_token_id(token);
      t->set_logprob(-0.5f);
    }
    result->set_weight_version(weight_version_.load());
    result->set_draining(draining_.load());
  }

 public:
  // The version results report (7 until set), and the plans sent whose results were not read.
  void set_weight_version(int64_t v) { weight_version_.store(v); }
  // Shutting down (SIGTERM): Info and every result say `draining`.
  void set_draining(bool d) { draining_.store(d); }
  // The scheduler closed its connection (the stream ended): the worker drops what was live.
  void StreamClosed() {
    std::lock_guard<std::mutex> lock(mu_);
    live_.clear();
    ForgetKv();
    ++streams_closed_;
  }
  int64_t streams_closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_closed_;
  }
  int in_flight() const { return in_flight_.load(); }
  void AddInFlight(int d) { in_flight_.fetch_add(d); }

 private:
  std::atomic<int64_t> weight_version_{7};
  std::atomic<bool> draining_{false};
  int64_t streams_closed_ = 0;
  std::atomic<int> in_flight_{0};

  const FakeWorkerConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Seq> live_;
  std::vector<int32_t> page_maps_;  // [num_pages]: live sequences whose page table holds it
  std::vector<int32_t> slots_;      // [num_pages * page_size]: token whose K/V is there, -1 none
  int64_t cached_tokens_ = 0;       // num_cached_tokens over every start
  std::vector<PlanRecord> history_;
  std::vector<std::string> violations_;
  uint64_t last_step_id_ = 0;
  int64_t plans_ = 0;
  int64_t fail_at_plan_ = -1;
  std::optional<uint64_t> poison_seed_;
  bool reconnectable_ = true;
  int64_t reconnects_ = 0;
  bool gated_ = false;
  int64_t allowed_ = 0;
};

// The scheduler's end of a FakeWorker.
class FakeConnection : public WorkerConnection {
 public:
  explicit FakeConnection(std::shared_ptr<FakeWorker> worker)
      : worker_(std::move(worker)), address_(worker_->config().address), info_(worker_->Info()) {}
  ~FakeConnection() override { worker_->StreamClosed(); }

  const std::string& address() const override { return address_; }
  const v1::InfoResponse& info() const override { return info_; }
  StatusOr<v1::InfoResponse> RefreshInfo() override { return worker_->Info(); }

  Status Send(const v1::StepPlan& plan) override {
    if (broken_) return UnavailableError("fake stream broken");
    ++sent_;
    if (worker_->ShouldFail(sent_) || worker_->IsPoisoned(plan)) {
      worker_->Die();
      broken_ = true;
      return OkStatus();  // the write went out; the worker dies computing it
    }
    results_.push_back(worker_->Execute(plan));
    worker_->AddInFlight(1);
    return OkStatus();
  }

  Status Receive(v1::StepResult* result) override {
    if (broken_) return UnavailableError("fake worker died (connection reset)");
    worker_->WaitGate(sent_);
    if (worker_->config().step_delay.count() > 0) {
      std::this_thread::sleep_for(worker_->config().step_delay);
    }
    *result = std::move(results_.front());
    results_.pop_front();
    worker_->AddInFlight(-1);
    return OkStatus();
  }

  Status Reconnect(std::chrono::milliseconds timeout) override {
    if (!worker_->Reconnect()) {
      std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(5)));
      return UnavailableError("fake worker unreachable");
    }
    broken_ = false;
    worker_->AddInFlight(-static_cast<int>(results_.size()));
    results_.clear();
    return OkStatus();
  }

 private:
  std::shared_ptr<FakeWorker> worker_;
  std::string address_;
  v1::InfoResponse info_;
  bool broken_ = false;
  int64_t sent_ = 0;
  std::deque<v1::StepResult> results_;
};

// Polls `pred` every millisecond; false when it is still false after `timeout`.
template <typename Pred>
bool WaitUntil(Pred&& pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto give_up = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Submit that must succeed (a test failure and nullptr otherwise).
inline std::shared_ptr<RequestChannel> MustSubmit(Scheduler* s, SchedRequest r) {
  auto submitted = s->Submit(std::move(r));
  EXPECT_TRUE(submitted.ok()) << submitted.status().ToString();
  return submitted.ok() ? *submitted : nullptr;
}

}  // namespace astr::sched::testing
