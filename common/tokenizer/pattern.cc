#include "common/tokenizer/pattern.h"

namespace astr::tok {

Pattern Pattern::Literal(std::string text) {
  Pattern p;
  p.source_ = std::move(text);
  return p;
}

StatusOr<Pattern> Pattern::FromRegex(std::string_view regex) {
  ASTR_ASSIGN_OR_RETURN(Regex compiled, Regex::Compile(regex));
  Pattern p;
  p.source_ = std::string(regex);
  p.regex_ = std::make_shared<const Regex>(std::move(compiled));
  return p;
}

void Pattern::FindAll(std::string_view text, std::vector<Regex::Match>& out) const {
  if (regex_ != nullptr) {
    regex_->FindAll(text, out);
    return;
  }
  if (source_.empty()) return;
  for (size_t pos = text.find(source_); pos != std::string_view::npos;
       pos = text.find(source_, pos + source_.size())) {
    out.push_back({pos, pos + source_.size()});
  }
}

std::string ReplaceAll(const Pattern& pattern, std::string_view text, std::string_view content) {
  std::vector<Regex::Match> matches;
  pattern.FindAll(text, matches);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const Regex::Match& m : matches) {
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

void SplitByMatches(size_t text_size, const std::vector<Regex::Match>& matches,
                    SplitBehavior behavior, bool invert, std::vector<Span>& out) {
  // Every byte belongs to exactly one (span, is_match) segment, in order.
  struct Segment {
    Span span;
    bool is_match;
  };
  std::vector<Segment> segments;
  segments.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const Regex::Match& m : matches) {
    if (m.begin == m.end) continue;  // an empty match cuts nothing
    if (prev != m.begin) segments.push_back({{prev, m.begin}, invert});
    segments.push_back({{m.begin, m.end}, !invert});
    prev = m.end;
  }
  if (prev != text_size) segments.push_back({{prev, text_size}, invert});

  const size_t first_out = out.size();
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) out.push_back(s.span);
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) out.push_back(s.span);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && out.size() > first_out) {
          out.back().end = s.span.end;
        } else {
          out.push_back(s.span);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Walk backwards: a match joins the piece that follows it.
      std::vector<Span> reversed;
      bool previous_match = false;
      for (size_t i = segments.size(); i-- > 0;) {
        const Segment& s = segments[i];
        if (s.is_match && !previous_match && !reversed.empty()) {
          reversed.back().begin = s.span.begin;
        } else {
          reversed.push_back(s.span);
        }
        previous_match = s.is_match;
      }
      out.insert(out.end(), reversed.rbegin(), reversed.rend());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && out.size() > first_out) {
          out.back().end = s.span.end;
        } else {
          out.push_back(s.span);
        }
        previous_match = s.is_match;
      }
      break;
    }
  }
}

}  // namespace astr::tok
