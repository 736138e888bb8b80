// Pre-tokenizers of the Hugging Face tokenizer pipeline (tokenizer.json "pre_tokenizer"): they cut
// a normalized segment into words that the model tokenizes independently.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/pattern.h"

namespace astr::tok {

struct PreToken {
  std::string text;
  // True only for the piece that starts at offset 0 of the whole input (Metaspace's "first").
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenized pieces, in order; empty pieces are dropped.
  virtual void PreTokenize(std::vector<PreToken>& pieces) const = 0;
};

// Supported: Sequence, ByteLevel, Split, Digits, Metaspace, Whitespace, WhitespaceSplit,
// Punctuation. Null json gives null; any other type is an error naming it.
StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const nlohmann::json& j);

// Building blocks for vocabularies that do not come with a tokenizer.json (GGUF).
std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> parts);
std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(Pattern pattern, SplitBehavior behavior,
                                                    bool invert);
std::unique_ptr<PreTokenizer> MakeDigitsPreTokenizer(bool individual_digits);
// GPT-2's byte-level pre-tokenizer: optional prefix space, optional split with GPT-2's regex, then
// every byte mapped to its printable stand-in character.
StatusOr<std::unique_ptr<PreTokenizer>> MakeByteLevelPreTokenizer(bool add_prefix_space,
                                                                  bool use_regex);

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
extern const char kGpt2SplitRegex[];

}  // namespace astr::tok
