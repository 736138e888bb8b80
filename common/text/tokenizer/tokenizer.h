// The tokenizer: text <-> token ids exactly as Hugging Face `tokenizers` does for a tokenizer.json,
// and as llama.cpp does for the vocabulary of a GGUF file.
//
// Encode: added / special tokens are cut out of the raw text first (special ones only when
// parse_special), each remaining segment is normalized, cut again at normalized added tokens,
// pre-tokenized into words, and each word is tokenized by the model (BPE or SentencePiece); the
// post-processor then adds BOS / EOS when add_special_tokens. Decode maps ids to token strings
// (dropping special tokens when skip_special_tokens) and runs the decoder.
//
// Memory: the pipeline streams. Added-token segments, pre-tokenizer words and regex matches are
// produced one at a time and each word goes to the model as soon as it is cut, so encoding costs
// the ids, a normalized copy of a segment (only with a normalizer), and the merge state of the
// current word; a long word without a pre-tokenizer is cut where no merge reaches across (see
// bpe_model.cc, spm_tokenizer.cc).
//
// A Tokenizer is immutable after loading; Encode / Decode may be called from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer/added_vocabulary.h"
#include "common/text/tokenizer/decoder.h"
#include "common/text/tokenizer/model.h"
#include "common/text/tokenizer/normalizer.h"
#include "common/text/tokenizer/pre_tokenizer.h"

namespace astr::model {
class GgufFile;
struct Vocab;
}  // namespace astr::model

namespace astr::tok {

struct EncodeOptions {
  bool add_special_tokens = true;  // the post-processor's BOS / EOS
  bool parse_special = true;       // special tokens written in the text become their ids
};

// The result of Tokenizer::EncodeAtMost.
struct BoundedEncoding {
  // complete: all the ids (== Encode). Otherwise a prefix of them, possibly empty, and the text
  // has more than the limit.
  std::vector<int32_t> ids;
  bool complete = true;
  // When !complete: a lower bound (> the limit) on the number of ids Encode gives.
  size_t min_tokens = 0;
  // When !complete: true if the bound came from the text's bytes alone (MinTokens), before any
  // tokenization.
  bool from_length = false;
};

class Tokenizer {
 public:
  // `path`: a model folder with tokenizer.json (plus tokenizer_config.json,
  // generation_config.json when present), a tokenizer.json file, or a .gguf file.
  static StatusOr<std::shared_ptr<const Tokenizer>> Load(const std::string& path);
  // A parsed tokenizer.json; `source` names it in errors.
  static StatusOr<std::shared_ptr<const Tokenizer>> FromHfJson(const nlohmann::json& j,
                                                               const std::string& source);
  // The tokenizer.ggml.* vocabulary of a GGUF file (models "llama" and "gpt2").
  static StatusOr<std::shared_ptr<const Tokenizer>> FromGgufVocab(const model::Vocab& vocab,
                                                                  const std::string& source);

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Encode that stops as soon as the ids are known to be more than max_tokens: before tokenizing
  // when the text's bytes alone say so (MinTokens), else before a word whose bytes alone would pass
  // the limit, else after the id that passes it. The work is then about what max_tokens ids take.
  BoundedEncoding EncodeAtMost(std::string_view text, size_t max_tokens,
                               const EncodeOptions& options = {}) const;
  // A lower bound on the number of ids Encode gives for `text` (before the post-processor's
  // tokens), from its bytes alone; 0 when the pipeline allows none. O(1): ceil(bytes / R) with
  // R = max_bytes_per_token(parse_special); for a byte-level vocabulary without tokens for some
  // bytes (they are dropped: SmolLM2's has none for six ASCII control bytes), one pass over the
  // text that counts only the other bytes.
  size_t MinTokens(std::string_view text, bool parse_special) const;
  // R: the most counted bytes of input one id can stand for, or 0 when there is no bound. It is
  // the longest added token, or the longest model token times the normalizer's MaxShrink; 0 when
  // a part can make any amount of text disappear or fold into one id: added tokens with lstrip /
  // rstrip, Strip or regex Replace normalizers, Removed splits, models that drop unknown
  // characters or fuse them into one unk (unless they are byte-level without normalizer: then
  // the dropped bytes are not counted). docs/tokenizers.md has the argument.
  size_t max_bytes_per_token(bool parse_special) const {
    return max_bytes_per_token_[parse_special ? 1 : 0];
  }
  // Ids outside the vocabulary are skipped, as tokenizers does.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // One past the largest id of the model or the added tokens.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // The token's string as stored ("Ġworld", "▁the", "<0x0A>", "<|im_end|>"); "" if unknown.
  const std::string& IdToToken(int32_t id) const;
  // -1 if absent.
  int32_t TokenToId(std::string_view token) const;
  bool IsSpecial(int32_t id) const;
  // True for a <0xXX> token whose text the decoder joins with the next byte tokens.
  bool IsByteFallbackToken(int32_t id) const;

  // -1 when the model has none.
  int32_t bos_id() const { return bos_id_; }
  // Ids that end a generation: generation_config.json's eos_token_id (one or a list), else the
  // tokenizer's EOS; GGUF: EOS plus EOT / EOM when present. May be empty.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // The model kind: "BPE", "BPE (byte-level)", "SentencePiece (GGUF llama)", ...
  const std::string& kind() const { return kind_; }
  // Human-readable summary: model kind, vocabulary size, special ids.
  std::string Describe() const;

 private:
  friend class TokenizerBuilder;
  class IdSink;

  Tokenizer() = default;
  void ComputeLengthBounds();  // at the end of TokenizerBuilder::Build
  // Tokenizes one segment between raw added tokens; false once the sink has stopped.
  bool EncodeText(std::string_view text, bool at_start, bool parse_special, IdSink& sink) const;

  std::string kind_;                  // "BPE", "BPE (byte-level)", "SentencePiece (GGUF)", ...
  tok::AddedTokenMatcher raw_added_;  // matched in the raw text
  tok::AddedTokenMatcher normalized_added_;  // matched after normalization
  std::unique_ptr<tok::Normalizer> normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::Model> model_;
  std::unique_ptr<tok::Decoder> decoder_;
  std::vector<int32_t> prefix_ids_;  // post-processor, single sequence
  std::vector<int32_t> suffix_ids_;
  std::vector<std::string> id_to_token_;
  tok::TokenMap added_token_to_id_;
  std::vector<uint8_t> special_;  // per id
  bool decoder_joins_bytes_ = false;
  // The model's MaxWordBytesPerToken for the words the pre-tokenizer makes (0: no bound).
  size_t word_bytes_per_token_ = 0;
  size_t max_bytes_per_token_[2] = {0, 0};  // [parse_special]
  bool min_tokens_counts_every_byte_ = true;
  std::array<uint8_t, 256> min_tokens_counted_byte_{};  // when not every byte counts
  int32_t bos_id_ = -1;
  std::vector<int32_t> eos_ids_;
};

}  // namespace astr::tok
