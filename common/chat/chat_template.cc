#include "common/chat/chat_template.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base/file_util.h"
#include "common/model/gguf.h"
#include "common/text/tokenizer/hf_tokenizer_config.h"

namespace astr::chat {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kNowEnv = "ASTR_CHAT_TEMPLATE_NOW";

Status ReadHfTemplates(const ojson& config, const std::string& config_path,
                       ChatTemplateSource* out) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return OkStatus();
  const ojson& ct = config["chat_template"];
  if (ct.is_string()) {
    out->templates.emplace_back("default", ct.get<std::string>());
    return OkStatus();
  }
  if (!ct.is_array()) {
    return InvalidArgumentError(config_path +
                                ": chat_template must be a string or a list of {name, template}");
  }
  for (size_t i = 0; i < ct.size(); ++i) {
    const ojson& e = ct[i];
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
        !e.contains("template") || !e["template"].is_string()) {
      return InvalidArgumentError(config_path + ": chat_template[" + std::to_string(i) +
                                  "] must be an object with string \"name\" and \"template\"");
    }
    out->templates.emplace_back(e["name"].get<std::string>(), e["template"].get<std::string>());
  }
  return OkStatus();
}

StatusOr<ChatTemplateSource> ReadHf(const fs::path& config_path) {
  ChatTemplateSource out;
  const fs::path dir = config_path.parent_path();
  out.origin = config_path.string();
  ASTR_ASSIGN_OR_RETURN(tok::HfTokenizerConfig hf, tok::ReadHfTokenizerConfig(config_path));
  const ojson& config = hf.config;
  out.tokens = std::move(hf.tokens);
  // transformers lets chat_template.jinja replace the config's template.
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    ASTR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(jinja_path.string()));
    out.origin = jinja_path.string();
    out.templates.emplace_back("default", std::move(text));
  } else {
    ASTR_RETURN_IF_ERROR(ReadHfTemplates(config, out.origin, &out));
  }
  return out;
}

StatusOr<ChatTemplateSource> ReadGguf(const std::string& path) {
  ASTR_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> g, model::GgufFile::Open(path));
  ChatTemplateSource out;
  out.origin = path;
  const std::string prefix = "tokenizer.chat_template";
  for (const auto& [key, value] : g->metadata()) {
    if (key.rfind(prefix, 0) != 0 || value.type != model::GgufType::kString) continue;
    if (key == prefix) {
      out.templates.emplace_back("default", value.s);
    } else if (key.size() > prefix.size() + 1 && key[prefix.size()] == '.') {
      out.templates.emplace_back(key.substr(prefix.size() + 1), value.s);
    }
  }
  const model::GgufValue* tokens = g->Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type != model::GgufType::kArray) return out;
  const std::pair<const char*, std::optional<std::string> tok::ChatSpecialTokens::*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &tok::ChatSpecialTokens::bos},
      {"tokenizer.ggml.eos_token_id", &tok::ChatSpecialTokens::eos},
      {"tokenizer.ggml.unknown_token_id", &tok::ChatSpecialTokens::unk},
      {"tokenizer.ggml.seperator_token_id", &tok::ChatSpecialTokens::sep},
      {"tokenizer.ggml.padding_token_id", &tok::ChatSpecialTokens::pad},
      {"tokenizer.ggml.cls_token_id", &tok::ChatSpecialTokens::cls},
      {"tokenizer.ggml.mask_token_id", &tok::ChatSpecialTokens::mask},
  };
  for (const auto& [key, member] : ids) {
    if (g->Find(key) == nullptr) continue;
    ASTR_ASSIGN_OR_RETURN(int64_t id, g->GetInt(key));
    // Converters write -1 (often as u32 0xFFFFFFFF) for "no such token": leave it undefined.
    if (id < 0 || id >= static_cast<int64_t>(tokens->array.size())) continue;
    out.tokens.*member = tokens->array[static_cast<size_t>(id)].s;
  }
  return out;
}

bool IsGguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}

std::string JoinNames(const std::vector<std::pair<std::string, std::string>>& templates) {
  std::string out;
  for (const auto& [name, unused] : templates) out += (out.empty() ? "" : ", ") + name;
  return out;
}

StatusOr<std::optional<int64_t>> NowFromEnvironment() {
  const char* env = std::getenv(kNowEnv);
  if (env == nullptr || *env == '\0') return std::optional<int64_t>();
  char* end = nullptr;
  int64_t v = std::strtoll(env, &end, 10);
  if (*end != '\0') {
    return InvalidArgumentError(std::string(kNowEnv) + "=" + env +
                                ": expected unix seconds (an integer)");
  }
  return std::optional<int64_t>(v);
}

}  // namespace

StatusOr<ChatTemplateSource> ReadChatTemplateSource(const std::string& model_path) {
  std::error_code ec;
  fs::path p(model_path);
  if (fs::is_directory(p, ec)) {
    fs::path config = p / "tokenizer_config.json";
    if (!fs::exists(config, ec)) {
      // A folder with only chat_template.jinja still has a template.
      if (fs::exists(p / "chat_template.jinja", ec)) {
        ChatTemplateSource out;
        out.origin = (p / "chat_template.jinja").string();
        ASTR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(out.origin));
        out.templates.emplace_back("default", std::move(text));
        return out;
      }
      return NotFoundError(model_path + ": no tokenizer_config.json in this folder");
    }
    return ReadHf(config);
  }
  if (!fs::exists(p, ec)) return NotFoundError(model_path + ": no such file or folder");
  if (IsGguf(model_path)) return ReadGguf(model_path);
  return ReadHf(p);
}

