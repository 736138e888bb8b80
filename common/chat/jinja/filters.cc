// jinja2's built-in filters on strings and numbers, transformers' tojson, and the filter table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/filter_util.h"
#include "common/chat/jinja/py_format.h"
#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace filters {

StatusOr<Params> Params::Bind(std::string_view fn, const CallArgs& args,
                              std::initializer_list<std::string_view> names) {
  Params p;
  p.values_.assign(names.size(), nullptr);
  if (args.positional.size() > names.size()) {
    return TypeError(std::string(fn) + "() takes from 1 to " + std::to_string(names.size() + 1) +
                     " positional arguments but " + std::to_string(args.positional.size() + 1) +
                     " were given");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) p.values_[i] = &args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) {
      return TypeError(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
    }
    size_t idx = static_cast<size_t>(it - names.begin());
    if (p.values_[idx] != nullptr) {
      return TypeError(std::string(fn) + "() got multiple values for argument '" + k + "'");
    }
    p.values_[idx] = &v;
  }
  return p;
}

StatusOr<Value> GetAttribute(Interpreter& interp, const Value& item, const Value& attribute,
                             const Value* dflt) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string dot = ".";
    for (const std::string& part : text::Split(attribute.str(), &dot, -1, false)) {
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                 [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::Int(std::stoll(part)) : Value::Str(part));
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  Value cur = item;
  for (const Value& part : parts) {
    ASTR_ASSIGN_OR_RETURN(cur, interp.GetItem(cur, part));
    if (dflt != nullptr && cur.is_undefined()) cur = *dflt;
  }
  return cur;
}

Value SoftStr(const Value& v) { return v.is_string() ? v : Value::Str(ToStr(v)); }

Value Generator(ValueList items) {
  return Value::Iterator("generator", std::move(items), false, false);
}

Value IgnoreCase(const Value& v) { return v.is_string() ? Value::Str(text::Lower(v.str())) : v; }

Status StableSort(std::vector<std::pair<Value, Value>>* keyed, bool reverse) {
  Status error;
  std::stable_sort(keyed->begin(), keyed->end(), [&](const auto& x, const auto& y) {
    if (!error.ok()) return false;
    SpendItems(1);
    if (Status budget = BudgetStatus(); !budget.ok()) {
      error = budget;
      return false;
    }
    StatusOr<bool> lt = reverse ? Less(y.first, x.first, "<") : Less(x.first, y.first, "<");
    if (!lt.ok()) {
      error = lt.status();
      return false;
    }
    return *lt;
  });
  return error;
}

