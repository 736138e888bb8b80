// Builds the statement / expression tree from tokens with jinja2's grammar and operator
// precedence (parser.py), including the loopcontrols extension ({% break %}, {% continue %}) and
// transformers' {% generation %} block.
#pragma once

#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/chat/jinja/ast.h"
#include "common/chat/jinja/lexer.h"

namespace astr::jinja {

// Errors are InvalidArgument "line L, column C: <what>".
StatusOr<Program> ParseTemplate(std::string_view source, const LexerOptions& options);

}  // namespace astr::jinja
