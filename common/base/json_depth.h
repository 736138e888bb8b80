// A nesting limit for every JSON document astr parses from a client or a file.
//
// nlohmann::json parses and destroys iteratively, but everything that walks a parsed value
// afterwards (conversion into template values, rendering, dump()) recurses once per level, so a
// document nested tens of thousands deep overflows a thread's stack. Every parse of untrusted JSON
// first checks the text's depth with CheckJsonDepth; the walkers may then recurse safely.
#pragma once

#include <string>
#include <string_view>

#include "common/base/status.h"

namespace astr {

// The deepest array/object nesting accepted (a top-level array or object is depth 1). Real
// documents (tokenizer.json, tool schemas, chat messages) stay far below it.
inline constexpr int kMaxJsonDepth = 128;

// Nesting depth of the arrays and objects in `text` (brackets inside strings are skipped); stops
// counting, returning max_depth + 1, as soon as the text goes deeper than `max_depth`. Text that
// is not JSON still gets a number; the parser reports its errors.
int JsonNestingDepth(std::string_view text, int max_depth = kMaxJsonDepth);

// InvalidArgument "<what>: JSON nested deeper than <max_depth> levels (at byte N)" when `text`
// goes deeper than `max_depth`.
Status CheckJsonDepth(std::string_view text, const std::string& what,
                      int max_depth = kMaxJsonDepth);

}  // namespace astr
