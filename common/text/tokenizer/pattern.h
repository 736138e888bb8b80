// A split pattern of the Hugging Face tokenizer pipeline: a literal string or a regex
// ({"String": ...} / {"Regex": ...} in tokenizer.json). Both find non-overlapping matches left to
// right, as the `tokenizers` library does.
//
// Matches and split pieces are produced one at a time (PatternCursor, SplitStream): a long text
// never has all its matches or pieces in memory at once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/text/regex/regex.h"

namespace astr::tok {

class Pattern {
 public:
  static Pattern Literal(std::string text);
  static StatusOr<Pattern> FromRegex(std::string_view regex);

  // Appends the matches in `text` (byte offsets). An empty literal never matches.
  void FindAll(std::string_view text, std::vector<regex::Regex::Match>& out) const;
  // A short description for error messages and tests.
  const std::string& source() const { return source_; }
  // True for a literal: every match is source() itself.
  bool is_literal() const { return regex_ == nullptr; }

 private:
  friend class PatternCursor;
  std::string source_;
  std::shared_ptr<const regex::Regex> regex_;  // null for a literal
};

// The matches of Pattern::FindAll one at a time. `pattern` and `text` must outlive the cursor.
class PatternCursor {
 public:
  PatternCursor(const Pattern& pattern, std::string_view text);
  bool Next(regex::Regex::Match* m);

 private:
  const Pattern& pattern_;
  std::string_view text_;
  size_t pos_ = 0;                           // literal: where the next search starts
  std::optional<regex::RegexCursor> regex_;  // regex patterns
};

// `text` with every match of `pattern` replaced by `content` (Replace normalizer and decoder).
std::string ReplaceAll(const Pattern& pattern, std::string_view text, std::string_view content);

// The `tokenizers` split behaviours (SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "Removed", "Isolated", ... ; error naming the value otherwise.
StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name);

// A [begin, end) byte range of a text.
struct Span {
  size_t begin;
  size_t end;
};

// Cuts a text at its matches according to a behaviour (invert swaps matches and gaps), dropping
// empty pieces, as `tokenizers`' split does. Feed the matches in order with Add, then call Finish;
// each piece is handed to `emit` (a callable taking a Span and returning false to stop) as soon as
// it is complete, so at most one piece is held back. Add / Finish return false once emit has.
class SplitStream {
 public:
  SplitStream(size_t text_size, SplitBehavior behavior, bool invert)
      : text_size_(text_size), behavior_(behavior), invert_(invert) {}

  template <typename Emit>
  bool Add(const regex::Regex::Match& m, Emit&& emit) {
    if (m.begin == m.end) return true;  // an empty match cuts nothing
    if (prev_ != m.begin && !Segment({prev_, m.begin}, invert_, emit)) return false;
    prev_ = m.end;
    return Segment({m.begin, m.end}, !invert_, emit);
  }

  template <typename Emit>
  bool Finish(Emit&& emit) {
    if (prev_ != text_size_ && !Segment({prev_, text_size_}, invert_, emit)) return false;
    prev_ = text_size_;
    if (!has_pending_) return true;
    has_pending_ = false;
    return emit(pending_);
  }

 private:
  // One (span, is_match) segment; every byte of the text is in exactly one, in order.
  template <typename Emit>
  bool Segment(Span s, bool is_match, Emit& emit) {
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        return emit(s);
      case SplitBehavior::kRemoved:
        return is_match || emit(s);
      case SplitBehavior::kMergedWithPrevious:
        // A match joins the piece before it, unless that piece ended with a match.
        return Hold(s, is_match && !previous_match_, is_match, emit);
      case SplitBehavior::kContiguous:
        // Runs of matches (or of gaps, inverted) become one piece.
        return Hold(s, is_match == previous_match_, is_match, emit);
      case SplitBehavior::kMergedWithNext:
        // A match joins the gap right after it; a match followed by a match (or by nothing)
        // stands alone.
        if (is_match) {
          const bool ok = !has_pending_ || emit(pending_);
          pending_ = s;
          has_pending_ = true;
          return ok;
        }
        if (has_pending_) {
          has_pending_ = false;
          return emit(Span{pending_.begin, s.end});
        }
        return emit(s);
    }
    return true;
  }

  // Extends the held piece by `s` when `join` (and there is one), else emits it and holds `s`.
  template <typename Emit>
  bool Hold(Span s, bool join, bool is_match, Emit& emit) {
    previous_match_ = is_match;
    if (join && has_pending_) {
      pending_.end = s.end;
      return true;
    }
    const bool ok = !has_pending_ || emit(pending_);
    pending_ = s;
    has_pending_ = true;
    return ok;
  }

  size_t text_size_;
  SplitBehavior behavior_;
  bool invert_;
  size_t prev_ = 0;  // end of the last segment
  bool previous_match_ = false;
  bool has_pending_ = false;
  Span pending_{0, 0};
};

}  // namespace astr::tok
