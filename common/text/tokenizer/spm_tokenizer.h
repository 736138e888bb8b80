// SentencePiece-style tokenizer for GGUF "llama" vocabularies, following llama.cpp's SPM tokenizer
// (llm_tokenizer_spm) so that token ids match llama.cpp and the reference tokenizations.
//
// Encode: optional space prefix, ' ' -> U+2581 ("▁"), one initial symbol per UTF-8 character, then
// repeatedly merge the adjacent pair whose concatenation is a vocabulary token with the highest
// score (ties: leftmost pair). Symbols that are tokens map to their id; others fall back to one
// <0xXX> byte token per byte (or unk when the vocabulary has no byte tokens). Special tokens
// written in the text (e.g. "<s>") are not recognized: the text is plain text. A long text is
// merged in chunks cut where no piece can span (two bytes adjacent in no piece): the same ids,
// with memory for one chunk's merge state instead of 32+ bytes per character of the text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"
#include "common/model/vocab.h"

namespace astr::tok {

class SpmTokenizer {
 public:
  // Fails unless vocab.model == "llama" with consistent tokens / scores / types and in-range
  // special ids.
  static StatusOr<SpmTokenizer> Create(const model::Vocab& vocab);

  // Token ids of `text`, preceded by BOS when add_bos. Empty text gives no tokens (just BOS).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const;
  // Appends the ids of `text` (no BOS) to `out`.
  void AppendIds(std::string_view text, std::vector<int32_t>& out) const;

  // Text of `ids` as the start of a text: "▁" -> ' ', byte tokens -> raw bytes, and, when the
  // vocabulary adds a space prefix, one leading space of the first token after an optional BOS
  // removed (llama.cpp / SentencePiece behaviour). With skip_special, control and unknown tokens
  // are dropped; otherwise their text is emitted verbatim. Out-of-range ids are skipped.
  // Streaming callers decode the whole sequence so far and emit the new suffix.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = true) const;

  // The token's piece as stored in the vocabulary (e.g. "▁the", "<0x0A>", "<s>"); "" if out of
  // range.
  std::string TokenPiece(int32_t id) const;

  int64_t bos_id() const { return bos_id_; }
  int64_t eos_id() const { return eos_id_; }
  int64_t unk_id() const { return unk_id_; }
  int64_t vocab_size() const { return static_cast<int64_t>(pieces_.size()); }
  bool add_bos() const { return add_bos_; }
  // Bytes of the longest piece.
  size_t max_piece_bytes() const { return max_piece_bytes_; }
  // Every byte has a fallback id (a byte token, a one-byte piece, or unk): no character is ever
  // dropped.
  bool every_byte_has_id() const { return every_byte_has_id_; }

 private:
  // Transparent hashing so lookups by string_view allocate nothing.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, Hash, std::equal_to<>>;

  struct ChunkBuffers;

  SpmTokenizer() = default;
  int32_t Lookup(std::string_view piece) const;  // -1 if absent
  // Whether bytes a, b are adjacent in some piece.
  bool PairInPiece(char a, char b) const;
  // Appends the ids of one chunk of escaped text (see Encode).
  void EncodeChunk(std::string_view chunk, ChunkBuffers& buffers, std::vector<int32_t>& out) const;
  void AppendDecoded(int32_t id, bool skip_special, bool strip_space, std::string& out) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<model::TokenType> types_;
  PieceMap piece_to_id_;
  std::array<int32_t, 256> byte_to_id_{};  // <0xXX> token per byte, or unk / -1
  int64_t bos_id_ = -1;
  int64_t eos_id_ = -1;
  int64_t unk_id_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
  size_t max_piece_bytes_ = 0;
  bool every_byte_has_id_ = false;
  std::vector<uint64_t> pair_in_piece_;  // bit (a << 8 | b): bytes a, b adjacent in a piece
};

}  // namespace astr::tok