StatusOr<ChatTemplate> ChatTemplate::Load(const std::string& model_path, const std::string& name) {
  ASTR_ASSIGN_OR_RETURN(ChatTemplateSource source, ReadChatTemplateSource(model_path));
  return FromSource(source, name);
}

StatusOr<ChatTemplate> ChatTemplate::LoadOrOverride(const std::string& model_path,
                                                    const std::string& template_file) {
  if (template_file.empty()) return Load(model_path);
  StatusOr<std::string> text = ReadFileToString(template_file);
  if (!text.ok()) return text.status().WithContext("--chat-template");
  tok::ChatSpecialTokens tokens;
  if (StatusOr<ChatTemplateSource> source = ReadChatTemplateSource(model_path); source.ok()) {
    tokens = source->tokens;
  }
  return FromString(*text, std::move(tokens), template_file);
}

StatusOr<ChatTemplate> ChatTemplate::FromSource(const ChatTemplateSource& source,
                                                const std::string& name) {
  if (source.templates.empty()) {
    return NotFoundError(source.origin + ": the model has no chat template");
  }
  std::vector<const std::pair<std::string, std::string>*> chosen;
  for (const auto& entry : source.templates) {
    bool wanted = name.empty() ? (source.templates.size() == 1 || entry.first == "default" ||
                                  entry.first == "tool_use")
                               : entry.first == name;
    if (wanted) chosen.push_back(&entry);
  }
  if (chosen.empty()) {
    if (name.empty()) {
      return NotFoundError(source.origin +
                           ": the model has several chat templates and none is named "
                           "\"default\"; pick one of: " +
                           JoinNames(source.templates));
    }
    return NotFoundError(source.origin + ": no chat template named \"" + name +
                         "\"; available: " + JoinNames(source.templates));
  }
  ChatTemplate t;
  t.origin_ = source.origin;
  t.tokens_ = source.tokens;
  t.by_rule_ = name.empty() && source.templates.size() > 1;
  for (const auto* entry : chosen) {
    StatusOr<jinja::Template> parsed = jinja::Template::Parse(entry->second);
    if (!parsed.ok()) {
      return parsed.status().WithContext(source.origin + ": chat template \"" + entry->first +
                                         "\"");
    }
    t.candidates_.push_back({entry->first, std::move(*parsed)});
    t.source_ += entry->second;
  }
  return t;
}

StatusOr<ChatTemplate> ChatTemplate::FromString(std::string_view source,
                                                tok::ChatSpecialTokens tokens, std::string origin) {
  StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return parsed.status().WithContext(origin);
  ChatTemplate t;
  t.origin_ = std::move(origin);
  t.tokens_ = std::move(tokens);
  t.candidates_.push_back({"default", std::move(*parsed)});
  t.source_ = std::string(source);
  return t;
}

const ChatTemplate::Candidate* ChatTemplate::Select(const ChatInputs& inputs) const {
  if (candidates_.size() == 1 && !by_rule_) return &candidates_.front();
  if (inputs.tools) {
    for (const Candidate& c : candidates_) {
      if (c.name == "tool_use") return &c;
    }
  }
  for (const Candidate& c : candidates_) {
    if (c.name == "default") return &c;
  }
  return nullptr;
}

StatusOr<std::string> ChatTemplate::Render(const ChatInputs& inputs) const {
  if (!inputs.messages.is_array()) {
    return InvalidArgumentError("messages must be a JSON array");
  }
  if (inputs.tools && !inputs.tools->is_array() && !inputs.tools->is_null()) {
    return InvalidArgumentError("tools must be a JSON array");
  }
  if (!inputs.extra.is_object()) return InvalidArgumentError("extra variables must be an object");
  ojson context = ojson::object();
  context["messages"] = inputs.messages;
  if (inputs.tools) context["tools"] = *inputs.tools;
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  for (const tok::SpecialTokenField& f : tok::kSpecialTokenFields) {
    if (tokens_.*f.member) context[f.key] = *(tokens_.*f.member);
  }
  if (!tokens_.additional.empty()) context["additional_special_tokens"] = tokens_.additional;
  for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it) {
    if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt") {
      return InvalidArgumentError("extra template variable \"" + it.key() +
                                  "\" would replace a chat input of the same name");
    }
    context[it.key()] = it.value();
  }
  jinja::RenderOptions options;
  options.now_unix_seconds = inputs.now_unix_seconds;
  if (!options.now_unix_seconds) {
    ASTR_ASSIGN_OR_RETURN(options.now_unix_seconds, NowFromEnvironment());
  }
  const Candidate* chosen = Select(inputs);
  if (chosen == nullptr) {
    return NotFoundError(origin_ +
                         ": the model's chat templates have no \"default\" (only \"tool_use\", "
                         "which needs tools); pick one by name");
  }
  StatusOr<std::string> text = chosen->tmpl.Render(context, options);
  if (!text.ok()) return text.status().WithContext(origin_);
  return text;
}

}  // namespace astr::chat
