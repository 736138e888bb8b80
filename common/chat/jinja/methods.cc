// Python methods of str, list, tuple and dict values, as bound methods the template can call.
// Under the immutable sandbox the mutating ones (list.append, dict.update, ...) are unsafe: their
// lookup gives an Undefined that raises SecurityError when called.
#include <algorithm>

#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/py_format.h"
#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

// Argument access with Python's error wording.
const Value* Arg(const CallArgs& a, size_t i, std::string_view keyword = {}) {
  if (i < a.positional.size()) return &a.positional[i];
  if (!keyword.empty()) return a.Keyword(keyword);
  return nullptr;
}

Status CheckArity(const CallArgs& a, std::string_view name, size_t max) {
  size_t n = a.positional.size() + a.keyword.size();
  if (n > max) {
    return TypeError(std::string(name) + "() takes at most " + std::to_string(max) + " argument" +
                     (max == 1 ? "" : "s") + " (" + std::to_string(n) + " given)");
  }
  return OkStatus();
}

StatusOr<const std::string*> OptionalStr(const Value* v, std::string_view what) {
  if (v == nullptr || v->is_none()) return static_cast<const std::string*>(nullptr);
  if (!v->is_string()) {
    return TypeError(std::string(what) + " arg must be None or str");
  }
  return &v->str();
}

StatusOr<const std::string*> RequireStr(const Value* v, std::string_view fn, size_t pos) {
  if (v == nullptr) {
    return TypeError(std::string(fn) + "() takes at least " + std::to_string(pos + 1) +
                     " argument (" + std::to_string(pos) + " given)");
  }
  if (!v->is_string()) {
    return TypeError("must be str, not " + TypeName(*v));
  }
  return &v->str();
}

int64_t IntArg(const Value* v, int64_t dflt) {
  return (v != nullptr && v->is_integral()) ? v->int_value() : dflt;
}

Value StrList(const std::vector<std::string>& parts) {
  ValueList out;
  out.reserve(parts.size());
  for (const std::string& p : parts) out.push_back(Value::Str(p));
  return Value::List(std::move(out));
}

// The [start:end] code point window of `s` used by find / count / startswith.
std::string Window(const std::string& s, const CallArgs& a, size_t first) {
  SpendBytes(s.size());  // the copy, and the search the caller makes in it
  const Value* start = Arg(a, first);
  const Value* end = Arg(a, first + 1);
  if ((start == nullptr || start->is_none()) && (end == nullptr || end->is_none())) return s;
  StatusOr<Value> w = SliceValue(Value::Str(s), start ? *start : Value::None(),
                                 end ? *end : Value::None(), Value::None());
  return w.ok() ? w->str() : s;
}

StatusOr<Value> StrStrip(const Value& self, CallArgs& a, bool left, bool right,
                         std::string_view name) {
  ASTR_RETURN_IF_ERROR(CheckArity(a, name, 1));
  ASTR_ASSIGN_OR_RETURN(const std::string* chars, OptionalStr(Arg(a, 0, "chars"), name));
  return Value::Str(text::Strip(self.str(), chars, left, right));
}

StatusOr<Value> StrSplit(const Value& self, CallArgs& a, bool from_right) {
  ASTR_ASSIGN_OR_RETURN(const std::string* sep, OptionalStr(Arg(a, 0, "sep"), "sep"));
  if (sep != nullptr && sep->empty()) return ValueError("empty separator");
  int64_t maxsplit = IntArg(Arg(a, 1, "maxsplit"), -1);
  return StrList(text::Split(self.str(), sep, maxsplit, from_right));
}

