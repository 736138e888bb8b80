// `astr chat-template`: renders a conversation with a model's chat template (or a template file)
// and prints the prompt text exactly, as transformers' apply_chat_template(tokenize=False) would.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/base/file_util.h"
#include "common/base/flags.h"
#include "common/chat/chat_template.h"
#include "tools/command.h"

namespace astr {
namespace {

using ojson = nlohmann::ordered_json;

// A messages file: a JSON array of messages, or {"messages": [...], "tools": [...], <variable>:
// <value>, ...} where every other key becomes a template variable.
Status ReadMessagesFile(const std::string& path, chat::ChatInputs* inputs) {
  ASTR_ASSIGN_OR_RETURN(ojson doc, ReadOrderedJsonFile(path));
  if (doc.is_array()) {
    inputs->messages = std::move(doc);
    return OkStatus();
  }
  if (!doc.is_object() || !doc.contains("messages")) {
    return InvalidArgumentError(
        path + ": expected a JSON array of messages or an object with a \"messages\" array");
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    if (key == "messages") {
      if (!it->is_array()) return InvalidArgumentError(path + ": \"messages\" must be an array");
      inputs->messages = *it;
    } else if (key == "tools") {
      if (!it->is_array() && !it->is_null()) {
        return InvalidArgumentError(path + ": \"tools\" must be an array");
      }
      if (it->is_array()) inputs->tools = *it;
    } else if (key == "add_generation_prompt") {
      if (!it->is_boolean()) {
        return InvalidArgumentError(path + ": \"add_generation_prompt\" must be true or false");
      }
      inputs->add_generation_prompt = it->get<bool>();
    } else {
      inputs->extra[key] = *it;
    }
  }
  return OkStatus();
}

Status ReadToolsFile(const std::string& path, chat::ChatInputs* inputs) {
  ASTR_ASSIGN_OR_RETURN(ojson doc, ReadOrderedJsonFile(path));
  if (doc.is_object() && doc.contains("tools")) doc = doc["tools"];
  if (!doc.is_array()) {
    return InvalidArgumentError(path + ": expected a JSON array of tools (or {\"tools\": [...]})");
  }
  inputs->tools = std::move(doc);
  return OkStatus();
}

struct Flags {
  std::string model;
  std::string messages;
  std::string template_file;
  std::string template_name;
  std::string tools;
  bool add_generation_prompt = false;
};

StatusOr<chat::ChatTemplate> LoadTemplate(const Flags& f) {
  if (f.template_file.empty()) return chat::ChatTemplate::Load(f.model, f.template_name);
  ASTR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(f.template_file));
  tok::ChatSpecialTokens tokens;
  if (f.model.empty()) {
    tokens.bos = "";
    tokens.eos = "";
  } else {
    ASTR_ASSIGN_OR_RETURN(chat::ChatTemplateSource source, chat::ReadChatTemplateSource(f.model));
    tokens = source.tokens;
  }
  return chat::ChatTemplate::FromString(text, tokens, f.template_file);
}

StatusOr<std::string> Run(const Flags& f) {
  chat::ChatInputs inputs;
  ASTR_RETURN_IF_ERROR(ReadMessagesFile(f.messages, &inputs));
  if (!f.tools.empty()) ASTR_RETURN_IF_ERROR(ReadToolsFile(f.tools, &inputs));
  if (f.add_generation_prompt) inputs.add_generation_prompt = true;
  ASTR_ASSIGN_OR_RETURN(chat::ChatTemplate tmpl, LoadTemplate(f));
  return tmpl.Render(inputs);
}

int RunChatTemplate(int argc, const char* const* argv) {
  Flags f;
  FlagSet fs(argv[0], "Render a conversation with a model's chat template and print the prompt.");
  fs.String("model", &f.model,
            "Model: a Hugging Face folder, its tokenizer_config.json, or a .gguf file. Supplies "
            "the chat template and the special tokens (bos_token, eos_token, ...). May be left out "
            "with --template; bos_token and eos_token are then empty.");
  fs.String("messages", &f.messages,
            "JSON file: an array of messages, or an object {\"messages\": [...], \"tools\": "
            "[...], <name>: <value>, ...} whose other keys become template variables "
            "(documents, date_string, enable_thinking, ...).",
            /*required=*/true);
  fs.Bool("add-generation-prompt", &f.add_generation_prompt,
          "End with the assistant turn header (add_generation_prompt=True).");
  fs.String("template", &f.template_file,
            "Jinja file to use instead of the model's chat template.");
  fs.String("template-name", &f.template_name,
            "Named template of the model (e.g. tool_use, rag); default: \"default\", or "
            "\"tool_use\" when tools are given.");
  fs.String("tools", &f.tools,
            "JSON file with an array of tool schemas (overrides \"tools\" in --messages).");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (f.model.empty() && f.template_file.empty()) {
    std::fprintf(stderr, "%s: --model is required unless --template is given (see --help)\n",
                 argv[0]);
    return 2;
  }
  if (!f.template_name.empty() && !f.template_file.empty()) {
    std::fprintf(stderr,
                 "%s: --template-name picks a model template; it cannot be used with "
                 "--template\n",
                 argv[0]);
    return 2;
  }
  StatusOr<std::string> text = Run(f);
  if (!text.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], text.status().ToString().c_str());
    return 1;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

ASTR_REGISTER_COMMAND("chat-template", "Render a conversation with a model's chat template.",
                      RunChatTemplate);

}  // namespace astr
