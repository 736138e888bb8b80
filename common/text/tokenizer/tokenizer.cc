#include "common/text/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "common/model/gguf.h"
#include "common/model/vocab.h"
#include "common/text/tokenizer/byte_level.h"
#include "common/text/tokenizer/loaders.h"
#include "common/text/tokenizer/tokenizer_builder.h"

namespace astr::tok {

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
  t.ComputeLengthBounds();
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

// See max_bytes_per_token() and docs/tokenizers.md ("Length bounds") for why these are sound.
void Tokenizer::ComputeLengthBounds() {
  const tok::PreTokenizerTraits traits =
      pre_tokenizer_ != nullptr ? pre_tokenizer_->traits() : tok::PreTokenizerTraits{};
  std::span<const std::string> alphabet;
  if (traits.byte_level_words) alphabet = ByteLevelAlphabet();
  word_bytes_per_token_ = model_->MaxWordBytesPerToken(alphabet);
  size_t per_word = word_bytes_per_token_;
  if (per_word == 0 && normalizer_ == nullptr && traits.raw_byte_level) {
    // Each raw byte is one character of a word: count the bytes whose character the model knows.
    per_word = model_->CountedCharBytesPerToken();
    min_tokens_counts_every_byte_ = false;
    for (size_t b = 0; b < 256; ++b) {
      min_tokens_counted_byte_[b] = model_->CountsChar(ByteLevelAlphabet()[b]) ? 1 : 0;
    }
  }
  const size_t shrink = normalizer_ != nullptr ? normalizer_->MaxShrink() : 1;
  for (const bool parse_special : {false, true}) {
    const size_t raw = raw_added_.MaxMatchBytes(parse_special);
    const size_t normalized = normalized_added_.MaxMatchBytes(parse_special);
    const bool bounded = per_word > 0 && shrink > 0 && traits.keeps_every_byte && raw != SIZE_MAX &&
                         normalized != SIZE_MAX;
    max_bytes_per_token_[parse_special ? 1 : 0] =
        bounded ? std::max(raw, shrink * std::max(normalized, per_word)) : 0;
  }
}

// Takes the pipeline's words to the model and counts the ids against the limit; the ids still to
// come after the text (the post-processor's suffix) are counted in advance.
class Tokenizer::IdSink final : public tok::WordSink {
 public:
  // Shorter words are merged without a counting pass first: merging them is cheap anyway.
  static constexpr size_t kCountWordBytes = 4096;

  IdSink(const Tokenizer& t, size_t max_tokens, size_t reserved, BoundedEncoding& out)
      : t_(t), max_(max_tokens), reserved_(reserved), out_(out) {}

  bool Word(std::string_view word, bool /*at_start*/) override {
    if (max_ != SIZE_MAX) {
      // A word whose length alone passes the limit is not merged (merging a 50 MB word costs
      // ~20 bytes per byte and seconds). Long words without a length bound get one counting pass.
      const size_t per_token = t_.word_bytes_per_token_;
      size_t at_least = 0;
      if (per_token > 0) {
        at_least = (word.size() + per_token - 1) / per_token;
      } else if (word.size() > kCountWordBytes) {
        at_least = t_.model_->MinTokens(word);
      }
      if (at_least > max_ - Total()) return Stop(Total() + at_least);
    }
    t_.model_->Tokenize(word, out_.ids);
    return Check();
  }
  bool Add(int32_t id) {
    out_.ids.push_back(id);
    return Check();
  }

 private:
  size_t Total() const { return out_.ids.size() + reserved_; }
  bool Check() { return Total() <= max_ || Stop(Total()); }
  bool Stop(size_t at_least) {
    out_.complete = false;
    out_.min_tokens = at_least;
    return false;
  }

  const Tokenizer& t_;
  size_t max_;
  size_t reserved_;
  BoundedEncoding& out_;
};

bool Tokenizer::EncodeText(std::string_view text, bool at_start, bool parse_special,
                           IdSink& sink) const {
  std::string normalized_copy;
  std::string_view normalized = text;
  if (normalizer_ != nullptr) {
    normalized_copy.assign(text);
    normalizer_->Normalize(normalized_copy);
    normalized = normalized_copy;
  }
  tok::AddedTokenMatcher::Cursor segments(normalized_added_, normalized, parse_special);
  for (tok::Segment s; segments.Next(&s);) {
    if (s.id >= 0) {
      if (!sink.Add(s.id)) return false;
      continue;
    }
    if (s.end == s.begin) continue;
    const std::string_view piece = normalized.substr(s.begin, s.end - s.begin);
    const bool piece_at_start = at_start && s.begin == 0;
    const bool go_on = pre_tokenizer_ != nullptr
                           ? pre_tokenizer_->PreTokenize(piece, piece_at_start, sink)
                           : sink.Word(piece, piece_at_start);
    if (!go_on) return false;
  }
  return true;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  return EncodeAtMost(text, SIZE_MAX, options).ids;
}

BoundedEncoding Tokenizer::EncodeAtMost(std::string_view text, size_t max_tokens,
                                        const EncodeOptions& options) const {
  BoundedEncoding out;
  const size_t prefix = options.add_special_tokens ? prefix_ids_.size() : 0;
  const size_t suffix = options.add_special_tokens ? suffix_ids_.size() : 0;
  if (max_tokens != SIZE_MAX) {
    const size_t at_least = MinTokens(text, options.parse_special) + prefix + suffix;
    if (at_least > max_tokens) {
      out.complete = false;
      out.min_tokens = at_least;
      out.from_length = true;
      return out;
    }
  }
  IdSink sink(*this, max_tokens, suffix, out);
  for (size_t i = 0; i < prefix; ++i) {
    if (!sink.Add(prefix_ids_[i])) return out;
  }
  tok::AddedTokenMatcher::Cursor segments(raw_added_, text, options.parse_special);
  for (tok::Segment s; segments.Next(&s);) {
    if (s.id >= 0) {
      if (!sink.Add(s.id)) return out;
    } else if (s.end > s.begin) {
      if (!EncodeText(text.substr(s.begin, s.end - s.begin), s.begin == 0, options.parse_special,
                      sink)) {
        return out;
      }
    }
  }
  out.ids.insert(out.ids.end(), suffix_ids_.begin(), suffix_ids_.begin() + suffix);
  return out;
}

size_t Tokenizer::MinTokens(std::string_view text, bool parse_special) const {
  const size_t per_token = max_bytes_per_token(parse_special);
  if (per_token == 0) return 0;
  size_t counted = text.size();
  if (!min_tokens_counts_every_byte_) {
    counted = 0;
    for (char c : text) counted += min_tokens_counted_byte_[static_cast<uint8_t>(c)];
  }
  return (counted + per_token - 1) / per_token;
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
  return decoder_joins_bytes_ && model::ParseByteToken(IdToToken(id)) >= 0;
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
    ASTR_ASSIGN_OR_RETURN(auto gguf, model::GgufFile::Open(path));
    ASTR_ASSIGN_OR_RETURN(std::unique_ptr<model::Vocab> vocab, model::ReadVocab(*gguf));
    if (vocab == nullptr)
      return NotFoundError(path + ": the GGUF file has no tokenizer.ggml.tokens");
    return FromGgufVocab(*vocab, path);
  }
  return NotFoundError(path + ": no such file or folder");
}

}  // namespace astr::tok
