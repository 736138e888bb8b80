#include "common/chat/jinja/template.h"

#include "common/chat/jinja/ast.h"
#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/parser.h"

namespace astr::jinja {

StatusOr<Template> Template::Parse(std::string_view source, Options options) {
  LexerOptions lexer_options;
  lexer_options.trim_blocks = options.trim_blocks;
  lexer_options.lstrip_blocks = options.lstrip_blocks;
  ASTR_ASSIGN_OR_RETURN(Program program, ParseTemplate(source, lexer_options));
  return Template(std::make_shared<const Program>(std::move(program)));
}

StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                       const RenderOptions& options) const {
  if (!context.is_object()) {
    return InvalidArgumentError("template context must be a JSON object, got " +
                                std::string(context.type_name()));
  }
  InterpreterOptions interp_options;
  interp_options.now_unix_seconds = options.now_unix_seconds;
  interp_options.max_output_bytes = options.max_output_bytes;
  interp_options.max_steps = options.max_steps;
  interp_options.max_bytes = options.max_bytes;
  interp_options.max_depth = options.max_depth;
  Interpreter interp(*program_, interp_options);
  return interp.Render(Value::FromJson(context));
}

StatusOr<std::string> Template::Render(const nlohmann::json& context,
                                       const RenderOptions& options) const {
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(context.dump());
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string("template context: ") + e.what());
  }
  return Render(ordered, options);
}

}  // namespace astr::jinja
