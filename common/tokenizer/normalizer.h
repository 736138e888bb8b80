// Normalizers of the Hugging Face tokenizer pipeline (tokenizer.json "normalizer"). They rewrite
// the text of one segment (the text between added tokens) before pre-tokenization.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/pattern.h"

namespace astr::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string& text) const = 0;
};

// Supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip. A null json gives
// a null normalizer; any other type is an error naming it.
StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const nlohmann::json& j);

std::unique_ptr<Normalizer> MakeNfcNormalizer();
// SentencePiece escaping: spaces -> U+2581, and a U+2581 prefix on non-empty text when
// add_prefix (Prepend + Replace, as Llama-2's tokenizer.json has it).
std::unique_ptr<Normalizer> MakeSentencePieceNormalizer(bool add_prefix);

}  // namespace astr::tok
