// The tokenizer: text <-> token ids exactly as Hugging Face `tokenizers` does for a tokenizer.json,
// and as llama.cpp does for the vocabulary of a GGUF file.
//
// Encode: added / special tokens are cut out of the raw text first (special ones only when
// parse_special), each remaining segment is normalized, cut again at normalized added tokens,
// pre-tokenized into words, and each word is tokenized by the model (BPE or SentencePiece); the
// post-processor then adds BOS / EOS when add_special_tokens. Decode maps ids to token strings
// (dropping special tokens when skip_special_tokens) and runs the decoder.
//
// A Tokenizer is immutable after loading; Encode / Decode may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/added_vocabulary.h"
#include "common/tokenizer/decoder.h"
#include "common/tokenizer/model.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/pre_tokenizer.h"

namespace astr {

class GgufFile;
struct Vocab;

struct EncodeOptions {
  bool add_special_tokens = true;  // the post-processor's BOS / EOS
  bool parse_special = true;       // special tokens written in the text become their ids
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
  static StatusOr<std::shared_ptr<const Tokenizer>> FromGgufVocab(const Vocab& vocab,
                                                                  const std::string& source);

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;
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
  // Human-readable summary: model kind, vocabulary size, special ids.
  std::string Describe() const;

 private:
  friend class TokenizerBuilder;
  Tokenizer() = default;
  void EncodeText(std::string_view text, bool at_start, bool parse_special,
                  std::vector<int32_t>& ids) const;

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
  int32_t bos_id_ = -1;
  std::vector<int32_t> eos_ids_;
};

}  // namespace astr
