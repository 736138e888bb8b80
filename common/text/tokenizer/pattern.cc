#include "common/text/tokenizer/pattern.h"

namespace astr::tok {

Pattern Pattern::Literal(std::string text) {
  Pattern p;
  p.source_ = std::move(text);
  return p;
}

StatusOr<Pattern> Pattern::FromRegex(std::string_view regex) {
  ASTR_ASSIGN_OR_RETURN(regex::Regex compiled, regex::Regex::Compile(regex));
  Pattern p;
  p.source_ = std::string(regex);
  p.regex_ = std::make_shared<const regex::Regex>(std::move(compiled));
  return p;
}

void Pattern::FindAll(std::string_view text, std::vector<regex::Regex::Match>& out) const {
  PatternCursor cursor(*this, text);
  for (regex::Regex::Match m; cursor.Next(&m);) out.push_back(m);
}

PatternCursor::PatternCursor(const Pattern& pattern, std::string_view text)
    : pattern_(pattern), text_(text) {
  if (pattern.regex_ != nullptr) regex_.emplace(*pattern.regex_, text);
}

bool PatternCursor::Next(regex::Regex::Match* m) {
  if (regex_.has_value()) return regex_->Next(m);
  const std::string& literal = pattern_.source_;
  if (literal.empty() || pos_ > text_.size()) return false;
  const size_t at = text_.find(literal, pos_);
  if (at == std::string_view::npos) {
    pos_ = text_.size() + 1;
    return false;
  }
  *m = {at, at + literal.size()};
  pos_ = m->end;
  return true;
}

std::string ReplaceAll(const Pattern& pattern, std::string_view text, std::string_view content) {
  std::string out;
  size_t size = text.size();
  if (pattern.is_literal() && !pattern.source().empty()) {
    // Sized exactly (Replace " " -> "▁" makes a long text longer): no reallocation, so the
    // output and the input are the only copies alive.
    const std::string& literal = pattern.source();
    for (size_t at = text.find(literal); at != std::string_view::npos;
         at = text.find(literal, at + literal.size())) {
      size += content.size() - literal.size();
    }
  }
  out.reserve(size);
  size_t prev = 0;
  PatternCursor cursor(pattern, text);
  for (regex::Regex::Match m; cursor.Next(&m);) {
    out.append(text, prev, m.begin - prev);
    out += content;
    prev = m.end;
  }
  out.append(text, prev, std::string_view::npos);
  return out;
}

StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgumentError("unknown split behavior \"" + std::string(name) + "\"");
}

}  // namespace astr::tok
