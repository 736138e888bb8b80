#include "common/base/json_depth.h"

namespace astr {
namespace {

// Index of the byte where the nesting first exceeds `max_depth`, or npos.
size_t FirstTooDeep(std::string_view text, int max_depth, int* deepest) {
  int depth = 0;
  *deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > *deepest) *deepest = depth;
        if (depth > max_depth) return i;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return std::string_view::npos;
}

}  // namespace

int JsonNestingDepth(std::string_view text, int max_depth) {
  int deepest = 0;
  FirstTooDeep(text, max_depth, &deepest);
  return deepest;
}

Status CheckJsonDepth(std::string_view text, const std::string& what, int max_depth) {
  int deepest = 0;
  const size_t at = FirstTooDeep(text, max_depth, &deepest);
  if (at == std::string_view::npos) return OkStatus();
  return FieldError(what, ": JSON nested deeper than " + std::to_string(max_depth) +
                              " levels (at byte " + std::to_string(at) + ")");
}

}  // namespace astr
