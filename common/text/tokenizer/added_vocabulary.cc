#include "common/text/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstdint>

#include "common/text/unicode/unicode.h"

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

bool AddedTokenMatcher::Cursor::Next(Segment* out) {
  if (have_token_) {
    have_token_ = false;
    *out = token_;
    return true;
  }
  if (done_) return false;
  const std::string_view text = text_;
  while (pos_ < text.size() && !m_.tokens_.empty()) {
    if (!m_.first_byte_[static_cast<uint8_t>(text[pos_])]) {
      ++pos_;
      continue;
    }
    const auto [len, index] = m_.LongestAt(text, pos_);
    if (index < 0) {
      ++pos_;
      continue;
    }
    const AddedToken& token = m_.tokens_[index];
    size_t start = pos_;
    size_t stop = pos_ + len;
    pos_ = stop;  // the match is consumed even when it is rejected below, like a regex find_iter
    if (token.special && !parse_special_) continue;
    if (token.single_word) {
      const bool word_before = start > 0 && IsWordChar(LastCodepoint(text, start));
      size_t i = stop;
      const bool word_after = stop < text.size() && IsWordChar(unicode::NextCodepoint(text, i));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (start > start_offset_ && unicode::IsWhitespace(LastCodepoint(text, start))) {
        start = unicode::PrevCodepointStart(text, start, 0);
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!unicode::IsWhitespace(unicode::NextCodepoint(text, i))) break;
        stop = i;
      }
      pos_ = stop;
    }
    const Segment before{-1, start_offset_, start};
    token_ = {token.id, start, stop};
    start_offset_ = stop;
    emitted_ = true;
    if (before.begin < before.end) {
      have_token_ = true;
      *out = before;
    } else {
      *out = token_;
    }
    return true;
  }
  done_ = true;
  if (start_offset_ < text.size() || !emitted_) {
    *out = {-1, start_offset_, text.size()};
    return true;
  }
  return false;
}

size_t AddedTokenMatcher::MaxMatchBytes(bool parse_special) const {
  size_t most = 0;
  for (const AddedToken& t : tokens_) {
    if (t.special && !parse_special) continue;
    if (t.lstrip || t.rstrip) return SIZE_MAX;
    most = std::max(most, t.content.size());
  }
  return most;
}

}  // namespace astr::tok
