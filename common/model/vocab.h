// A tokenizer vocabulary as stored in a GGUF file's tokenizer.ggml.* keys.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace astr::model {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  std::string model;  // tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (byte BPE), ...
  std::string pre;    // tokenizer.ggml.pre (may be empty)
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens
  std::vector<float> scores;        // tokenizer.ggml.scores (empty if absent)
  std::vector<TokenType> types;     // tokenizer.ggml.token_type (empty if absent)
  std::vector<std::string> merges;  // tokenizer.ggml.merges (gpt2 only)
  int64_t bos_id = -1;
  int64_t eos_id = -1;
  int64_t eot_id = -1;  // end of turn (tokenizer.ggml.eot_token_id), -1 if absent
  int64_t eom_id = -1;  // end of message (tokenizer.ggml.eom_token_id), -1 if absent
  int64_t unk_id = -1;
  int64_t pad_id = -1;
  bool add_bos = true;           // tokenizer.ggml.add_bos_token (SentencePiece default: true)
  bool add_eos = false;          // tokenizer.ggml.add_eos_token
  bool add_space_prefix = true;  // tokenizer.ggml.add_space_prefix (SentencePiece default: true)
};

// "<0x41>" -> 0x41 (upper or lower hex): the byte-fallback tokens of SentencePiece-style
// vocabularies; -1 for any other token.
int ParseByteToken(std::string_view token);

class GgufFile;

// The tokenizer.ggml.* keys of a GGUF file; null when it has no tokenizer.ggml.tokens. Errors name
// the file and the key.
StatusOr<std::unique_ptr<Vocab>> ReadVocab(const GgufFile& gguf);

}  // namespace astr::model
