#include "scheduler/front/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace astr::front {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  failure_.reserve(stops_.size());
  for (const std::string& s : stops_) {
    max_stop_len_ = std::max(max_stop_len_, s.size());
    // failure[k]: length of the longest proper prefix of s[0, k) that is also its suffix.
    std::vector<size_t> failure(s.size() + 1, 0);
    for (size_t k = 2; k <= s.size(); ++k) {
      size_t f = failure[k - 1];
      while (f > 0 && s[f] != s[k - 1]) f = failure[f];
      failure[k] = s[f] == s[k - 1] ? f + 1 : 0;
    }
    failure_.push_back(std::move(failure));
  }
}

size_t StopMatcher::PartialMatchLength(size_t i) const {
  const std::string& s = stops_[i];
  const std::vector<size_t>& failure = failure_[i];
  // Only the last |s| - 1 bytes can hold a proper prefix of s.
  const size_t from = held_.size() > s.size() - 1 ? held_.size() - (s.size() - 1) : 0;
  size_t state = 0;  // bytes of s matched so far
  for (size_t p = from; p < held_.size(); ++p) {
    if (state == s.size()) state = failure[state];  // a whole match: keep looking for a proper one
    while (state > 0 && s[state] != held_[p]) state = failure[state];
    if (s[state] == held_[p]) ++state;
  }
  return state == s.size() ? failure[state] : state;
}

std::optional<StopMatcher::Match> StopMatcher::Append(std::string_view piece, bool may_stop,
                                                      bool include_stop) {
  const size_t old_size = held_.size();
  held_.append(piece);
  if (!may_stop || piece.empty()) return std::nullopt;
  // Earliest end first, then earliest start. A match must end inside the new piece: one that ended
  // before was already seen (and passed over before min_tokens).
  std::optional<size_t> best;
  size_t best_start = 0, best_end = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    const size_t from = old_size + 1 > s.size() ? old_size + 1 - s.size() : 0;
    const size_t start = held_.find(s, from);
    if (start == std::string::npos) continue;
    const size_t end = start + s.size();
    if (!best || end < best_end || (end == best_end && start < best_start)) {
      best = i;
      best_start = start;
      best_end = end;
    }
  }
  if (!best) return std::nullopt;
  Match m;
  m.stop_index = *best;
  m.text = held_.substr(0, include_stop ? best_end : best_start);
  held_.clear();
  return m;
}

std::string StopMatcher::TakeSafe() {
  size_t hold = 0;
  for (size_t i = 0; i < stops_.size() && hold < held_.size(); ++i) {
    hold = std::max(hold, PartialMatchLength(i));
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::TakeAll() { return std::exchange(held_, std::string()); }

}  // namespace astr::front
