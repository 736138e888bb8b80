// SentencePiece-style tokenizer for GGUF "llama" vocabularies, following llama.cpp's SPM tokenizer
// (llm_tokenizer_spm) so that token ids match llama.cpp and the reference tokenizations.
//
// Encode: optional space prefix, ' ' -> U+2581 ("▁"), one initial symbol per UTF-8 character, then
// repeatedly merge the adjacent pair whose concatenation is a vocabulary token with the highest
// score (ties: leftmost pair). Symbols that are tokens map to their id; others fall back to one
// <0xXX> byte token per byte (or unk when the vocabulary has no byte tokens). Special tokens
// written in the text (e.g. "<s>") are not recognized: the text is plain text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/vocab.h"

namespace astr {

class SpmTokenizer {
 public:
  // Fails unless vocab.model == "llama" with consistent tokens / scores / types and in-range
  // special ids.
  static StatusOr<SpmTokenizer> Create(const Vocab& vocab);

  // Token ids of `text`, preceded by BOS when add_bos. Empty text gives no tokens (just BOS).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const;

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

 private:
  // Transparent hashing so lookups by string_view allocate nothing.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, Hash, std::equal_to<>>;

  SpmTokenizer() = default;
  int32_t Lookup(std::string_view piece) const;  // -1 if absent
  void AppendDecoded(int32_t id, bool skip_special, bool strip_space, std::string& out) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  PieceMap piece_to_id_;
  std::array<int32_t, 256> byte_to_id_{};  // <0xXX> token per byte, or unk / -1
  int64_t bos_id_ = -1;
  int64_t eos_id_ = -1;
  int64_t unk_id_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
};

}  // namespace astr
