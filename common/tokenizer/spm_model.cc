// The score-based SentencePiece merge (common/spm_tokenizer.h) as a pipeline model: the pipeline's
// normalizer has already written spaces as U+2581, so the tokenizer runs without its own space
// prefix and without BOS.
#include "common/spm_tokenizer.h"
#include "common/tokenizer/model.h"

namespace astr::tok {
namespace {

class SpmModel final : public Model {
 public:
  SpmModel(SpmTokenizer spm, std::vector<std::string> tokens)
      : spm_(std::move(spm)), tokens_(std::move(tokens)) {
    for (size_t i = 0; i < tokens_.size(); ++i) map_[tokens_[i]] = static_cast<int32_t>(i);
  }
  void Tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    const std::vector<int32_t> ids = spm_.Encode(word, /*add_bos=*/false);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  const std::vector<std::string>& id_to_token() const override { return tokens_; }
  const TokenMap& token_to_id() const override { return map_; }

 private:
  SpmTokenizer spm_;
  std::vector<std::string> tokens_;
  TokenMap map_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> MakeSpmModel(std::vector<std::string> tokens,
                                              std::vector<float> scores, int64_t unk_id) {
  Vocab vocab;
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
