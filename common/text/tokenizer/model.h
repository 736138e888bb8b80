// Tokenization models: turn one pre-tokenized word into ids. BPE is the merges-based model of
// tokenizer.json (byte-level and byte-fallback variants); SPM is the score-based merge of GGUF
// "llama" vocabularies (SentencePiece / llama.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"

namespace astr::tok {

// Transparent hashing so lookups by string_view allocate nothing.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word`.
  virtual void Tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  // The model's own vocabulary (added tokens are handled by the caller).
  virtual const std::vector<std::string>& id_to_token() const = 0;
  virtual const TokenMap& token_to_id() const = 0;
  // For the tokenizer's length bounds: L such that a word of B bytes gives at least B / L ids,
  // or 0 when its length says nothing (a character can give no id, or a run of them one id).
  // `alphabet`, when not empty, holds every character a word can contain (ByteLevel words).
  virtual size_t MaxWordBytesPerToken(std::span<const std::string> alphabet) const = 0;
  // When MaxWordBytesPerToken gives no bound because some characters can give no id: L such that
  // a word gives at least B / L ids, where B counts only the bytes of the characters for which
  // CountsChar holds; 0 when there is no such bound either.
  virtual size_t CountedCharBytesPerToken() const = 0;
  virtual bool CountsChar(std::string_view ch) const = 0;
  // That bound for one word, from one cheap pass over it (no allocation), for words too long to
  // merge blindly; 0 when nothing is known.
  virtual size_t MinTokens(std::string_view word) const = 0;
};

struct BpeOptions {
  std::string unk_token;  // empty: none
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;  // a word that is itself a token is not merged (Llama-3)
};

// vocab: token -> id (ids need not be dense; gaps decode to nothing). merges: pairs in rank order.
// Errors name the merge or token that is inconsistent.
StatusOr<std::unique_ptr<Model>> MakeBpeModel(
    TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    const BpeOptions& options);

// Score-based SentencePiece merge over an already escaped word (spaces are U+2581), with <0xXX>
// byte fallback. tokens/scores are indexed by id.
StatusOr<std::unique_ptr<Model>> MakeSpmModel(std::vector<std::string> tokens,
                                              std::vector<float> scores, int64_t unk_id);

}  // namespace astr::tok
