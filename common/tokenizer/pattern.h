// A split pattern of the Hugging Face tokenizer pipeline: a literal string or a regex
// ({"String": ...} / {"Regex": ...} in tokenizer.json). Both find non-overlapping matches left to
// right, as the `tokenizers` library does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/regex.h"
#include "common/status.h"

namespace astr::tok {

class Pattern {
 public:
  static Pattern Literal(std::string text);
  static StatusOr<Pattern> FromRegex(std::string_view regex);

  // Appends the matches in `text` (byte offsets). An empty literal never matches.
  void FindAll(std::string_view text, std::vector<Regex::Match>& out) const;
  // A short description for error messages and tests.
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const Regex> regex_;  // null for a literal
};

// `text` with every match of `pattern` replaced by `content` (Replace normalizer and decoder).
std::string ReplaceAll(const Pattern& pattern, std::string_view text, std::string_view content);

// The `tokenizers` split behaviours (SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "Removed", "Isolated", ... ; error naming the value otherwise.
StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name);

// Cuts `text` at the matches according to `behavior` (invert swaps matches and gaps), dropping
// empty pieces, and appends the pieces as [begin, end) byte ranges.
struct Span {
  size_t begin;
  size_t end;
};
void SplitByMatches(size_t text_size, const std::vector<Regex::Match>& matches,
                    SplitBehavior behavior, bool invert, std::vector<Span>& out);

}  // namespace astr::tok
