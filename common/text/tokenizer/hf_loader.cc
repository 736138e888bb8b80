// tokenizer.json (Hugging Face `tokenizers` serialization) -> Tokenizer.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base/file_util.h"
#include "common/text/tokenizer/hf_tokenizer_config.h"
#include "common/text/tokenizer/json_util.h"
#include "common/text/tokenizer/loaders.h"
#include "common/text/tokenizer/tokenizer_builder.h"

namespace astr::tok {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

StatusOr<std::vector<std::pair<std::string, std::string>>> ParseMerges(const json& list) {
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return InvalidArgumentError("model.merges[" + std::to_string(i) + "] \"" + s +
                                    "\" is not two tokens separated by one space");
      }
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return InvalidArgumentError("model.merges[" + std::to_string(i) +
                                  "] must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

StatusOr<std::unique_ptr<tok::Model>> ModelFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("field \"model\" must be an object");
  std::string type = "BPE";  // old files (GPT-2) leave the type out
  if (const auto it = j.find("type"); it != j.end()) {
    if (!it->is_string()) return InvalidArgumentError("model.type must be a string");
    type = it->get<std::string>();
  }
  if (type != "BPE") {
    return UnimplementedError("model type \"" + type + "\" is not supported (only BPE)");
  }
  const auto vocab_it = j.find("vocab");
  if (vocab_it == j.end() || !vocab_it->is_object()) {
    return InvalidArgumentError("model.vocab must be an object of token -> id");
  }
  tok::TokenMap vocab;
  vocab.reserve(vocab_it->size());
  for (const auto& [token, id] : vocab_it->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return InvalidArgumentError("model.vocab[\"" + token + "\"] must be a non-negative id");
    }
    vocab.emplace(token, id.get<int32_t>());
  }
  const auto merges_it = j.find("merges");
  if (merges_it == j.end() || !merges_it->is_array()) {
    return InvalidArgumentError("model.merges must be an array");
  }
  ASTR_ASSIGN_OR_RETURN(auto merges, ParseMerges(*merges_it));
  if (const auto it = j.find("dropout"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0) {
      return UnimplementedError("model.dropout " + it->dump() + " is not supported (BPE dropout)");
    }
  }
  auto string_or_empty = [&](const char* key) -> StatusOr<std::string> {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::string();
    if (!it->is_string())
      return InvalidArgumentError(std::string("model.") + key + " must be a string");
    return it->get<std::string>();
  };
  tok::BpeOptions options;
  ASTR_ASSIGN_OR_RETURN(options.unk_token, string_or_empty("unk_token"));
  ASTR_ASSIGN_OR_RETURN(options.continuing_subword_prefix,
                        string_or_empty("continuing_subword_prefix"));
  ASTR_ASSIGN_OR_RETURN(options.end_of_word_suffix, string_or_empty("end_of_word_suffix"));
  ASTR_ASSIGN_OR_RETURN(options.fuse_unk, tok::JsonBool(j, "fuse_unk", false, "model"));
  ASTR_ASSIGN_OR_RETURN(options.byte_fallback, tok::JsonBool(j, "byte_fallback", false, "model"));
  ASTR_ASSIGN_OR_RETURN(options.ignore_merges, tok::JsonBool(j, "ignore_merges", false, "model"));
  return tok::MakeBpeModel(std::move(vocab), merges, options);
}

StatusOr<std::vector<tok::AddedToken>> AddedTokensFromJson(const json& j) {
  std::vector<tok::AddedToken> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return InvalidArgumentError("field \"added_tokens\" must be an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const json& a = j[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object()) return InvalidArgumentError(where + " must be an object");
    const auto id = a.find("id");
    const auto content = a.find("content");
    if (id == a.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX) {
      return InvalidArgumentError(where + ".id must be a non-negative integer");
    }
    if (content == a.end() || !content->is_string() || content->get<std::string>().empty()) {
      return InvalidArgumentError(where + ".content must be a non-empty string");
    }
    tok::AddedToken t;
    t.id = id->get<int32_t>();
    t.content = content->get<std::string>();
    ASTR_ASSIGN_OR_RETURN(t.special, tok::JsonBool(a, "special", false, where));
    ASTR_ASSIGN_OR_RETURN(t.single_word, tok::JsonBool(a, "single_word", false, where));
    ASTR_ASSIGN_OR_RETURN(t.lstrip, tok::JsonBool(a, "lstrip", false, where));
    ASTR_ASSIGN_OR_RETURN(t.rstrip, tok::JsonBool(a, "rstrip", false, where));
    ASTR_ASSIGN_OR_RETURN(t.normalized, tok::JsonBool(a, "normalized", !t.special, where));
    out.push_back(std::move(t));
  }
  return out;
}

