// Pieces of the Prometheus text exposition format 0.0.4 that the families and the registry write:
// numbers, escaped label values and HELP text, label sets.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace astr::metrics::text {

// A sample value: integers (|v| < 2^53) without a fraction ("42"), other finite values in the
// shortest form that reads back exactly ("0.25", "0.0005", "1e-09"), and "+Inf", "-Inf", "NaN".
void AppendNumber(double v, std::string* out);
// `v` with backslash, double quote and newline escaped (\\, \", \n).
void AppendLabelValue(std::string_view v, std::string* out);
// HELP text with backslash and newline escaped.
void AppendHelp(std::string_view v, std::string* out);
// `{a="x",b="y"}`, plus `le="<le>"` last when `le` is not empty; nothing for no labels at all.
void AppendLabels(std::span<const std::string> names, std::span<const std::string> values,
                  std::string_view le, std::string* out);

// Whether `name` is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or label name
// ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", which Prometheus reserves).
bool ValidMetricName(std::string_view name);
bool ValidLabelName(std::string_view name);

}  // namespace astr::metrics::text
