// Python's text formatting of values, byte for byte: json.dumps (as transformers' `tojson` filter
// calls it), `str % args`, str.format and format(value, spec).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/base/status.h"
#include "common/chat/jinja/value.h"

namespace astr::jinja {

// json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  // nullopt: everything on one line; otherwise the string repeated once per nesting level.
  std::optional<std::string> indent;
  // Python's defaults: (", ", ": ") without indent, (",", ": ") with one.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};
// TypeError text ("Object of type generator is not JSON serializable") for values JSON cannot
// hold.
StatusOr<std::string> JsonDumps(const Value& value, const JsonDumpOptions& options);
// The JSON string literal json.dumps writes for `s`.
std::string JsonQuote(std::string_view s, bool ensure_ascii);

// `fmt % args`: a tuple supplies positional arguments, a dict named ones, anything else is the
// single argument.
StatusOr<std::string> PercentFormat(std::string_view fmt, const Value& args);

// format(value, spec): Python's format-spec mini language for str, int, float and bool.
StatusOr<std::string> FormatValue(const Value& value, std::string_view spec);

// str.format(*args, **kwargs). `get_attr` resolves `{0.name}` fields (the sandbox's getattr).
using AttrLookup = std::function<StatusOr<Value>(const Value& obj, const Value& key, bool attr)>;
StatusOr<std::string> StrFormat(std::string_view fmt, const CallArgs& args,
                                const AttrLookup& get_attr);

}  // namespace astr::jinja
