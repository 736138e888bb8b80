#include "common/tokenizer/added_vocabulary.h"

#include "common/unicode.h"

namespace astr::tok {
namespace {

// tokenizers' "word" characters for single_word: alphanumerics and '_'.
bool IsWordChar(uint32_t cp) {
  return cp == '_' || unicode::IsLetter(cp) || unicode::IsNumber(cp) || unicode::IsMark(cp);
}

uint32_t LastCodepoint(std::string_view text, size_t end) {
  size_t start = unicode::PrevCodepointStart(text, end, 0);
  return unicode::NextCodepoint(text, start);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;
    first_byte_[static_cast<uint8_t>(content[0])] = true;
    int32_t node = 0;
    for (char c : content) {
      const uint8_t b = static_cast<uint8_t>(c);
      const auto it = trie_[node].next.find(b);
      if (it != trie_[node].next.end()) {
        node = it->second;
        continue;
      }
      const int32_t child = static_cast<int32_t>(trie_.size());
      trie_[node].next.emplace(b, child);
      trie_.emplace_back();
      node = child;
    }
    trie_[node].token = static_cast<int32_t>(t);
  }
}

std::pair<size_t, int32_t> AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = trie_[node].next.find(static_cast<uint8_t>(text[i]));
    if (it == trie_[node].next.end()) break;
    node = it->second;
    if (trie_[node].token >= 0) best = {i + 1 - pos, trie_[node].token};
  }
  return best;
}

std::vector<Segment> AddedTokenMatcher::Split(std::string_view text, bool parse_special) const {
  std::vector<Segment> out;
  size_t start_offset = 0;
  for (size_t pos = 0; pos < text.size() && !tokens_.empty();) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [len, index] = LongestAt(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;  // the match is consumed even when it is rejected below, like a regex find_iter
    if (token.special && !parse_special) continue;
    if (token.single_word) {
      const bool word_before = start > 0 && IsWordChar(LastCodepoint(text, start));
      size_t i = stop;
      const bool word_after = stop < text.size() && IsWordChar(unicode::NextCodepoint(text, i));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (start > start_offset && unicode::IsWhitespace(LastCodepoint(text, start))) {
        start = unicode::PrevCodepointStart(text, start, 0);
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!unicode::IsWhitespace(unicode::NextCodepoint(text, i))) break;
        stop = i;
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({-1, start_offset, start});
    out.push_back({token.id, start, stop});
    start_offset = stop;
  }
  if (start_offset < text.size() || out.empty()) out.push_back({-1, start_offset, text.size()});
  return out;
}

}  // namespace astr::tok
