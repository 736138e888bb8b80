// Python str() and repr() of template values (declared in value.h): float repr, string escaping,
// containers.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"
#include "common/chat/jinja/value.h"

namespace astr::jinja {
namespace {

// Python's escape of a non-printable code point: backslash and x, u or U with 2, 4 or 8
// lower-case hex digits; by hand, as snprintf made the repr of text full of control characters
// slow.
std::string HexEscape(char32_t c) {
  static constexpr char kHex[] = "0123456789abcdef";
  const int digits = c < 0x100 ? 2 : c < 0x10000 ? 4 : 8;
  std::string out = digits == 2 ? "\\x" : digits == 4 ? "\\u" : "\\U";
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) out += kHex[(c >> shift) & 0xF];
  return out;
}

// A container's repr can be far longer than the bytes it holds (`[s] * 1000` shares one `s`), so
// the text stops growing once it would not fit the render's budget; the budget is then exhausted
// and the render fails at its next step, discarding the truncated text.
bool ReprFits(const std::string& out) { return ReserveBytes(out.size()).ok(); }

std::string JoinRepr(const ValueList& items) {
  std::string out;
  SpendItems(items.size());
  for (size_t i = 0; i < items.size() && ReprFits(out); ++i) {
    if (i > 0) out += ", ";
    out += Repr(items[i]);
  }
  return out;
}

std::string DictRepr(const DictData& d) {
  std::string out = "{";
  SpendItems(d.items.size());
  for (size_t i = 0; i < d.items.size() && ReprFits(out); ++i) {
    if (i > 0) out += ", ";
    out += Repr(d.items[i].first) + ": " + Repr(d.items[i].second);
  }
  return out + "}";
}

std::string IteratorRepr(const IteratorData& it) {
  if (it.type_name.rfind("dict_", 0) == 0) {
    return it.type_name + "([" + JoinRepr(it.items) + "])";
  }
  return "<" + it.type_name + " object>";
}

}  // namespace

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+17"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  int decpt = exponent + 1;  // digits before the decimal point
  if (decpt > 16 || decpt <= -4) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + ebuf;
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= static_cast<int>(digits.size())) {
    return sign + digits + std::string(decpt - digits.size(), '0') + ".0";
  }
  return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

std::string StrRepr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  GrowthCheck growth;
  for (char32_t c : text::Decode(s)) {
    if (!growth.Fits(out.size())) break;  // the render fails; the text is discarded
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!text::IsPrintable(c)) {
      out += HexEscape(c);
    } else {
      text::AppendUtf8(&out, c);
    }
  }
  out += quote;
  return out;
}

std::string HtmlEscape(std::string_view s) {
  SpendText(s.size());
  std::string out;
  out.reserve(s.size());
  GrowthCheck growth;
  for (char c : s) {
    if (!growth.Fits(out.size())) break;  // the render fails; the text is discarded
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.int_value());
    case Value::Kind::kFloat:
      return FloatRepr(v.number_value());
    case Value::Kind::kString:
      return v.str();
    default:
      return Repr(v);
  }
}

std::string Repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kString:
      return v.is_markup() ? "Markup(" + StrRepr(v.str()) + ")" : StrRepr(v.str());
    case Value::Kind::kList:
      return "[" + JoinRepr(v.items()) + "]";
    case Value::Kind::kTuple:
      return "(" + JoinRepr(v.items()) + (v.items().size() == 1 ? ",)" : ")");
    case Value::Kind::kRange: {
      const int64_t* r = v.range_params();
      return "range(" + std::to_string(r[0]) + ", " + std::to_string(r[1]) +
             (r[2] == 1 ? ")" : ", " + std::to_string(r[2]) + ")");
    }
    case Value::Kind::kDict:
      return DictRepr(v.dict());
    case Value::Kind::kIterator:
      return IteratorRepr(v.iterator());
    case Value::Kind::kObject: {
      const ObjectData& o = v.object();
      if (o.type_name != "Namespace") return o.repr;
      DictData d;
      for (const auto& [k, val] : o.attrs) d.items.emplace_back(Value::Str(k), val);
      return "<Namespace " + DictRepr(d) + ">";
    }
    case Value::Kind::kCallable:
      return v.callable().repr();
    default:
      return ToStr(v);
  }
}

}  // namespace astr::jinja
