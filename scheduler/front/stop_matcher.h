// Stop strings over a text that grows a piece at a time (one detokenized token after another).
//
// The matcher holds back the longest tail of the text that could still begin a stop string, so
// that text handed out is never part of a stop string. A match is the stop string that completes
// first in the text (smallest end; on a tie, the one that starts earliest), which makes the result
// independent of how the text is cut into pieces: the same text gives the same match whether it
// arrives byte by byte or all at once.
//
// Every stop string and every piece is valid UTF-8, so each cut the matcher makes (at the start of
// a possible or actual stop string, or after one) falls on a character boundary.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace astr::front {

class StopMatcher {
 public:
  // `stops`: non-empty strings.
  explicit StopMatcher(std::vector<std::string> stops);

  struct Match {
    size_t stop_index = 0;  // into the constructor's list
    std::string text;       // held text before the stop string (and the stop string if kept)
  };
  // Appends `piece`. When `may_stop` and a stop string completes in text that includes part of
  // `piece`, returns the match; the matcher is then spent. Stop strings completed while `may_stop`
  // is false (before min_tokens) are passed over for good.
  std::optional<Match> Append(std::string_view piece, bool may_stop, bool include_stop);
  // Moves out the held text that can no longer begin a stop string.
  std::string TakeSafe();
  // Moves out everything held (the sample ended without a match).
  std::string TakeAll();

 private:
  // Length of the longest suffix of held_ that is a proper prefix of stop string `i` (KMP).
  size_t PartialMatchLength(size_t i) const;

  std::vector<std::string> stops_;
  std::vector<std::vector<size_t>> failure_;  // KMP failure function per stop string
  size_t max_stop_len_ = 0;
  std::string held_;  // text not handed out yet; no stop string starts before it
};

}  // namespace astr::front
