// WorkerExecutor::Validate: every check a plan must pass before any of it is applied, so that a
// refused plan leaves the worker exactly as it was. Each error names the field path and index.
//
// The plan is checked against the state it would meet: releases first (an id released here may
// start again in the same plan), then starts, then entries, which see a started sequence as its
// SequenceStart describes it.
#include <algorithm>
#include <string>
#include <utility>

#include "common/base/page_list.h"
#include "worker/service/executor.h"

namespace astr {
namespace {

std::string At(const std::string& field, int index) {
  return field + "[" + std::to_string(index) + "]";
}

std::string SeqName(uint64_t id) { return "sequence " + std::to_string(id); }

}  // namespace

Status WorkerExecutor::ValidatePages(const google::protobuf::RepeatedField<int32_t>& pages,
                                     const char* parent, int index, const char* field) const {
  for (int j = 0; j < pages.size(); ++j) {
    const int32_t page = pages[j];
    if (page < 0 || page >= limits_.num_pages) {
      return InvalidArgumentError(At(parent, index) + "." + field + "[" + std::to_string(j) +
                                  "]: page " + std::to_string(page) + " out of range [0, " +
                                  std::to_string(limits_.num_pages) + ")");
    }
  }
  return OkStatus();
}

Status WorkerExecutor::ValidateStart(const v1::SequenceStart& start, int index) {
  const std::string where = At("start", index);
  const int64_t n = start.tokens_size();
  if (n == 0) return InvalidArgumentError(where + ".tokens: must hold at least one token");
  if (n > max_context_tokens_) {
    return InvalidArgumentError(where + ".tokens: " + std::to_string(n) +
                                " tokens exceed the context of " +
                                std::to_string(max_context_tokens_));
  }
  for (int j = 0; j < n; ++j) {
    const int32_t id = start.tokens(j);
    if (id < 0 || id >= vocab_size_) {
      return InvalidArgumentError(where + ".tokens[" + std::to_string(j) + "]: token id " +
                                  std::to_string(id) + " outside the vocabulary of " +
                                  std::to_string(vocab_size_));
    }
  }
  if (start.num_prompt_tokens() < 1 || start.num_prompt_tokens() > n) {
    return InvalidArgumentError(where +
                                ".num_prompt_tokens: " + std::to_string(start.num_prompt_tokens()) +
                                " out of range [1, " + std::to_string(n) + "]");
  }
  // At least one token must stay uncomputed: the last one is fed to sample the next.
  if (start.num_cached_tokens() < 0 || start.num_cached_tokens() >= n) {
    return InvalidArgumentError(where +
                                ".num_cached_tokens: " + std::to_string(start.num_cached_tokens()) +
                                " out of range [0, " + std::to_string(n) + ")");
  }
  // Every scored token's row (the one before it) is computed here, after the cached prefix.
  const int64_t score_from = start.score_from();
  if (score_from != 0 &&
      (score_from <= start.num_cached_tokens() || score_from >= start.num_prompt_tokens())) {
    return InvalidArgumentError(where + ".score_from: " + std::to_string(score_from) +
                                " out of range [" + std::to_string(start.num_cached_tokens() + 1) +
                                ", " + std::to_string(start.num_prompt_tokens()) +
                                ") (num_cached_tokens + 1 .. " +
                                "num_prompt_tokens - 1), or 0 for none");
  }
  ASTR_RETURN_IF_ERROR(ValidatePages(start.pages(), "start", index, "pages"));
  const int64_t held = static_cast<int64_t>(start.pages_size()) * limits_.page_size;
  if (held < start.num_cached_tokens()) {
    return InvalidArgumentError(where + ".pages: " + std::to_string(start.pages_size()) +
                                " pages hold " + std::to_string(held) + " tokens, fewer than the " +
                                std::to_string(start.num_cached_tokens()) + " cached");
  }
  ASTR_RETURN_IF_ERROR(ValidatePages(start.window_pages(), "start", index, "window_pages"));
  const int64_t tables = limits_.kv_window_tables;
  const int64_t first = start.window_first_page();
  // The first query (at num_cached_tokens) reads the window from this page on.
  const int64_t reads_from =
      tables == 0
          ? 0
          : FirstWindowPage(start.num_cached_tokens(), limits_.kv_window_tokens, limits_.page_size);
  if (first < 0 || first > reads_from || first > start.pages_size()) {
    return InvalidArgumentError(
        where + ".window_first_page: " + std::to_string(first) + " out of range [0, " +
        std::to_string(std::min<int64_t>(reads_from, start.pages_size())) +
        "] (the first query's window starts on page " + std::to_string(reads_from) + ")");
  }
  if (start.window_pages_size() != tables * (start.pages_size() - first)) {
    return InvalidArgumentError(
        where + ".window_pages: " + std::to_string(start.window_pages_size()) +
        " page ids, expected " + std::to_string(tables * (start.pages_size() - first)) + " (" +
        std::to_string(tables) + " window tables per page from window_first_page on)");
  }
  auto params = SamplingParamsFromProto(start.params(), vocab_size_);
  if (!params.ok()) return params.status().WithContext(where + ".params");
  return OkStatus();
}

// Runs for every entry of every step: messages are built only on the error paths.
Status WorkerExecutor::ValidateEntry(const v1::StepEntry& entry, int index, const SeqView& seq) {
  auto bad = [&](const char* field, const std::string& what) {
    return InvalidArgumentError(At("entries", index) + "." + field + ": " + what);
  };
  auto name = [&] { return SeqName(entry.live_id()); };
  const int64_t begin = entry.start_position();
  const int64_t end = begin + entry.num_tokens();
  auto span = [&] {
    return "positions [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
  };
  if (begin != seq.num_computed) {
    return bad("start_position", std::to_string(begin) + ", but " + name() + " has " +
                                     std::to_string(seq.num_computed) + " tokens computed");
  }
  if (entry.num_tokens() < 1) {
    return bad("num_tokens", "must be >= 1, got " + std::to_string(entry.num_tokens()));
  }
  if (end > seq.known_tokens) {
    return bad("num_tokens", span() + " go past the " + std::to_string(seq.known_tokens) +
                                 " tokens known for " + name());
  }
  if (end > max_context_tokens_) {
    return bad("num_tokens", span() + " go past the context of " +
                                 std::to_string(max_context_tokens_) + " tokens");
  }
  ASTR_RETURN_IF_ERROR(ValidatePages(entry.new_pages(), "entries", index, "new_pages"));
  ASTR_RETURN_IF_ERROR(
      ValidatePages(entry.new_window_pages(), "entries", index, "new_window_pages"));
  if (entry.new_window_pages_size() != limits_.kv_window_tables * entry.new_pages_size()) {
    return bad("new_window_pages",
               std::to_string(entry.new_window_pages_size()) + " page ids, expected " +
                   std::to_string(limits_.kv_window_tables * entry.new_pages_size()) + " (" +
                   std::to_string(limits_.kv_window_tables) + " per new page)");
  }
  const int64_t pages = seq.num_pages + entry.new_pages_size();
  if (pages * limits_.page_size < end) {
    return bad("new_pages", name() + " holds " + std::to_string(pages) + " pages (" +
                                std::to_string(pages * limits_.page_size) +
                                " tokens), too few for " + span());
  }
  if (!entry.allowed_tokens().empty()) {
    if (!entry.sample()) return bad("allowed_tokens", "is set on an entry that does not sample");
    if (entry.mask_follows()) return bad("mask_follows", "is set with allowed_tokens");
    if (const std::string why = MaskProblem(entry.allowed_tokens()); !why.empty()) {
      return bad("allowed_tokens", why);
    }
  }
  if (entry.mask_follows() && !entry.sample()) {
    return bad("mask_follows", "is set on an entry that does not sample");
  }
  // The sampled token is appended to the context, so it must come after the last known token.
  if (entry.sample() && end != seq.known_tokens) {
    return bad("sample", "the entry ends at position " + std::to_string(end) + " but " + name() +
                             " has " + std::to_string(seq.known_tokens) +
                             " known tokens; only the last one can be sampled after");
  }
  return OkStatus();
}

std::string WorkerExecutor::MaskProblem(const std::string& mask) const {
  const int64_t vocab = vocab_size_;
  const int64_t want = (vocab + 31) / 32 * 4;
  if (static_cast<int64_t>(mask.size()) != want) {
    return "has " + std::to_string(mask.size()) + " bytes; a mask over " + std::to_string(vocab) +
           " tokens has " + std::to_string(want);
  }
  // Bits past the vocabulary do not count: a mask must allow a real token.
  for (int64_t t = 0; t < vocab; t += 8) {
    const auto byte = static_cast<uint8_t>(mask[static_cast<size_t>(t / 8)]);
    const int64_t bits = std::min<int64_t>(8, vocab - t);
    if ((byte & ((1u << bits) - 1)) != 0) return "";
  }
  return "allows no token";
}

Status WorkerExecutor::Validate(const v1::StepPlan& plan) {
  if (plan.masks_for_step() != 0) {
    return InvalidArgumentError("masks_for_step: a mask message (for step " +
                                std::to_string(plan.masks_for_step()) + ") is not a step");
  }
  plan_released_.clear();
  plan_started_.clear();
  ++plan_serial_;
  start_listed_.assign(plan.start_size(), 0);
  for (int i = 0; i < plan.release_size(); ++i) {
    const uint64_t id = plan.release(i);
    if (!plan_released_.insert(id).second) {
      return InvalidArgumentError(At("release", i) + ": " + SeqName(id) + " is released twice");
    }
    if (!live_.contains(id)) {
      return InvalidArgumentError(At("release", i) + ": " + SeqName(id) + " is not live");
    }
  }
  for (int i = 0; i < plan.start_size(); ++i) {
    const uint64_t id = plan.start(i).live_id();
    if (live_.contains(id) && !plan_released_.contains(id)) {
      return InvalidArgumentError(At("start", i) + ".live_id: " + SeqName(id) + " is already live");
    }
    if (!plan_started_.emplace(id, i).second) {
      return InvalidArgumentError(At("start", i) + ".live_id: " + SeqName(id) +
                                  " starts twice in this plan");
    }
    ASTR_RETURN_IF_ERROR(ValidateStart(plan.start(i), i));
  }
  // Every entry may sample, so the sequence cap is the backend's sample-row capacity.
  if (plan.entries_size() > limits_.max_sample_rows) {
    return InvalidArgumentError("entries: " + std::to_string(plan.entries_size()) +
                                " entries exceed max_batch " +
                                std::to_string(limits_.max_sample_rows));
  }
  int64_t total_tokens = 0;
  int64_t sampling_entries = 0;
  int64_t scored_rows = 0;
  for (int e = 0; e < plan.entries_size(); ++e) {
    const v1::StepEntry& entry = plan.entries(e);
    const uint64_t id = entry.live_id();
    // Marks instead of a per-step set: a repeated id is found without allocating.
    bool listed_before = false;
    SeqView view;
    if (auto started = plan_started_.find(id); started != plan_started_.end()) {
      const v1::SequenceStart& s = plan.start(started->second);
      listed_before = std::exchange(start_listed_[started->second], 1) != 0;
      view = {.known_tokens = s.tokens_size(),
              .num_computed = s.num_cached_tokens(),
              .num_pages = s.pages_size(),
              .num_prompt_tokens = s.num_prompt_tokens(),
              .score_from = s.score_from()};
    } else if (auto live = live_.find(id); live != live_.end() && !plan_released_.contains(id)) {
      Sequence& s = live->second;
      listed_before = std::exchange(s.listed_in_plan, plan_serial_) == plan_serial_;
      view = {.known_tokens = static_cast<int64_t>(s.context.size()),
              .num_computed = s.num_computed,
              .num_pages = static_cast<int64_t>(s.pages.size()),
              .num_prompt_tokens = s.num_prompt_tokens,
              .score_from = s.score_from};
    } else {
      return InvalidArgumentError(At("entries", e) + ".live_id: " + SeqName(id) + " is not live");
    }
    if (listed_before) {
      return InvalidArgumentError(At("entries", e) + ".live_id: " + SeqName(id) +
                                  " appears twice in entries");
    }
    ASTR_RETURN_IF_ERROR(ValidateEntry(entry, e, view));
    total_tokens += entry.num_tokens();
    sampling_entries += entry.sample() ? 1 : 0;
    scored_rows += ScoredRowsOf(view.score_from, view.num_prompt_tokens, entry.start_position(),
                                entry.start_position() + entry.num_tokens())
                       .size();
  }
  if (total_tokens > limits_.max_batch_tokens) {
    return InvalidArgumentError("entries: " + std::to_string(total_tokens) +
                                " tokens exceed max_batch_tokens " +
                                std::to_string(limits_.max_batch_tokens));
  }
  // Sample rows and scored prompt rows share the backend's logits rows.
  if (sampling_entries + scored_rows > limits_.max_sample_rows) {
    return InvalidArgumentError(
        "entries: " + std::to_string(sampling_entries) + " sampling entries and " +
        std::to_string(scored_rows) + " scored prompt rows (start.score_from) need " +
        std::to_string(sampling_entries + scored_rows) + " logits rows, more than max_batch " +
        std::to_string(limits_.max_sample_rows));
  }
  return OkStatus();
}

}  // namespace astr
