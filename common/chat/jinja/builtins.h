// Registry of the built-in filters, tests, global functions and str / list / dict methods.
#pragma once

#include <string_view>

#include "common/base/status.h"
#include "common/chat/jinja/value.h"

namespace astr::jinja {

class Interpreter;

bool IsBuiltinFilter(std::string_view name);
bool IsBuiltinTest(std::string_view name);

// Applies filter `name` (jinja2's builtins plus transformers' tojson) to `value`.
StatusOr<Value> CallFilter(Interpreter& interp, std::string_view name, const Value& value,
                           const CallArgs& args);
// Evaluates test `name` on `value`.
StatusOr<bool> CallTest(Interpreter& interp, std::string_view name, const Value& value,
                        const CallArgs& args);

// Python attribute lookup on str / list / tuple / dict values: a bound method, an unsafe-attribute
// Undefined (for list.append & co. under the immutable sandbox), or nullopt when the type has no
// such attribute.
std::optional<Value> BuiltinAttribute(const Value& obj, std::string_view name);

}  // namespace astr::jinja
