// Decoders of the Hugging Face tokenizer pipeline (tokenizer.json "decoder"): they turn the token
// strings of a sequence into text. Like tokenizers' decode_chain, each stage maps a list of
// strings to a list of strings and the results are concatenated.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace astr::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>& tokens) const = 0;
  // True when the output of a trailing <0xXX> token can still change with the next token
  // (ByteFallback joins consecutive byte tokens before checking UTF-8); streaming holds such text.
  virtual bool JoinsByteTokens() const { return false; }
};

// Supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder. Null
// json gives null (tokens are then joined with spaces); any other type is an error naming it.
StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const nlohmann::json& j);

// Building blocks for GGUF vocabularies.
std::unique_ptr<Decoder> MakeByteLevelDecoder();
// Replace U+2581 by ' ', ByteFallback, Fuse, and Strip one leading space when strip_leading_space.
std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space);

}  // namespace astr::tok
