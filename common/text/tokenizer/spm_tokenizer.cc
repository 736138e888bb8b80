#include "common/text/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace astr::tok {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// Length of the UTF-8 sequence that starts with `lead`, as llama.cpp computes it: a stray
// continuation byte counts as a 1-byte character (then byte fallback handles it).
size_t Utf8Len(char lead) {
  static constexpr size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(lead) >> 4];
}

constexpr size_t kBytePairs = 256 * 256;
constexpr size_t kMaxChunkBytes = size_t{1} << 30;

size_t BytePair(char a, char b) {
  return (size_t{static_cast<uint8_t>(a)} << 8) | static_cast<uint8_t>(b);
}

// A symbol of the merge: a byte range of the chunk, linked to its live neighbours. 32-bit fields
// (16 bytes, not 32): a chunk is at most kMaxChunkBytes.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;
  uint32_t len;  // 0 once merged into its left neighbour
};

struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  uint32_t len;  // byte length at push time: a mismatch later means the bigram is stale
};

// Highest score first; among equal scores the leftmost pair first.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

// Merge state, reused across the chunks of one Encode.
struct SpmTokenizer::ChunkBuffers {
  std::vector<Symbol> symbols;
  std::vector<Bigram> queue;
};

StatusOr<SpmTokenizer> SpmTokenizer::Create(const model::Vocab& vocab) {
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
  tok.types_ = vocab.types.empty() ? std::vector<model::TokenType>(n, model::TokenType::kNormal)
                                   : vocab.types;
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
  tok.every_byte_has_id_ = std::all_of(tok.byte_to_id_.begin(), tok.byte_to_id_.end(),
                                       [](int32_t id) { return id >= 0; });
  tok.pair_in_piece_.assign(kBytePairs / 64, 0);
  for (const std::string& piece : tok.pieces_) {
    tok.max_piece_bytes_ = std::max(tok.max_piece_bytes_, piece.size());
    for (size_t i = 1; i < piece.size(); ++i) {
      const size_t pair = BytePair(piece[i - 1], piece[i]);
      tok.pair_in_piece_[pair / 64] |= uint64_t{1} << (pair % 64);
    }
  }
  return tok;
}

bool SpmTokenizer::PairInPiece(char a, char b) const {
  const size_t pair = BytePair(a, b);
  return (pair_in_piece_[pair / 64] >> (pair % 64)) & 1;
}

int32_t SpmTokenizer::Lookup(std::string_view piece) const {
  const auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id_ >= 0) out.push_back(static_cast<int32_t>(bos_id_));
  AppendIds(text, out);
  return out;
}

void SpmTokenizer::AppendIds(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;

  std::string escaped;
  std::string_view view = text;  // the escaped text; the pipeline model passes it escaped already
  if (add_space_prefix_ || text.find(' ') != std::string_view::npos) {
    const size_t spaces = static_cast<size_t>(std::count(text.begin(), text.end(), ' '));
    escaped.reserve(text.size() + 2 * spaces + (add_space_prefix_ ? kSpaceMarker.size() : 0));
    if (add_space_prefix_) escaped += kSpaceMarker;
    for (char c : text) {
      if (c == ' ') {
        escaped += kSpaceMarker;
      } else {
        escaped += c;
      }
    }
    view = escaped;
  }

  // Chunks end at a symbol boundary whose two bytes are adjacent in no piece: no merge can span
  // it (every merged symbol is a piece), so the merges on each side never interact and encoding
  // the chunks one by one gives the same ids as encoding the whole text, with the merge state of
  // one chunk in memory instead of 32+ bytes per character of the text.
  ChunkBuffers buffers;
  size_t begin = 0;
  for (size_t offset = 0; offset < view.size();) {
    const size_t len = std::min(Utf8Len(view[offset]), view.size() - offset);
    const size_t end = offset + len;
    // Past 1 GiB without a cut point the chunk is cut anyway (the symbols' 32-bit fields); no
    // real text has such a run.
    if (end == view.size() || !PairInPiece(view[end - 1], view[end]) ||
        end - begin > kMaxChunkBytes) {
      EncodeChunk(view.substr(begin, end - begin), buffers, out);
      begin = end;
    }
    offset = end;
  }
}

void SpmTokenizer::EncodeChunk(std::string_view chunk, ChunkBuffers& buffers,
                               std::vector<int32_t>& out) const {
  auto emit = [&](std::string_view piece) {
    const int32_t id = Lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    // Every merged symbol is a token (merges only form tokens), so only single characters can
    // miss the vocabulary and need byte fallback.
    for (char c : piece) {
      const int32_t byte_id = byte_to_id_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  };
  if (Utf8Len(chunk[0]) >= chunk.size()) {  // one character: nothing to merge
    emit(chunk);
    return;
  }
  std::vector<Symbol>& symbols = buffers.symbols;
  symbols.clear();
  for (size_t offset = 0; offset < chunk.size();) {
    const size_t len = std::min(Utf8Len(chunk[offset]), chunk.size() - offset);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, offset + len == chunk.size() ? -1 : index + 1,
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(len)});
    offset += len;
  }

  std::vector<Bigram>& queue = buffers.queue;
  queue.clear();
  const BigramOrder order;
  auto bigram = [&](int32_t left, int32_t right, Bigram* b) {
    if (left < 0 || right < 0) return false;
    const std::string_view joined(chunk.data() + symbols[left].begin,
                                  symbols[left].len + symbols[right].len);
    const int32_t id = Lookup(joined);
    if (id < 0) return false;
    *b = {left, right, scores_[id], static_cast<uint32_t>(joined.size())};
    return true;
  };
  auto push = [&](int32_t left, int32_t right) {
    Bigram b;
    if (!bigram(left, right, &b)) return;
    queue.push_back(b);
    std::push_heap(queue.begin(), queue.end(), order);
  };
  // The initial pairs are heapified at once (O(n)) rather than pushed one by one.
  for (size_t i = 1; i < symbols.size(); ++i) {
    Bigram b;
    if (bigram(static_cast<int32_t>(i - 1), static_cast<int32_t>(i), &b)) queue.push_back(b);
  }
  std::make_heap(queue.begin(), queue.end(), order);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), order);
    const Bigram top = queue.back();
    queue.pop_back();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Stale: one side was merged away, or grew, since the bigram was queued.
    if (left.len == 0 || right.len == 0 || left.len + right.len != top.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    push(left.prev, top.left);
    push(top.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    emit(chunk.substr(symbols[i].begin, symbols[i].len));
  }
}

void SpmTokenizer::AppendDecoded(int32_t id, bool skip_special, bool strip_space,
                                 std::string& out) const {
  const std::string& piece = pieces_[id];
  switch (types_[id]) {
    case model::TokenType::kControl:
    case model::TokenType::kUnknown:
      if (!skip_special) out += piece;
      return;
    case model::TokenType::kUnused:
      return;
    case model::TokenType::kUserDefined:
      out += piece;  // verbatim, like llama.cpp: user-defined pieces are not escaped
      return;
    case model::TokenType::kByte: {
      const int value = model::ParseByteToken(piece);
      if (value >= 0) {
        out += static_cast<char>(value);
      } else {
        out += piece;
      }
      return;
    }
    case model::TokenType::kNormal:
    case model::TokenType::kUndefined:
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

}  // namespace astr::tok