StatusOr<Value> StrAffix(const Value& self, CallArgs& a, bool prefix) {
  const Value* arg = Arg(a, 0);
  std::string name = prefix ? "startswith" : "endswith";
  if (arg == nullptr) return TypeError(name + "() takes at least 1 argument (0 given)");
  std::string s = Window(self.str(), a, 1);
  auto test = [&](const std::string& affix) {
    if (affix.size() > s.size()) return false;
    return prefix ? s.compare(0, affix.size(), affix) == 0
                  : s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
  };
  if (arg->is_string()) return Value::Bool(test(arg->str()));
  if (arg->is_tuple()) {
    for (const Value& v : arg->items()) {
      if (!v.is_string()) {
        return TypeError("tuple for " + name + " must only contain str, not " + TypeName(v));
      }
      if (test(v.str())) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  return TypeError(name + " first arg must be str or a tuple of str, not " + TypeName(*arg));
}

StatusOr<Value> StrFind(const Value& self, CallArgs& a, bool from_right, bool raise,
                        std::string_view name) {
  ASTR_ASSIGN_OR_RETURN(const std::string* sub, RequireStr(Arg(a, 0), name, 0));
  std::string window = Window(self.str(), a, 1);
  int64_t pos = text::Find(window, *sub, from_right);
  if (pos >= 0) {
    const Value* start = Arg(a, 1);
    if (start != nullptr && start->is_integral()) {
      int64_t st = start->int_value();
      int64_t n = static_cast<int64_t>(text::Length(self.str()));
      if (st < 0) st = std::max<int64_t>(0, st + n);
      pos += std::min(st, n);
    }
  }
  if (pos < 0 && raise) return ValueError("substring not found");
  return Value::Int(pos);
}

StatusOr<Value> StrJustify(const Value& self, CallArgs& a, char align) {
  const Value* width = Arg(a, 0);
  if (width == nullptr || !width->is_integral()) {
    return TypeError(StrRepr(width ? TypeName(*width) : std::string("NoneType")) +
                     " object cannot be interpreted as an integer");
  }
  std::string fill = " ";
  if (const Value* f = Arg(a, 1)) {
    if (!f->is_string() || text::Length(f->str()) != 1) {
      return TypeError("The fill character must be exactly one character long");
    }
    fill = f->str();
  }
  int64_t len = static_cast<int64_t>(text::Length(self.str()));
  int64_t pad = width->int_value() - len;
  if (pad <= 0) return Value::Str(self.str());
  ASTR_RETURN_IF_ERROR(
      ReserveBytes(self.str().size() + SaturatingMul(static_cast<size_t>(pad), fill.size())));
  auto rep = [&](int64_t n) {
    std::string r;
    for (int64_t i = 0; i < n; ++i) r += fill;
    return r;
  };
  if (align == '<') return Value::Str(self.str() + rep(pad));
  if (align == '>') return Value::Str(rep(pad) + self.str());
  // Python's center puts the extra space on the right unless both are odd.
  int64_t left = pad / 2 + (pad & width->int_value() & 1);
  return Value::Str(rep(left) + self.str() + rep(pad - left));
}

StatusOr<Value> StrPredicate(const Value& self, std::string_view name) {
  std::u32string cps = text::Decode(self.str());
  auto all = [&](auto pred) {
    if (cps.empty()) return false;
    for (char32_t c : cps) {
      if (!pred(c)) return false;
    }
    return true;
  };
  if (name == "isalpha") return Value::Bool(all(text::IsAlpha));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
    return Value::Bool(all(text::IsDigit));
  }
  if (name == "isalnum") {
    return Value::Bool(all([](char32_t c) { return text::IsAlpha(c) || text::IsDigit(c); }));
  }
  if (name == "isspace") return Value::Bool(all(text::IsSpace));
  if (name == "isascii") {
    return Value::Bool(std::all_of(cps.begin(), cps.end(), [](char32_t c) { return c < 0x80; }));
  }
  bool any_cased = false, ok = true;
  for (char32_t c : cps) {
    if (!text::IsCased(c)) continue;
    any_cased = true;
    if (name == "islower" && text::IsUpperChar(c)) ok = false;
    if (name == "isupper" && text::IsLowerChar(c)) ok = false;
  }
  return Value::Bool(any_cased && ok);
}

StatusOr<Value> StrJoin(const Value& self, CallArgs& a) {
  const Value* arg = Arg(a, 0);
  if (arg == nullptr) return TypeError("str.join() takes exactly one argument (0 given)");
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(*arg));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return TypeError("sequence item " + std::to_string(i) + ": expected str instance, " +
                       TypeName(items[i]) + " found");
    }
    // `[s] * 1000` shares one `s`: the text is checked against the budget as it grows.
    ASTR_RETURN_IF_ERROR(
        ReserveBytes(out.size() + (i > 0 ? self.str().size() : 0) + items[i].str().size()));
    if (i > 0) out += self.str();
    out += items[i].str();
  }
  return Value::Str(std::move(out));
}

StatusOr<Value> StrPartition(const Value& self, CallArgs& a, bool from_right) {
  ASTR_ASSIGN_OR_RETURN(const std::string* sep, RequireStr(Arg(a, 0), "partition", 0));
  if (sep->empty()) return ValueError("empty separator");
  const std::string& s = self.str();
  size_t pos = from_right ? s.rfind(*sep) : s.find(*sep);
  if (pos == std::string::npos) {
    return from_right ? Value::Tuple({Value::Str(""), Value::Str(""), self})
                      : Value::Tuple({self, Value::Str(""), Value::Str("")});
  }
  return Value::Tuple(
      {Value::Str(s.substr(0, pos)), Value::Str(*sep), Value::Str(s.substr(pos + sep->size()))});
}

