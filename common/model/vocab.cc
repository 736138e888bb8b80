#include "common/model/vocab.h"

#include "common/model/gguf.h"

namespace astr::model {

int ParseByteToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

StatusOr<std::unique_ptr<Vocab>> ReadVocab(const GgufFile& gguf) {
  const GgufValue* tokens = gguf.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr) return std::unique_ptr<Vocab>();
  const std::string& p = gguf.path();
  auto bad = [&](const std::string& key, const std::string& why) {
    return InvalidArgumentError(p + ": key '" + key + "' " + why);
  };
  if (tokens->type != GgufType::kArray || tokens->elem_type != GgufType::kString) {
    return bad("tokenizer.ggml.tokens", "must be an array of strings");
  }
  auto v = std::make_unique<Vocab>();
  ASTR_ASSIGN_OR_RETURN(v->model, gguf.GetString("tokenizer.ggml.model", "llama"));
  ASTR_ASSIGN_OR_RETURN(v->pre, gguf.GetString("tokenizer.ggml.pre", ""));
  v->tokens.reserve(tokens->array.size());
  for (const GgufValue& t : tokens->array) v->tokens.push_back(t.s);
  const size_t n = v->tokens.size();
  if (const GgufValue* s = gguf.Find("tokenizer.ggml.scores")) {
    if (s->type != GgufType::kArray || !(s->elem_type == GgufType::kF32) || s->array.size() != n) {
      return bad("tokenizer.ggml.scores", "must be an f32 array with one score per token");
    }
    for (const GgufValue& x : s->array) v->scores.push_back(static_cast<float>(x.f));
  }
  if (const GgufValue* s = gguf.Find("tokenizer.ggml.token_type")) {
    if (s->type != GgufType::kArray || !GgufTypeIsInteger(s->elem_type) || s->array.size() != n) {
      return bad("tokenizer.ggml.token_type", "must be an integer array with one type per token");
    }
    for (const GgufValue& x : s->array) {
      if (x.i < 0 || x.i > 6)
        return bad("tokenizer.ggml.token_type", "has unknown type " + std::to_string(x.i));
      v->types.push_back(static_cast<TokenType>(x.i));
    }
  }
  if (const GgufValue* s = gguf.Find("tokenizer.ggml.merges")) {
    if (s->type != GgufType::kArray || s->elem_type != GgufType::kString) {
      return bad("tokenizer.ggml.merges", "must be an array of strings");
    }
    for (const GgufValue& x : s->array) v->merges.push_back(x.s);
  }
  const std::pair<const char*, int64_t*> ids[] = {{"tokenizer.ggml.bos_token_id", &v->bos_id},
                                                  {"tokenizer.ggml.eos_token_id", &v->eos_id},
                                                  {"tokenizer.ggml.eot_token_id", &v->eot_id},
                                                  {"tokenizer.ggml.eom_token_id", &v->eom_id},
                                                  {"tokenizer.ggml.unknown_token_id", &v->unk_id},
                                                  {"tokenizer.ggml.padding_token_id", &v->pad_id}};
  for (const auto& [key, dst] : ids) {
    ASTR_ASSIGN_OR_RETURN(int64_t id, gguf.GetInt(key, -1));
    if (id == 0xFFFFFFFF) id = -1;  // llama.cpp writes u32 -1 for "unset"
    if (id >= static_cast<int64_t>(n))
      return bad(key, std::to_string(id) + " is outside the vocabulary");
    *dst = id;
  }
  // SentencePiece vocabularies add BOS and a space prefix by default; byte-level BPE ones do not.
  const bool spm = v->model == "llama";
  ASTR_ASSIGN_OR_RETURN(v->add_bos, gguf.GetBool("tokenizer.ggml.add_bos_token", spm));
  ASTR_ASSIGN_OR_RETURN(v->add_eos, gguf.GetBool("tokenizer.ggml.add_eos_token", false));
  ASTR_ASSIGN_OR_RETURN(v->add_space_prefix, gguf.GetBool("tokenizer.ggml.add_space_prefix", spm));
  return v;
}

}  // namespace astr::model
