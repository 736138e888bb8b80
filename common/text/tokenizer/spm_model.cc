// The score-based SentencePiece merge (common/text/tokenizer/spm_tokenizer.h) as a pipeline model:
// the pipeline's normalizer has already written spaces as U+2581, so the tokenizer runs without its
// own space prefix and without BOS.
#include <algorithm>

#include "common/text/tokenizer/model.h"
#include "common/text/tokenizer/spm_tokenizer.h"

namespace astr::tok {
namespace {

class SpmModel final : public Model {
 public:
  SpmModel(SpmTokenizer spm, std::vector<std::string> tokens)
      : spm_(std::move(spm)), tokens_(std::move(tokens)) {
    for (size_t i = 0; i < tokens_.size(); ++i) map_[tokens_[i]] = static_cast<int32_t>(i);
  }
  void Tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    spm_.AppendIds(word, out);
  }
  const std::vector<std::string>& id_to_token() const override { return tokens_; }
  const TokenMap& token_to_id() const override { return map_; }
  // Every final symbol is a piece (its bytes are the text it covers) or one character whose bytes
  // each get a fallback id.
  size_t MaxWordBytesPerToken(std::span<const std::string> /*alphabet*/) const override {
    return spm_.every_byte_has_id() ? std::max<size_t>(1, spm_.max_piece_bytes()) : 0;
  }
  size_t CountedCharBytesPerToken() const override { return 0; }
  bool CountsChar(std::string_view /*ch*/) const override { return false; }
  size_t MinTokens(std::string_view word) const override {
    const size_t per_token = MaxWordBytesPerToken({});
    return per_token == 0 ? 0 : (word.size() + per_token - 1) / per_token;
  }

 private:
  SpmTokenizer spm_;
  std::vector<std::string> tokens_;
  TokenMap map_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> MakeSpmModel(std::vector<std::string> tokens,
                                              std::vector<float> scores, int64_t unk_id) {
  model::Vocab vocab;
  vocab.model = "llama";
  vocab.tokens = tokens;
  vocab.scores = std::move(scores);
  vocab.unk_id = unk_id;
  vocab.add_bos = false;
  vocab.add_space_prefix = false;
  ASTR_ASSIGN_OR_RETURN(SpmTokenizer spm, SpmTokenizer::Create(vocab));
  return std::unique_ptr<Model>(new SpmModel(std::move(spm), std::move(tokens)));
}

}  // namespace astr::tok
