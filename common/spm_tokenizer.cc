#include "common/spm_tokenizer.h"

#include <cstdio>
#include <queue>
#include <utility>

namespace astr {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// Length of the UTF-8 sequence that starts with `lead`, as llama.cpp computes it: a stray
// continuation byte counts as a 1-byte character (then byte fallback handles it).
size_t Utf8Len(char lead) {
  static constexpr size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(lead) >> 4];
}


// A symbol of the merge: a byte range of the escaped text, linked to its live neighbours.
struct Symbol {
  int prev;
  int next;
  size_t begin;
  size_t len;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t len;  // byte length at push time: a mismatch later means the bigram is stale
};

// Highest score first; among equal scores the leftmost pair first.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

StatusOr<SpmTokenizer> SpmTokenizer::Create(const Vocab& vocab) {
  if (vocab.model != "llama") {
    return InvalidArgumentError("SpmTokenizer needs tokenizer.ggml.model \"llama\", got \"" +
                                vocab.model + "\"");
  }
  const size_t n = vocab.tokens.size();
  if (n == 0) return InvalidArgumentError("SpmTokenizer: the vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX))
    return InvalidArgumentError("SpmTokenizer: too many tokens");
  if (vocab.scores.size() != n) {
    return InvalidArgumentError("SpmTokenizer: " + std::to_string(vocab.scores.size()) +
                                " scores for " + std::to_string(n) + " tokens");
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return InvalidArgumentError("SpmTokenizer: " + std::to_string(vocab.types.size()) +
                                " token types for " + std::to_string(n) + " tokens");
  }
  const std::pair<const char*, int64_t> specials[] = {
      {"bos_id", vocab.bos_id}, {"eos_id", vocab.eos_id}, {"unk_id", vocab.unk_id}};
  for (const auto& [name, id] : specials) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return InvalidArgumentError(std::string("SpmTokenizer: ") + name + " " + std::to_string(id) +
                                  " is outside the vocabulary");
    }
  }
  if (vocab.add_bos && vocab.bos_id < 0) {
    return InvalidArgumentError("SpmTokenizer: add_bos is set but the vocabulary has no BOS");
  }

  SpmTokenizer tok;
  tok.pieces_ = vocab.tokens;
  tok.scores_ = vocab.scores;
  tok.types_ = vocab.types.empty() ? std::vector<TokenType>(n, TokenType::kNormal) : vocab.types;
  tok.bos_id_ = vocab.bos_id;
  tok.eos_id_ = vocab.eos_id;
  tok.unk_id_ = vocab.unk_id;
  tok.add_bos_ = vocab.add_bos;
  tok.add_space_prefix_ = vocab.add_space_prefix;
  tok.piece_to_id_.reserve(n);
  // A duplicated piece maps to its last id, as in llama.cpp.
  for (size_t i = 0; i < n; ++i) tok.piece_to_id_[tok.pieces_[i]] = static_cast<int32_t>(i);

  tok.byte_to_id_.fill(static_cast<int32_t>(vocab.unk_id));
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = tok.Lookup(hex);
    const char raw = static_cast<char>(b);
    if (id < 0) id = tok.Lookup(std::string_view(&raw, 1));  // llama.cpp's second choice
    if (id >= 0) tok.byte_to_id_[b] = id;
  }
  return tok;
}

int32_t SpmTokenizer::Lookup(std::string_view piece) const {
  const auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id_ >= 0) out.push_back(static_cast<int32_t>(bos_id_));
  if (text.empty()) return out;

  std::string escaped;
  escaped.reserve(text.size() * 3 + 3);
  if (add_space_prefix_) escaped += kSpaceMarker;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpaceMarker;
    } else {
      escaped += c;
    }
  }

  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < escaped.size();) {
    const size_t len = std::min(Utf8Len(escaped[offset]), escaped.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + len == escaped.size() ? -1 : index + 1, offset, len});
    offset += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view joined(escaped.data() + symbols[left].begin,
                                  symbols[left].len + symbols[right].len);
    const int32_t id = Lookup(joined);
    if (id < 0) return;
    queue.push({left, right, scores_[id], joined.size()});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i - 1), static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side was merged away, or grew, since the bigram was queued.
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  // Every merged symbol is a token (merges only form tokens), so only single characters can
  // miss the vocabulary and need byte fallback.
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece(escaped.data() + s.begin, s.len);
    const int32_t id = Lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = byte_to_id_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
  return out;
}

void SpmTokenizer::AppendDecoded(int32_t id, bool skip_special, bool strip_space,
                                 std::string& out) const {
  const std::string& piece = pieces_[id];
  switch (types_[id]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      if (!skip_special) out += piece;
      return;
    case TokenType::kUnused:
      return;
    case TokenType::kUserDefined:
      out += piece;  // verbatim, like llama.cpp: user-defined pieces are not escaped
      return;
    case TokenType::kByte: {
      const int value = ParseByteToken(piece);
      if (value >= 0) {
        out += static_cast<char>(value);
      } else {
        out += piece;
      }
      return;
    }
    case TokenType::kNormal:
    case TokenType::kUndefined:
      break;
  }
  size_t pos = 0;
  if (strip_space && piece.compare(0, kSpaceMarker.size(), kSpaceMarker) == 0) {
    pos = kSpaceMarker.size();
  }
  while (pos < piece.size()) {
    if (piece.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out += ' ';
      pos += kSpaceMarker.size();
    } else {
      out += piece[pos++];
    }
  }
}

std::string SpmTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  // The space prefix Encode added belongs to the first token after an optional BOS.
  size_t strip_at = 0;
  if (!ids.empty() && ids[0] == bos_id_) strip_at = 1;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) continue;
    AppendDecoded(id, skip_special, add_space_prefix_ && i == strip_at, out);
  }
  return out;
}

std::string SpmTokenizer::TokenPiece(int32_t id) const {
  return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
}

}  // namespace astr
