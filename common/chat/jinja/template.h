// A Jinja2 template engine for Hugging Face chat templates.
//
// It renders exactly what Python's jinja2 renders in the environment transformers uses for
// chat templates: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
// loopcontrols extension ({% break %}, {% continue %}), transformers' {% generation %} block,
// transformers' `tojson` filter (json.dumps with ensure_ascii=False) and its globals
// `raise_exception(message)` and `strftime_now(format)`. Values follow Python semantics: str
// methods, dict key order, float repr, Undefined. docs/chat_templates.md lists what is supported.
//
//   ASTR_ASSIGN_OR_RETURN(auto t, jinja::Template::Parse(source));
//   ASTR_ASSIGN_OR_RETURN(std::string text, t.Render(context));
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/base/status.h"
#include "common/chat/jinja/render_budget.h"

namespace astr::jinja {

struct Program;

struct Options {
  bool trim_blocks = true;    // drop the first newline after a block tag
  bool lstrip_blocks = true;  // strip spaces / tabs before a block tag at the start of a line
};

// The limits of one render (common/chat/jinja/render_budget.h gives the defaults and why). Passing
// one fails the render with ResourceExhausted "line L, column C: <what> (<limit's name>)" instead
// of exhausting the process' time, memory or stack.
struct RenderOptions {
  // strftime_now()'s clock in seconds since the epoch (local time zone); nullopt reads the
  // system clock.
  std::optional<int64_t> now_unix_seconds;
  // Length of the rendered text.
  size_t max_output_bytes = kDefaultMaxOutputBytes;
  // Steps: statements, expressions and loop iterations evaluated, plus work in proportion to what
  // builtins copy or scan. Bounds the time a render takes (1-2 s at most at the default on a slow
  // core).
  int64_t max_steps = kDefaultMaxSteps;
  // Bytes held at once by the values the render builds (strings, lists, dicts, namespaces, ...)
  // and by its output text. The context's own values are not counted.
  size_t max_bytes = kDefaultMaxBytes;
  // Nesting depth of the containers the render builds.
  int max_depth = kDefaultMaxDepth;
};

class Template {
 public:
  // Parse errors: InvalidArgument "line L, column C: <what>".
  static StatusOr<Template> Parse(std::string_view source, Options options = {});

  // Render is const and may run concurrently on one Template.
  // `context`: a JSON object of template variables (messages, tools, add_generation_prompt,
  // bos_token, ...). Object key order is kept: Python dicts iterate in insertion order, which
  // `tojson` and `|items` expose. Render errors (an undefined value used, a TypeError,
  // raise_exception("msg")) are InvalidArgument "line N: <Python exception text>"; a limit of
  // `options` passed is ResourceExhausted "line L, column C: ...".
  StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                               const RenderOptions& options = {}) const;
  // Same, for a context whose keys are already sorted (nlohmann::json keeps no insertion order).
  StatusOr<std::string> Render(const nlohmann::json& context,
                               const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace astr::jinja