Status TemplateProcessing(const json& j, std::vector<int32_t>& prefix,
                          std::vector<int32_t>& suffix) {
  const auto single = j.find("single");
  if (single == j.end() || !single->is_array()) {
    return InvalidArgumentError("TemplateProcessing post-processor: \"single\" must be an array");
  }
  const json specials = j.value("special_tokens", json::object());
  bool seen_sequence = false;
  for (const json& item : *single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const auto st = item.find("SpecialToken");
    if (st == item.end() || !st->is_object() || !st->contains("id") || !(*st)["id"].is_string()) {
      return InvalidArgumentError("TemplateProcessing post-processor: bad item " + item.dump());
    }
    const std::string name = (*st)["id"].get<std::string>();
    const auto def = specials.find(name);
    if (def == specials.end() || !def->contains("ids") || !(*def)["ids"].is_array()) {
      return InvalidArgumentError("TemplateProcessing post-processor: special token \"" + name +
                                  "\" has no ids in special_tokens");
    }
    for (const json& id : (*def)["ids"]) {
      if (!id.is_number_integer()) {
        return InvalidArgumentError("TemplateProcessing: ids of \"" + name + "\" must be integers");
      }
      (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
    }
  }
  return OkStatus();
}

// The ids `tokenizers` really gives added tokens when it loads a file: a content the model's
// vocabulary has keeps that id, a new one gets the next id after the vocabulary and the added
// tokens so far (the "id" field is only checked, with a warning). Real files agree with this;
// edited ones may not.
void AssignAddedTokenIds(const tok::Model& model, std::vector<tok::AddedToken>& tokens) {
  const auto& vocab = model.token_to_id();
  const int32_t vocab_len = static_cast<int32_t>(vocab.size());
  tok::TokenMap assigned;
  int32_t max_added = -1;
  for (tok::AddedToken& t : tokens) {
    if (const auto it = assigned.find(t.content); it != assigned.end()) {
      t.id = it->second;
    } else if (const auto v = vocab.find(t.content); v != vocab.end()) {
      t.id = v->second;
    } else if (max_added < 0) {
      t.id = vocab_len;
    } else {
      t.id = max_added >= vocab_len || vocab_len == 0 ? max_added + 1 : vocab_len;
    }
    assigned.emplace(t.content, t.id);
    max_added = std::max(max_added, t.id);
  }
}

// The single-sequence ids a post-processor puts before and after the text.
Status PostProcessor(const json& j, std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (j.is_null()) return OkStatus();
  ASTR_ASSIGN_OR_RETURN(std::string type, tok::JsonType(j, "post_processor"));
  if (type == "TemplateProcessing") return TemplateProcessing(j, prefix, suffix);
  if (type == "ByteLevel") return OkStatus();  // only adjusts offsets
  if (type == "Sequence") {
    ASTR_ASSIGN_OR_RETURN(const json* list, tok::JsonArray(j, "processors", "Sequence"));
    for (const json& p : *list) ASTR_RETURN_IF_ERROR(PostProcessor(p, prefix, suffix));
    return OkStatus();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto cls = j.find("cls");
    const auto sep = j.find("sep");
    if (cls == j.end() || sep == j.end() || !cls->is_array() || cls->size() != 2 ||
        !sep->is_array() || sep->size() != 2 || !(*cls)[1].is_number_integer() ||
        !(*sep)[1].is_number_integer()) {
      return InvalidArgumentError(type + " post-processor: cls and sep must be [token, id]");
    }
    prefix.push_back((*cls)[1].get<int32_t>());
    suffix.insert(suffix.begin(), (*sep)[1].get<int32_t>());
    return OkStatus();
  }
  return UnimplementedError("post_processor type \"" + type + "\" is not supported");
}

// The id a token string has once loaded: an added token (ids as AssignAddedTokenIds gave them),
// else the model vocabulary; -1 if absent or empty.
int32_t ResolveToken(const std::vector<tok::AddedToken>& added, const tok::Model& model,
                     const std::string& content) {
  if (content.empty()) return -1;
  for (const tok::AddedToken& t : added) {
    if (t.content == content) return t.id;
  }
  const auto it = model.token_to_id().find(content);
  return it == model.token_to_id().end() ? -1 : it->second;
}

// What the config files next to tokenizer.json say about special tokens.
struct ConfigSpecials {
  std::vector<int32_t> eos;
  int32_t bos = -1;
  // Set for tokenizer classes whose transformers implementation rebuilds the post-processor from
  // add_bos_token / add_eos_token (LlamaTokenizerFast and its relatives).
  bool override_post_processor = false;
  std::vector<int32_t> prefix, suffix;
};

StatusOr<json> ReadOptionalJsonObject(const fs::path& path) {
  if (!fs::exists(path)) return json::object();
  ASTR_ASSIGN_OR_RETURN(json j, ReadJsonFile(path.string()));
  if (!j.is_object()) return InvalidArgumentError(path.string() + ": not a JSON object");
  return j;
}

// EOS ids: generation_config.json's eos_token_id (int or list), else tokenizer_config.json's
// eos_token, else special_tokens_map.json's; BOS likewise. Missing files are fine; malformed ones
// are errors.
StatusOr<ConfigSpecials> ReadConfigSpecials(const fs::path& dir,
                                            const std::vector<tok::AddedToken>& added,
                                            const tok::Model& model) {
  ConfigSpecials out;
  const fs::path gen_path = dir / "generation_config.json";
  ASTR_ASSIGN_OR_RETURN(json gen, ReadOptionalJsonObject(gen_path));
  ASTR_ASSIGN_OR_RETURN(HfTokenizerConfig hf, ReadHfTokenizerConfig(dir / "tokenizer_config.json"));
  const nlohmann::ordered_json& cfg = hf.config;
  const json e = gen.value("eos_token_id", json());
  if (e.is_number_integer()) {
    out.eos.push_back(e.get<int32_t>());
  } else if (e.is_array()) {
    for (const json& id : e) {
      if (!id.is_number_integer()) {
        return InvalidArgumentError(gen_path.string() + ": eos_token_id must hold integers");
      }
      out.eos.push_back(id.get<int32_t>());
    }
  } else if (!e.is_null()) {
    return InvalidArgumentError(gen_path.string() + ": eos_token_id must be an integer or a list");
  }
  if (const json b = gen.value("bos_token_id", json()); b.is_number_integer()) {
    out.bos = b.get<int32_t>();
  }
  const int32_t eos_token = ResolveToken(added, model, hf.tokens.eos.value_or(""));
  const int32_t bos_token = ResolveToken(added, model, hf.tokens.bos.value_or(""));
  if (out.eos.empty() && eos_token >= 0) out.eos.push_back(eos_token);
  if (out.bos < 0) out.bos = bos_token;

  const nlohmann::ordered_json cls_json = cfg.value("tokenizer_class", nlohmann::ordered_json());
  const std::string cls = cls_json.is_string() ? cls_json.get<std::string>() : "";
  for (const char* family : {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"}) {
    if (cls == family || cls == std::string(family) + "Fast") out.override_post_processor = true;
  }
  if (out.override_post_processor) {
    const nlohmann::ordered_json add_bos = cfg.value("add_bos_token", nlohmann::ordered_json(true));
    const nlohmann::ordered_json add_eos =
        cfg.value("add_eos_token", nlohmann::ordered_json(false));
    if (!add_bos.is_boolean() || !add_eos.is_boolean()) {
      return InvalidArgumentError((dir / "tokenizer_config.json").string() +
                                  ": add_bos_token / add_eos_token must be true or false");
    }
    if (add_bos.get<bool>() && bos_token >= 0) out.prefix.push_back(bos_token);
    if (add_eos.get<bool>() && eos_token >= 0) out.suffix.push_back(eos_token);
  }
  return out;
}

// `dir`: the model folder whose config files give the special ids; null for none.
StatusOr<std::shared_ptr<const Tokenizer>> BuildHf(const json& j, const std::string& source,
                                                   const fs::path* dir) {
  auto fail = [&](const Status& s) { return Status(s.code(), source + ": " + s.message()); };
  if (!j.is_object()) return InvalidArgumentError(source + ": not a JSON object");
  if (!j.contains("model")) return InvalidArgumentError(source + ": no \"model\" field");
  TokenizerBuilder b;
  auto model = ModelFromJson(j["model"]);
  if (!model.ok()) return fail(model.status());
  const tok::Model* model_ptr = model->get();
  b.set_model(std::move(*model));
  auto normalizer = tok::NormalizerFromJson(j.value("normalizer", json()));
  if (!normalizer.ok()) return fail(normalizer.status());
  b.set_normalizer(std::move(*normalizer));
  const json pre_json = j.value("pre_tokenizer", json());
  auto pre = tok::PreTokenizerFromJson(pre_json);
  if (!pre.ok()) return fail(pre.status());
  b.set_pre_tokenizer(std::move(*pre));
  auto decoder = tok::DecoderFromJson(j.value("decoder", json()));
  if (!decoder.ok()) return fail(decoder.status());
  b.set_decoder(std::move(*decoder));
  std::vector<int32_t> prefix, suffix;
  if (Status s = PostProcessor(j.value("post_processor", json()), prefix, suffix); !s.ok()) {
    return fail(s);
  }
  b.set_post_processor(std::move(prefix), std::move(suffix));
  auto added = AddedTokensFromJson(j.value("added_tokens", json()));
  if (!added.ok()) return fail(added.status());
  AssignAddedTokenIds(*model_ptr, *added);
  const bool byte_level = pre_json.dump().find("\"ByteLevel\"") != std::string::npos;
  b.set_kind(byte_level ? "BPE (byte-level)" : "BPE");
  if (dir != nullptr) {
    ASTR_ASSIGN_OR_RETURN(ConfigSpecials specials, ReadConfigSpecials(*dir, *added, *model_ptr));
    b.set_eos_ids(std::move(specials.eos));
    b.set_bos_id(specials.bos);
    if (specials.override_post_processor) {
      b.set_post_processor(std::move(specials.prefix), std::move(specials.suffix));
    }
  }
  for (tok::AddedToken& t : *added) b.add_token(std::move(t));
  return b.Build(source);
}

// BuildHf, with any JSON of a type it does not expect (a boolean that is a string, an id that is
// an object: nlohmann's type_error and out_of_range) refused as INVALID_ARGUMENT naming the file,
// never thrown to the caller (a fuzz finding: it ended the process).
StatusOr<std::shared_ptr<const Tokenizer>> BuildHfOrError(const json& j, const std::string& source,
                                                          const fs::path* dir) {
  try {
    return BuildHf(j, source, dir);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": unexpected JSON in the tokenizer: " + e.what());
  }
}

}  // namespace

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromHfJson(const json& j,
                                                                 const std::string& source) {
  return BuildHfOrError(j, source, nullptr);
}

StatusOr<std::shared_ptr<const Tokenizer>> LoadHfTokenizer(const std::string& path) {
  const bool is_dir = fs::is_directory(path);
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  const fs::path file = is_dir ? dir / "tokenizer.json" : fs::path(path);
  if (!fs::exists(file)) {
    return NotFoundError(path + ": no tokenizer.json (tokenizer.model / vocab.json + merges.txt " +
                         "alone are not supported)");
  }
  ASTR_ASSIGN_OR_RETURN(json j, ReadJsonFile(file.string()));
  return BuildHfOrError(j, file.string(), &dir);
}

}  // namespace astr::tok
