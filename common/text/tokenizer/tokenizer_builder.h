// Assembles a Tokenizer from pipeline parts; used by the tokenizer.json and GGUF loaders.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer/tokenizer.h"

namespace astr::tok {

class TokenizerBuilder {
 public:
  TokenizerBuilder() : t_(new Tokenizer()) {}

  void set_kind(std::string kind) { t_->kind_ = std::move(kind); }
  void set_normalizer(std::unique_ptr<tok::Normalizer> n) { t_->normalizer_ = std::move(n); }
  void set_pre_tokenizer(std::unique_ptr<tok::PreTokenizer> p) {
    t_->pre_tokenizer_ = std::move(p);
  }
  void set_model(std::unique_ptr<tok::Model> m) { t_->model_ = std::move(m); }
  void set_decoder(std::unique_ptr<tok::Decoder> d) { t_->decoder_ = std::move(d); }
  void set_post_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
    t_->prefix_ids_ = std::move(prefix);
    t_->suffix_ids_ = std::move(suffix);
  }
  void add_token(tok::AddedToken token) { added_.push_back(std::move(token)); }
  void set_bos_id(int32_t id) { t_->bos_id_ = id; }
  void set_eos_ids(std::vector<int32_t> ids) { t_->eos_ids_ = std::move(ids); }

  // Needs a model. Errors name `source` and the inconsistent part.
  StatusOr<std::shared_ptr<const Tokenizer>> Build(const std::string& source);

 private:
  std::unique_ptr<Tokenizer> t_;
  std::vector<tok::AddedToken> added_;
};

}  // namespace astr::tok
