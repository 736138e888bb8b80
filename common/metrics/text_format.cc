#include "common/metrics/text_format.h"

#include <charconv>
#include <cmath>

namespace astr::metrics::text {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

void AppendNumber(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
    return;
  }
  if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
    return;
  }
  char buf[32];
  constexpr double kExactInt = 9007199254740992.0;  // 2^53
  std::to_chars_result r;
  if (v == std::trunc(v) && std::fabs(v) < kExactInt) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v));
  } else {
    // The shortest form that reads back exactly, fixed unless the exponent is below -4 (0.0005,
    // 1e-05) or beyond the digits.
    r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  }
  out->append(buf, r.ptr);
}

void AppendLabelValue(std::string_view v, std::string* out) {
  for (char c : v) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '"':
        out->append("\\\"");
        break;
      case '\n':
        out->append("\\n");
        break;
      default:
        out->push_back(c);
    }
  }
}

void AppendHelp(std::string_view v, std::string* out) {
  for (char c : v) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

void AppendLabels(std::span<const std::string> names, std::span<const std::string> values,
                  std::string_view le, std::string* out) {
  if (names.empty() && le.empty()) return;
  out->push_back('{');
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append(names[i]);
    out->append("=\"");
    AppendLabelValue(values[i], out);
    out->push_back('"');
  }
  if (!le.empty()) {
    if (!names.empty()) out->push_back(',');
    out->append("le=\"");
    out->append(le);
    out->push_back('"');
  }
  out->push_back('}');
}

bool ValidMetricName(std::string_view name) {
  if (name.empty() || !(IsAlpha(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c) && c != ':') return false;
  }
  return true;
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || !IsAlpha(name[0]) || name.starts_with("__")) return false;
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c)) return false;
  }
  return true;
}

}  // namespace astr::metrics::text
