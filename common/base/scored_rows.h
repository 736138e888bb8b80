// Prompt scoring's one rule (worker.proto SequenceStart.score_from): which rows of a chunk score a
// prompt token. The scheduler's planner sizes steps by it (a scored row is a logits row) and the
// worker scores by it, so the two cannot disagree about a step's logits rows.
#pragma once

#include <algorithm>
#include <cstdint>

namespace astr {

// Rows at positions [begin, end) of a sequence; empty when end <= begin.
struct ScoredRows {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
};

// Of the rows at positions [begin, end), those that score a prompt token when tokens
// [score_from, num_prompt_tokens) are scored: the row before each, [score_from - 1,
// num_prompt_tokens - 1). Row p scores the token at position p + 1. None when score_from is 0.
inline ScoredRows ScoredRowsOf(int64_t score_from, int64_t num_prompt_tokens, int64_t begin,
                               int64_t end) {
  if (score_from <= 0) return {};
  return {.begin = std::max(begin, score_from - 1), .end = std::min(end, num_prompt_tokens - 1)};
}

}  // namespace astr
