// Builds the statement / expression tree from tokens with jinja2's grammar and operator
// precedence (parser.py), including the loopcontrols extension ({% break %}, {% continue %}) and
// transformers' {% generation %} block.
#pragma once

#include <string_view>
#include <vector>

#include "common/jinja/ast.h"
#include "common/jinja/lexer.h"
#include "common/status.h"

namespace astr::jinja {

// Errors are InvalidArgument "line L, column C: <what>".
StatusOr<Program> ParseTemplate(std::string_view source, const LexerOptions& options);

}  // namespace astr::jinja
