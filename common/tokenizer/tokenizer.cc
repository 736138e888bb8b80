#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "common/gguf.h"
#include "common/tokenizer/loaders.h"
#include "common/tokenizer/tokenizer_builder.h"
#include "common/vocab.h"

namespace astr {

StatusOr<std::shared_ptr<const Tokenizer>> TokenizerBuilder::Build(const std::string& source) {
  Tokenizer& t = *t_;
  if (t.model_ == nullptr) return InternalError(source + ": tokenizer has no model");
  t.id_to_token_ = t.model_->id_to_token();
  std::vector<tok::AddedToken> raw, normalized;
  for (tok::AddedToken& a : added_) {
    if (a.id < 0)
      return InvalidArgumentError(source + ": added token \"" + a.content + "\" has no id");
    if (static_cast<size_t>(a.id) >= t.id_to_token_.size()) t.id_to_token_.resize(a.id + 1);
    t.id_to_token_[a.id] = a.content;
    t.added_token_to_id_[a.content] = a.id;
    (a.normalized && t.normalizer_ != nullptr ? normalized : raw).push_back(a);
  }
  t.special_.assign(t.id_to_token_.size(), 0);
  for (const tok::AddedToken& a : added_) t.special_[a.id] = a.special ? 1 : 0;
  t.raw_added_ = tok::AddedTokenMatcher(std::move(raw));
  t.normalized_added_ = tok::AddedTokenMatcher(std::move(normalized));
  t.decoder_joins_bytes_ = t.decoder_ != nullptr && t.decoder_->JoinsByteTokens();
  const int32_t n = t.vocab_size();
  auto check = [&](int32_t id, const char* what) -> Status {
    if (id < -1 || id >= n) {
      return InvalidArgumentError(source + ": " + what + " id " + std::to_string(id) +
                                  " is outside the vocabulary of " + std::to_string(n));
    }
    return OkStatus();
  };
  ASTR_RETURN_IF_ERROR(check(t.bos_id_, "BOS"));
  for (int32_t id : t.eos_ids_) ASTR_RETURN_IF_ERROR(check(id, "EOS"));
  for (int32_t id : t.prefix_ids_) ASTR_RETURN_IF_ERROR(check(id, "post-processor"));
  for (int32_t id : t.suffix_ids_) ASTR_RETURN_IF_ERROR(check(id, "post-processor"));
  return std::shared_ptr<const Tokenizer>(std::move(t_));
}

void Tokenizer::EncodeText(std::string_view text, bool at_start, bool parse_special,
                           std::vector<int32_t>& ids) const {
  std::string normalized(text);
  if (normalizer_ != nullptr) normalizer_->Normalize(normalized);
  std::vector<tok::PreToken> pieces;
  for (const tok::Segment& s : normalized_added_.Split(normalized, parse_special)) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    if (s.end == s.begin) continue;
    pieces.clear();
    pieces.push_back({normalized.substr(s.begin, s.end - s.begin), at_start && s.begin == 0});
    if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(pieces);
    for (const tok::PreToken& p : pieces) model_->Tokenize(p.text, ids);
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  if (options.add_special_tokens) ids = prefix_ids_;
  for (const tok::Segment& s : raw_added_.Split(text, options.parse_special)) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else if (s.end > s.begin) {
      EncodeText(text.substr(s.begin, s.end - s.begin), s.begin == 0, options.parse_special, ids);
    }
  }
  if (options.add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || id_to_token_[id].empty()) continue;
    if (skip_special_tokens && special_[id]) continue;
    tokens.push_back(id_to_token_[id]);
  }
  if (decoder_ == nullptr) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder_->DecodeChain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

const std::string& Tokenizer::IdToToken(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < vocab_size() ? id_to_token_[id] : kEmpty;
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  if (const auto it = added_token_to_id_.find(token); it != added_token_to_id_.end()) {
    return it->second;
  }
  const auto& map = model_->token_to_id();
  const auto it = map.find(token);
  return it == map.end() ? -1 : it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id] != 0;
}

bool Tokenizer::IsByteFallbackToken(int32_t id) const {
  return decoder_joins_bytes_ && ParseByteToken(IdToToken(id)) >= 0;
}

std::string Tokenizer::Describe() const {
  std::string eos;
  for (int32_t id : eos_ids_) eos += (eos.empty() ? "" : ",") + std::to_string(id);
  return kind_ + ", vocab " + std::to_string(vocab_size()) + ", bos " + std::to_string(bos_id_) +
         ", eos [" + eos + "]";
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::Load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec) || path.ends_with(".json")) return LoadHfTokenizer(path);
  if (fs::is_regular_file(path, ec)) {
    ASTR_ASSIGN_OR_RETURN(auto gguf, GgufFile::Open(path));
    ASTR_ASSIGN_OR_RETURN(std::unique_ptr<Vocab> vocab, ReadVocab(*gguf));
    if (vocab == nullptr)
      return NotFoundError(path + ": the GGUF file has no tokenizer.ggml.tokens");
    return FromGgufVocab(*vocab, path);
  }
  return NotFoundError(path + ": no such file or folder");
}

}  // namespace astr
