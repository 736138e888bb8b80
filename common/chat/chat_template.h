// A model's chat template: where it is found, and rendering a conversation with it the way
// transformers' `tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=...,
// **kwargs)` does (see docs/chat_templates.md).
//
// Sources, for a model path that is a Hugging Face folder, its tokenizer_config.json, or a .gguf:
//   - Hugging Face: chat_template.jinja in the folder (which transformers lets override the
//     config), else tokenizer_config.json "chat_template": a string, or a list of
//     {"name", "template"}. Special tokens (bos_token, eos_token, unk_token, pad_token, ...) come
//     from tokenizer_config.json as a string, an AddedToken object {"content": ...} or null; a
//     token the config does not mention is taken from special_tokens_map.json.
//   - GGUF: metadata tokenizer.chat_template (named ones: tokenizer.chat_template.<name>);
//     special tokens are tokenizer.ggml.tokens[tokenizer.ggml.bos_token_id] and so on (an id
//     outside the vocabulary, such as the -1 converters write for "none", leaves it unset).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/chat/jinja/template.h"
#include "common/text/tokenizer/hf_tokenizer_config.h"

namespace astr::chat {

// What a model file says about chat formatting.
struct ChatTemplateSource {
  std::string origin;  // the file the templates were read from, for messages
  // (name, template source) in file order; a single unnamed template is called "default".
  std::vector<std::pair<std::string, std::string>> templates;
  tok::ChatSpecialTokens tokens;
};

// Reads templates and special tokens from a Hugging Face folder, a tokenizer_config.json or a
// .gguf file. A model without a template gives an empty `templates` list (not an error): its
// special tokens are still useful with a template from elsewhere.
StatusOr<ChatTemplateSource> ReadChatTemplateSource(const std::string& model_path);

// One conversation to render.
struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // JSON array of tool schemas; when absent the template's `tools` is undefined.
  std::optional<nlohmann::ordered_json> tools;
  bool add_generation_prompt = false;
  // Further template variables (documents, date_string, enable_thinking, ...). They override
  // the special tokens of the same name, as transformers' **kwargs do.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // Clock of strftime_now(), seconds since the epoch; nullopt: $ASTR_CHAT_TEMPLATE_NOW (unix
  // seconds, for reproducible tests) if set, else the system clock.
  std::optional<int64_t> now_unix_seconds;
};

class ChatTemplate {
 public:
  // The template of the model at `model_path`. `name` picks a named template; "" picks as
  // transformers does: the only template, else "tool_use" when tools are given and it exists,
  // else "default". Errors: NotFound when the model has no template (or none by that name, the
  // message lists the available names), InvalidArgument when the template does not parse.
  static StatusOr<ChatTemplate> Load(const std::string& model_path, const std::string& name = "");
  static StatusOr<ChatTemplate> FromSource(const ChatTemplateSource& source,
                                           const std::string& name = "");
  // The model's template, or with `template_file` non-empty that file's (--chat-template: a
  // model without one, or another format), rendered with the model's special tokens (none when
  // the model's files name none). A missing file is NotFound, a bad template InvalidArgument,
  // both naming the file.
  static StatusOr<ChatTemplate> LoadOrOverride(const std::string& model_path,
                                               const std::string& template_file);
  // A template given as text (e.g. `--template FILE`), with the special tokens to expose.
  static StatusOr<ChatTemplate> FromString(std::string_view source, tok::ChatSpecialTokens tokens,
                                           std::string origin);

  // Renders the conversation. Render errors (including the template's raise_exception) are
  // InvalidArgument "<origin>: line N: <message>"; a template that passes its render budget
  // (time, memory, nesting: jinja::RenderOptions' defaults) is ResourceExhausted
  // "<origin>: line L, column C: <what> (<limit>)".
  StatusOr<std::string> Render(const ChatInputs& inputs) const;

  const std::string& origin() const { return origin_; }
  // The Jinja source of every candidate, joined (what it writes, e.g. its tool-call markers).
  const std::string& source() const { return source_; }
  const tok::ChatSpecialTokens& tokens() const { return tokens_; }

 private:
  struct Candidate {
    std::string name;
    jinja::Template tmpl;
  };
  ChatTemplate() = default;
  // The template used for `inputs` (tool_use when tools are given and no name was asked for);
  // nullptr when the rule finds none.
  const Candidate* Select(const ChatInputs& inputs) const;

  std::string origin_;
  std::string source_;
  tok::ChatSpecialTokens tokens_;
  std::vector<Candidate> candidates_;  // the asked-for template, or default / tool_use
  bool by_rule_ = false;  // candidates_ came from transformers' default / tool_use rule
};

}  // namespace astr::chat