StatusOr<Value> CallStrMethod(Interpreter& interp, const Value& self, std::string_view name,
                              CallArgs& a) {
  const std::string& s = self.str();
  if (name == "strip") return StrStrip(self, a, true, true, name);
  if (name == "lstrip") return StrStrip(self, a, true, false, name);
  if (name == "rstrip") return StrStrip(self, a, false, true, name);
  if (name == "split") return StrSplit(self, a, false);
  if (name == "rsplit") return StrSplit(self, a, true);
  if (name == "startswith") return StrAffix(self, a, true);
  if (name == "endswith") return StrAffix(self, a, false);
  if (name == "upper") return Value::Str(text::Upper(s));
  if (name == "lower" || name == "casefold") return Value::Str(text::Lower(s));
  if (name == "title") return Value::Str(text::TitleWords(s));
  if (name == "capitalize") return Value::Str(text::Capitalize(s));
  if (name == "swapcase") return Value::Str(text::SwapCase(s));
  if (name == "find") return StrFind(self, a, false, false, name);
  if (name == "rfind") return StrFind(self, a, true, false, name);
  if (name == "index") return StrFind(self, a, false, true, name);
  if (name == "rindex") return StrFind(self, a, true, true, name);
  if (name == "join") return StrJoin(self, a);
  if (name == "partition") return StrPartition(self, a, false);
  if (name == "rpartition") return StrPartition(self, a, true);
  if (name == "ljust") return StrJustify(self, a, '<');
  if (name == "rjust") return StrJustify(self, a, '>');
  if (name == "center") return StrJustify(self, a, '^');
  if (name.rfind("is", 0) == 0) return StrPredicate(self, name);
  if (name == "count") {
    ASTR_ASSIGN_OR_RETURN(const std::string* sub, RequireStr(Arg(a, 0), name, 0));
    return Value::Int(text::Count(Window(s, a, 1), *sub));
  }
  if (name == "replace") {
    ASTR_ASSIGN_OR_RETURN(const std::string* old_text, RequireStr(Arg(a, 0), name, 0));
    ASTR_ASSIGN_OR_RETURN(const std::string* new_text, RequireStr(Arg(a, 1), name, 1));
    const int64_t count = IntArg(Arg(a, 2, "count"), -1);
    ASTR_RETURN_IF_ERROR(ReserveBytes(text::ReplacedSize(s, *old_text, *new_text, count)));
    return Value::Str(text::Replace(s, *old_text, *new_text, count));
  }
  if (name == "splitlines") {
    const Value* keep = Arg(a, 0, "keepends");
    return StrList(text::SplitLines(s, keep != nullptr && Truthy(*keep)));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ASTR_ASSIGN_OR_RETURN(const std::string* affix, RequireStr(Arg(a, 0), name, 0));
    bool pre = name == "removeprefix";
    if (affix->size() <= s.size() &&
        (pre ? s.compare(0, affix->size(), *affix) == 0
             : s.compare(s.size() - affix->size(), affix->size(), *affix) == 0)) {
      return Value::Str(pre ? s.substr(affix->size()) : s.substr(0, s.size() - affix->size()));
    }
    return Value::Str(s);
  }
  if (name == "zfill") {
    int64_t width = IntArg(Arg(a, 0), 0);
    int64_t len = static_cast<int64_t>(text::Length(s));
    if (width <= len) return Value::Str(s);
    ASTR_RETURN_IF_ERROR(ReserveBytes(s.size() + static_cast<size_t>(width - len)));
    size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    return Value::Str(s.substr(0, sign) + std::string(width - len, '0') + s.substr(sign));
  }
  if (name == "format") {
    ASTR_ASSIGN_OR_RETURN(std::string out,
                          StrFormat(s, a, [&interp](const Value& obj, const Value& key, bool attr) {
                            return attr ? interp.GetAttr(obj, key.str()) : interp.GetItem(obj, key);
                          }));
    return self.is_markup() ? Value::Markup(std::move(out)) : Value::Str(std::move(out));
  }
  return TypeError("str." + std::string(name) + "() is not supported in templates");
}

// markupsafe.Markup's methods: the result is Markup again, and the text they insert (replace's
// `new`, a fill character, join's items) is escaped first.
StatusOr<Value> CallMarkupMethod(Interpreter& interp, const Value& self, std::string_view name,
                                 CallArgs& a) {
  auto escape = [](Value* v) {
    if (v->is_string() && !v->is_markup()) *v = Value::Markup(HtmlEscape(v->str()));
  };
  if ((name == "replace" || name == "ljust" || name == "rjust" || name == "center") &&
      a.positional.size() > 1) {
    escape(&a.positional[1]);
  }
  if (name == "join" && !a.positional.empty()) {
    ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(a.positional[0]));
    for (Value& item : items) escape(&item);
    a.positional[0] = Value::List(std::move(items));
  }
  ASTR_ASSIGN_OR_RETURN(Value r, CallStrMethod(interp, self, name, a));
  auto to_markup = [](const Value& v) { return v.is_string() ? Value::Markup(v.str()) : v; };
  if (r.is_string()) return to_markup(r);
  if (r.is_sequence()) {
    ValueList items;
    for (const Value& v : r.items()) items.push_back(to_markup(v));
    return r.is_list() ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
  }
  return r;
}

constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};

bool Contains(const std::string_view* begin, const std::string_view* end, std::string_view name) {
  return std::find(begin, end, name) != end;
}

Value Unsafe(const Value& obj, std::string_view name) {
  return Value::UndefinedHint("access to attribute '" + std::string(name) + "' of '" +
                                  TypeName(obj) + "' object is unsafe.",
                              true);
}

Value Bound(const Value& self, std::string_view name,
            StatusOr<Value> (*fn)(Interpreter&, const Value&, std::string_view, CallArgs&)) {
  std::string n(name);
  return NativeFunction::Make(
      n, "builtin_function_or_method",
      [self, n, fn](Interpreter& interp, CallArgs& a) { return fn(interp, self, n, a); });
}

StatusOr<Value> CallDictMethod(Interpreter&, const Value& self, std::string_view name,
                               CallArgs& a) {
  const DictData& d = self.dict();
  if (name == "items" || name == "keys" || name == "values") {
    ValueList out;
    for (const auto& [k, v] : d.items) {
      out.push_back(name == "items" ? Value::Tuple({k, v}) : name == "keys" ? k : v);
    }
    return Value::Iterator("dict_" + std::string(name), std::move(out), true, true);
  }
  if (name == "get") {
    const Value* key = Arg(a, 0);
    if (key == nullptr) return TypeError("get expected at least 1 argument, got 0");
    ASTR_RETURN_IF_ERROR(CheckHashable(*key));
    if (const Value* v = d.Find(*key)) return *v;
    const Value* dflt = Arg(a, 1);
    return dflt != nullptr ? *dflt : Value::None();
  }
  if (name == "copy") return self;
  return TypeError("dict." + std::string(name) + "() is not supported in templates");
}

StatusOr<Value> CallListMethod(Interpreter&, const Value& self, std::string_view name,
                               CallArgs& a) {
  const ValueList& items = self.items();
  const Value* x = Arg(a, 0);
  if (name == "copy") return Value::List(items);
  if (x == nullptr) {
    return TypeError(std::string(name) + "() takes exactly one argument (0 given)");
  }
  if (name == "count") {
    return Value::Int(
        std::count_if(items.begin(), items.end(), [&](const Value& v) { return Equals(v, *x); }));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (Equals(items[i], *x)) return Value::Int(static_cast<int64_t>(i));
  }
  return ValueError(self.is_list() ? Repr(*x) + " is not in list"
                                   : "tuple.index(x): x not in tuple");
}

}  // namespace

std::optional<Value> BuiltinAttribute(const Value& obj, std::string_view name) {
  static constexpr std::string_view kDictSafe[] = {"items", "keys", "values",
                                                   "get",   "copy", "fromkeys"};
  static constexpr std::string_view kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault",
                                                     "update"};
  static constexpr std::string_view kListUnsafe[] = {"append", "clear", "pop",    "reverse",
                                                     "insert", "sort",  "extend", "remove"};
  switch (obj.kind()) {
    case Value::Kind::kString:
      if (Contains(std::begin(kStrMethods), std::end(kStrMethods), name)) {
        return Bound(obj, name, obj.is_markup() ? CallMarkupMethod : CallStrMethod);
      }
      return std::nullopt;
    case Value::Kind::kDict:
      if (Contains(std::begin(kDictSafe), std::end(kDictSafe), name)) {
        return Bound(obj, name, CallDictMethod);
      }
      if (Contains(std::begin(kDictUnsafe), std::end(kDictUnsafe), name)) return Unsafe(obj, name);
      return std::nullopt;
    case Value::Kind::kList:
      if (name == "copy" || name == "count" || name == "index") {
        return Bound(obj, name, CallListMethod);
      }
      if (Contains(std::begin(kListUnsafe), std::end(kListUnsafe), name)) return Unsafe(obj, name);
      return std::nullopt;
    case Value::Kind::kTuple:
      if (name == "count" || name == "index") return Bound(obj, name, CallListMethod);
      return std::nullopt;
    case Value::Kind::kRange:
      if (name == "count" || name == "index") return Bound(obj, name, CallListMethod);
      if (name == "start") return Value::Int(obj.range_params()[0]);
      if (name == "stop") return Value::Int(obj.range_params()[1]);
      if (name == "step") return Value::Int(obj.range_params()[2]);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace astr::jinja