namespace {

// Keeps Markup-ness of `like` for a computed string (soft_str(s).upper() and friends).
Value SameKind(const Value& like, std::string s) {
  return like.is_markup() ? Value::Markup(std::move(s)) : Value::Str(std::move(s));
}

StatusOr<Value> ToJson(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(
      Params p, Params::Bind("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions o;
  o.ensure_ascii = p.Flag(0, false);
  if (p.has(1) && !p[1]->is_none()) {
    if (p[1]->is_string()) {
      o.indent = p[1]->str();
    } else if (p[1]->is_integral()) {
      const size_t width = static_cast<size_t>(std::max<int64_t>(0, p[1]->int_value()));
      ASTR_RETURN_IF_ERROR(ReserveBytes(width));
      o.indent = std::string(width, ' ');
    } else {
      return TypeError("can't multiply sequence by non-int of type '" + TypeName(*p[1]) + "'");
    }
  }
  if (p.has(2) && !p[2]->is_none()) {
    ASTR_ASSIGN_OR_RETURN(ValueList seps, Iterate(*p[2]));
    if (seps.size() != 2) {
      return ValueError("not enough values to unpack (expected 2, got " +
                        std::to_string(seps.size()) + ")");
    }
    o.item_separator = ToStr(seps[0]);
    o.key_separator = ToStr(seps[1]);
  }
  o.sort_keys = p.Flag(3, false);
  ASTR_ASSIGN_OR_RETURN(std::string s, JsonDumps(v, o));
  return Value::Str(std::move(s));
}

StatusOr<Value> Default(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_default", a, {"default_value", "boolean"}));
  if (v.is_undefined() || (p.Flag(1, false) && !Truthy(v))) {
    return p.has(0) ? *p[0] : Value::Str("");
  }
  return v;
}

StatusOr<Value> StringFilter(Interpreter&, const Value& v, const CallArgs&) { return SoftStr(v); }

StatusOr<Value> Safe(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_markup() ? v : Value::Markup(ToStr(v));
}

StatusOr<Value> Escape(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_markup() ? v : Value::Markup(HtmlEscape(ToStr(v)));
}

StatusOr<Value> ForceEscape(Interpreter&, const Value& v, const CallArgs&) {
  return Value::Markup(HtmlEscape(ToStr(v)));
}

StatusOr<Value> Trim(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_trim", a, {"chars"}));
  const std::string* chars = nullptr;
  if (p.has(0) && !p[0]->is_none()) {
    if (!p[0]->is_string()) return TypeError("strip arg must be None or str");
    chars = &p[0]->str();
  }
  Value s = SoftStr(v);
  return SameKind(s, text::Strip(s.str(), chars, true, true));
}

StatusOr<Value> Upper(Interpreter&, const Value& v, const CallArgs&) {
  Value s = SoftStr(v);
  return SameKind(s, text::Upper(s.str()));
}

StatusOr<Value> Lower(Interpreter&, const Value& v, const CallArgs&) {
  Value s = SoftStr(v);
  return SameKind(s, text::Lower(s.str()));
}

StatusOr<Value> Capitalize(Interpreter&, const Value& v, const CallArgs&) {
  Value s = SoftStr(v);
  return SameKind(s, text::Capitalize(s.str()));
}

// jinja2's do_title: capitalizes each piece split at runs of [-\s({[<].
StatusOr<Value> Title(Interpreter&, const Value& v, const CallArgs&) {
  std::u32string cps = text::Decode(ToStr(v));
  const std::u32string_view cps_view = cps;
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::IsSpace(c);
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    // item[0].upper() + item[1:].lower()
    out += text::Upper(text::Encode(cps_view.substr(i, 1)));
    out += text::Lower(text::Encode(cps_view.substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value::Str(std::move(out));
}

StatusOr<Value> Center(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_center", a, {"width"}));
  int64_t width = p.has(0) && p[0]->is_integral() ? p[0]->int_value() : 80;
  Value s = SoftStr(v);
  int64_t len = static_cast<int64_t>(text::Length(s.str()));
  if (width <= len) return s;
  int64_t pad = width - len;
  ASTR_RETURN_IF_ERROR(ReserveBytes(s.str().size() + static_cast<size_t>(pad)));
  int64_t left = pad / 2 + (pad & width & 1);
  return SameKind(s, std::string(left, ' ') + s.str() + std::string(pad - left, ' '));
}

StatusOr<Value> Replace(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_replace", a, {"old", "new", "count"}));
  if (!p.has(0) || !p.has(1)) {
    return TypeError("do_replace() missing required positional arguments: 'old' and 'new'");
  }
  int64_t count = p.has(2) && p[2]->is_integral() ? p[2]->int_value() : -1;
  const std::string s = ToStr(v), old_text = ToStr(*p[0]), new_text = ToStr(*p[1]);
  ASTR_RETURN_IF_ERROR(ReserveBytes(text::ReplacedSize(s, old_text, new_text, count)));
  return Value::Str(text::Replace(s, old_text, new_text, count));
}

StatusOr<Value> Indent(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_indent", a, {"width", "first", "blank"}));
  std::string indention(4, ' ');
  if (p.has(0)) {
    if (p[0]->is_string()) {
      indention = p[0]->str();
    } else if (p[0]->is_integral()) {
      const size_t width = static_cast<size_t>(std::max<int64_t>(0, p[0]->int_value()));
      ASTR_RETURN_IF_ERROR(ReserveBytes(width));
      indention = std::string(width, ' ');
    } else {
      return TypeError("can't multiply sequence by non-int of type '" + TypeName(*p[0]) + "'");
    }
  }
  // jinja2 runs `s += "\n"` and then `s.splitlines()`.
  if (v.is_undefined()) return UndefinedUse(v);
  if (v.is_list()) {
    return InvalidArgumentError("AttributeError: 'list' object has no attribute 'splitlines'");
  }
  if (v.is_tuple()) return TypeError("can only concatenate tuple (not \"str\") to tuple");
  if (!v.is_string()) {
    return TypeError("unsupported operand type(s) for +=: '" + TypeName(v) + "' and 'str'");
  }
  std::vector<std::string> lines = text::SplitLines(v.str() + "\n", false);
  // Every line gets the indentation: refused before building when that will not fit.
  ASTR_RETURN_IF_ERROR(
      ReserveBytes(v.str().size() + SaturatingMul(lines.size() + 1, indention.size() + 1)));
  std::string rv;
  if (p.Flag(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (p.Flag(1, false)) rv = indention + rv;
  return SameKind(v, std::move(rv));
}

// Python float(str); nullopt when it does not parse.
std::optional<double> ParsePyFloat(const std::string& raw) {
  std::string s = text::Strip(raw, nullptr, true, true);
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    cleaned += s[i];
  }
  std::string lower = text::Lower(cleaned);
  std::string body =
      (!lower.empty() && (lower[0] == '+' || lower[0] == '-')) ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double x = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -x : x;
  }
  if (cleaned.empty() || cleaned.find_first_not_of("0123456789+-.eE") != std::string::npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  double d = std::strtod(cleaned.c_str(), &end);
  if (end == cleaned.c_str() || *end != '\0') return std::nullopt;
  return d;
}

// Python int(str, base); nullopt when it does not parse.
std::optional<int64_t> ParsePyInt(const std::string& raw, int base) {
  std::string s = text::Strip(raw, nullptr, true, true);
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_' && s[i + 1] != '_') continue;
    cleaned += s[i];
  }
  if (cleaned.empty()) return std::nullopt;
  size_t start = (cleaned[0] == '+' || cleaned[0] == '-') ? 1 : 0;
  if (start >= cleaned.size() || cleaned.find_first_of(" _", start) != std::string::npos) {
    return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  int64_t v = std::strtoll(cleaned.c_str(), &end, base);
  if (*end != '\0' || errno != 0 || std::isspace(static_cast<unsigned char>(cleaned[start]))) {
    return std::nullopt;
  }
  return v;
}

// Python ints are unbounded; template integers are 64-bit.
Status IntTooLarge() {
  return InvalidArgumentError("OverflowError: integer does not fit in 64 bits");
}

StatusOr<Value> Int(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_int", a, {"default", "base"}));
  Value dflt = p.has(0) ? *p[0] : Value::Int(0);
  int base = p.has(1) && p[1]->is_integral() ? static_cast<int>(p[1]->int_value()) : 10;
  if (v.is_undefined()) return UndefinedUse(v);
  if (v.is_integral()) return Value::Int(v.int_value());
  if (v.is_float()) {
    double d = v.number_value();
    if (std::isnan(d) || std::isinf(d)) {
      return InvalidArgumentError(std::string(std::isnan(d) ? "ValueError: cannot convert float "
                                                              "NaN to integer"
                                                            : "OverflowError: cannot convert "
                                                              "float infinity to integer"));
    }
    if (std::fabs(d) >= 9.2233720368547758e18) return IntTooLarge();
    return Value::Int(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (std::optional<int64_t> i = ParsePyInt(v.str(), base)) return Value::Int(*i);
    if (std::optional<double> d = ParsePyFloat(v.str()); d && std::isfinite(*d)) {
      if (std::fabs(*d) >= 9.2233720368547758e18) return IntTooLarge();
      return Value::Int(static_cast<int64_t>(*d));
    }
  }
  return dflt;
}

StatusOr<Value> Float(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_float", a, {"default"}));
  if (v.is_undefined()) return UndefinedUse(v);
  if (v.is_number()) return Value::Float(v.number_value());
  if (v.is_string()) {
    if (std::optional<double> d = ParsePyFloat(v.str())) return Value::Float(*d);
  }
  return p.has(0) ? *p[0] : Value::Float(0.0);
}

StatusOr<Value> Abs(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_float()) return Value::Float(std::fabs(v.number_value()));
  if (v.is_integral()) return Value::Int(std::llabs(v.int_value()));
  return TypeError("bad operand type for abs(): '" + TypeName(v) + "'");
}

// Python round(x, n) on a float: correctly rounded, ties to even (glibc printf does the same).
double RoundFloat(double x, int64_t n) {
  if (!std::isfinite(x)) return x;
  if (n >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(n, 300)), x);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-n));
  return std::nearbyint(x / scale) * scale;
}

StatusOr<Value> Round(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_round", a, {"precision", "method"}));
  int64_t precision = p.has(0) && p[0]->is_integral() ? p[0]->int_value() : 0;
  std::string method = p.has(1) ? ToStr(*p[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return RuntimeError("method must be common, ceil or floor");
  }
  if (v.is_undefined() && method != "common") return UndefinedUse(v);
  if (!v.is_number()) {
    return TypeError("type " + TypeName(v) + " doesn't define __round__ method");
  }
  if (method == "common") {
    if (v.is_integral()) {
      if (precision >= 0) return Value::Int(v.int_value());
      return Value::Int(
          static_cast<int64_t>(RoundFloat(static_cast<double>(v.int_value()), precision)));
    }
    return Value::Float(RoundFloat(v.number_value(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = v.number_value() * scale;
  double r = method == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return Value::Float(r / scale);
}

StatusOr<Value> Format(Interpreter&, const Value& v, const CallArgs& a) {
  if (!a.positional.empty() && !a.keyword.empty()) {
    return RuntimeError("can't handle positional and keyword arguments at the same time");
  }
  Value args;
  if (!a.keyword.empty()) {
    DictData d;
    for (const auto& [k, val] : a.keyword) d.Set(Value::Str(k), val);
    args = Value::Dict(std::move(d));
  } else {
    args = Value::Tuple(a.positional);
  }
  Value s = SoftStr(v);
  ASTR_ASSIGN_OR_RETURN(std::string out, PercentFormat(s.str(), args));
  return SameKind(s, std::move(out));
}

StatusOr<Value> WordCount(Interpreter&, const Value& v, const CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : text::Decode(ToStr(v))) {
    bool w = text::IsAlpha(c) || text::IsDigit(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::Int(n);
}

StatusOr<Value> Truncate(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p,
                        Params::Bind("do_truncate", a, {"length", "killwords", "end", "leeway"}));
  int64_t length = p.has(0) && p[0]->is_integral() ? p[0]->int_value() : 255;
  std::string end = p.has(2) ? ToStr(*p[2]) : "...";
  int64_t leeway = p.has(3) && p[3]->is_integral() ? p[3]->int_value() : 5;
  if (!v.is_string()) {
    ASTR_ASSIGN_OR_RETURN(int64_t n, jinja::Length(v));
    if (n <= length + leeway) return v;
    return TypeError("truncate expects a string, got " + TypeName(v));
  }
  std::u32string s = text::Decode(v.str());
  int64_t end_len = static_cast<int64_t>(text::Length(end));
  if (length < end_len)
    return InvalidArgumentError("AssertionError: expected length >= " + std::to_string(end_len));
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::Str(text::Encode(s));
  std::string head = text::Encode(s.substr(0, static_cast<size_t>(length - end_len)));
  if (p.Flag(1, false)) return Value::Str(head + end);
  const std::string space = " ";
  std::vector<std::string> parts = text::Split(head, &space, 1, true);
  return Value::Str(parts[0] + end);
}

StatusOr<Value> Attr(Interpreter& interp, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_attr", a, {"name"}));
  if (!p.has(0)) return TypeError("do_attr() missing 1 required positional argument: 'name'");
  std::string name = ToStr(*p[0]);
  if (v.is_object() || BuiltinAttribute(v, name)) return interp.GetAttr(v, name);
  if (v.is_undefined()) return UndefinedUse(v);
  return Value::UndefinedAttr(v, Value::Str(name));
}

StatusOr<Value> Pprint(Interpreter&, const Value& v, const CallArgs&) {
  return Value::Str(Repr(v));
}

StatusOr<Value> StripTags(Interpreter&, const Value& v, const CallArgs&) {
  std::string s = ToStr(v);
  for (const auto& [open, close] : {std::pair<std::string, std::string>{"<!--", "-->"},
                                    std::pair<std::string, std::string>{"<", ">"}}) {
    size_t start;
    while ((start = s.find(open)) != std::string::npos) {
      size_t end = s.find(close, start);
      if (end == std::string::npos) break;
      // Each tag copies the text: many tags in a long text are work to be paid for.
      SpendBytes(s.size());
      ASTR_RETURN_IF_ERROR(BudgetStatus());
      s = s.substr(0, start) + s.substr(end + close.size());
    }
  }
  std::vector<std::string> words = text::Split(s, nullptr, -1, false);
  std::string joined;
  for (size_t i = 0; i < words.size(); ++i) joined += (i ? " " : "") + words[i];
  static const std::pair<const char*, const char*> kEntities[] = {{"&lt;", "<"},    {"&gt;", ">"},
                                                                  {"&quot;", "\""}, {"&#34;", "\""},
                                                                  {"&#39;", "'"},   {"&amp;", "&"}};
  for (const auto& [entity, ch] : kEntities) joined = text::Replace(joined, entity, ch, -1);
  return Value::Str(std::move(joined));
}

std::string UrlQuote(const std::string& s, bool for_qs) {
  SpendText(s.size());
  std::string out;
  GrowthCheck growth;
  for (unsigned char c : s) {
    if (!growth.Fits(out.size())) break;  // the render fails; the text is discarded
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/')) {
      out += static_cast<char>(c);
    } else if (for_qs && c == ' ') {
      out += '+';
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

StatusOr<Value> UrlEncode(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_string() || !(v.is_dict() || v.is_sequence() || v.is_iterator())) {
    return Value::Str(UrlQuote(ToStr(v), false));
  }
  ValueList pairs;
  if (v.is_dict()) {
    for (const auto& [k, val] : v.dict().items) pairs.push_back(Value::Tuple({k, val}));
  } else {
    ASTR_ASSIGN_OR_RETURN(pairs, Iterate(v));
  }
  std::string out;
  for (size_t i = 0; i < pairs.size(); ++i) {
    ASTR_ASSIGN_OR_RETURN(ValueList kv, Iterate(pairs[i]));
    if (kv.size() != 2) return ValueError("too many values to unpack (expected 2)");
    if (i > 0) out += "&";
    out += UrlQuote(ToStr(kv[0]), true) + "=" + UrlQuote(ToStr(kv[1]), true);
  }
  return Value::Str(std::move(out));
}

StatusOr<Value> XmlAttr(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_xmlattr", a, {"autospace"}));
  if (!v.is_dict()) {
    return InvalidArgumentError("AttributeError: '" + TypeName(v) +
                                "' object has no attribute 'items'");
  }
  std::string rv;
  for (const auto& [k, val] : v.dict().items) {
    if (val.is_none() || val.is_undefined()) continue;
    std::string key = ToStr(k);
    if (key.find_first_of(" \t\n\r\f\v/>=") != std::string::npos) {
      return ValueError("Invalid character in attribute name: " + StrRepr(key));
    }
    if (!rv.empty()) rv += " ";
    rv += HtmlEscape(key) + "=\"" + (val.is_markup() ? val.str() : HtmlEscape(ToStr(val))) + "\"";
  }
  if (p.Flag(0, true) && !rv.empty()) rv = " " + rv;
  return Value::Str(std::move(rv));
}

StatusOr<Value> FileSizeFormat(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_filesizeformat", a, {"binary"}));
  double bytes;
  if (v.is_number()) {
    bytes = v.number_value();
  } else if (std::optional<double> d = v.is_string() ? ParsePyFloat(v.str()) : std::nullopt) {
    bytes = *d;
  } else {
    return ValueError("could not convert string to float: " + Repr(v));
  }
  bool binary = p.Flag(0, false);
  double base = binary ? 1024 : 1000;
  static const char* kBin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  static const char* kDec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  if (bytes == 1) return Value::Str("1 Byte");
  if (bytes < base) return Value::Str(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
  double unit = base;
  const char* prefix = "";
  for (int i = 0; i < 8; ++i) {
    unit = std::pow(base, i + 2);
    prefix = binary ? kBin[i] : kDec[i];
    if (bytes < unit) break;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f %s", base * bytes / unit, prefix);
  return Value::Str(buf);
}

const std::map<std::string_view, FilterFn>& FilterTable() {
  static const auto* table = new std::map<std::string_view, FilterFn>{
      {"abs", Abs},
      {"attr", Attr},
      {"batch", Batch},
      {"capitalize", Capitalize},
      {"center", Center},
      {"count", Count},
      {"d", Default},
      {"default", Default},
      {"dictsort", DictSort},
      {"e", Escape},
      {"escape", Escape},
      {"filesizeformat", FileSizeFormat},
      {"first", First},
      {"float", Float},
      {"forceescape", ForceEscape},
      {"format", Format},
      {"groupby", GroupBy},
      {"indent", Indent},
      {"int", Int},
      {"items", Items},
      {"join", Join},
      {"last", Last},
      {"length", Count},
      {"list", ListFilter},
      {"lower", Lower},
      {"map", Map},
      {"max", Max},
      {"min", Min},
      {"pprint", Pprint},
      {"reject", Reject},
      {"rejectattr", RejectAttr},
      {"replace", Replace},
      {"reverse", Reverse},
      {"round", Round},
      {"safe", Safe},
      {"select", Select},
      {"selectattr", SelectAttr},
      {"slice", SliceFilter},
      {"sort", Sort},
      {"string", StringFilter},
      {"striptags", StripTags},
      {"sum", Sum},
      {"title", Title},
      {"tojson", ToJson},
      {"trim", Trim},
      {"truncate", Truncate},
      {"unique", Unique},
      {"upper", Upper},
      {"urlencode", UrlEncode},
      {"wordcount", WordCount},
      {"xmlattr", XmlAttr},
  };
  return *table;
}

}  // namespace
}  // namespace filters

bool IsBuiltinFilter(std::string_view name) { return filters::FilterTable().count(name) > 0; }

StatusOr<Value> CallFilter(Interpreter& interp, std::string_view name, const Value& value,
                           const CallArgs& args) {
  const auto& table = filters::FilterTable();
  auto it = table.find(name);
  if (it == table.end()) return RuntimeError("No filter named '" + std::string(name) + "'.");
  return it->second(interp, value, args);
}

}  // namespace astr::jinja
