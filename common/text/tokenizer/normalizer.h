// Normalizers of the Hugging Face tokenizer pipeline (tokenizer.json "normalizer"). They rewrite
// the text of one segment (the text between added tokens) before pre-tokenization.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer/pattern.h"

namespace astr::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string& text) const = 0;
  // For the tokenizer's length bound (Tokenizer::MinTokens): a factor f such that any text of B
  // bytes normalizes to at least B / f bytes; 0 when the output can be arbitrarily shorter
  // (Strip, Replace with a regex or with "" can delete any amount of text).
  virtual size_t MaxShrink() const = 0;
};

// Unicode normalization (any form) and Lowercase never turn a character into nothing, so every
// input character (at most 4 bytes) leaves at least one output byte; normalization forms may also
// compose characters, at most kMaxCanonicalDecomposition decomposed ones into one (the longest full
// canonical decomposition in Unicode; tests/common/unicode_test.cc checks it against our tables).
inline constexpr size_t kMaxCanonicalDecomposition = 4;
inline constexpr size_t kUnicodeNormalizerMaxShrink = 4 * kMaxCanonicalDecomposition;
inline constexpr size_t kLowercaseMaxShrink = 4;

// Supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip. A null json gives
// a null normalizer; any other type is an error naming it.
StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const nlohmann::json& j);

std::unique_ptr<Normalizer> MakeNfcNormalizer();
// SentencePiece escaping: spaces -> U+2581, and a U+2581 prefix on non-empty text when
// add_prefix (Prepend + Replace, as Llama-2's tokenizer.json has it).
std::unique_ptr<Normalizer> MakeSentencePieceNormalizer(bool add_prefix);

}  // namespace astr::tok
