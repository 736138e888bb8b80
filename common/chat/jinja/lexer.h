// Splits template source into tokens exactly as jinja2's lexer does for an environment with
// trim_blocks / lstrip_blocks: newline normalization, the dropped final newline, `-` / `+`
// whitespace control, comments, {% raw %} blocks, and the expression tokens inside tags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace astr::jinja {

enum class TokenType : uint8_t {
  kData,           // template text between tags
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,  // text holds the operator: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;  // data, name, unescaped string literal or operator
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors are InvalidArgument "line L, column C: <what>".
StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options);

// "name 'x'", "end of print statement", ... as jinja2's describe_token words it.
std::string DescribeToken(const Token& token);

}  // namespace astr::jinja
