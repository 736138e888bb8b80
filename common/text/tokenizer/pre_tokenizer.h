// Pre-tokenizers of the Hugging Face tokenizer pipeline (tokenizer.json "pre_tokenizer"): they cut
// a normalized segment into words that the model tokenizes independently.
//
// Words are streamed: each is handed to a WordSink as soon as it is cut, and a sequence of
// pre-tokenizers runs stage inside stage, so the words of a long text are never all in memory
// (the old vector of pieces cost ~40 bytes per word plus every word's own string) and the caller
// can stop after any word.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer/pattern.h"

namespace astr::tok {

// Receives the words of a pre-tokenizer, in order.
class WordSink {
 public:
  // `word` is valid only during the call. `at_start`: the word begins at offset 0 of the whole
  // input (Metaspace's prepend_scheme "first"). Returns false to stop the pre-tokenizer.
  virtual bool Word(std::string_view word, bool at_start) = 0;

 protected:
  ~WordSink() = default;
};

// What the tokenizer's length bound (Tokenizer::MinTokens) needs to know about a pre-tokenizer.
struct PreTokenizerTraits {
  // The words together are at least as long as the text: nothing is removed (no Removed split),
  // rewriting only lengthens.
  bool keeps_every_byte = true;
  bool only_splits = true;        // words are pieces of the text, not rewritten
  bool byte_level_words = false;  // every word is ByteLevel alphabet text
  // ... and each of its characters stands for one byte of the text given to the pre-tokenizer
  // (nothing rewrote the text before the byte-level mapping).
  bool raw_byte_level = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Cuts `text` into words and hands each non-empty one to `sink`, in order; `at_start` says
  // whether `text` begins at offset 0 of the input. Returns false as soon as the sink does.
  virtual bool PreTokenize(std::string_view text, bool at_start, WordSink& sink) const = 0;
  virtual PreTokenizerTraits traits() const = 0;
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
