// `str % args`, format(value, spec) and str.format with Python's rules.
#include "common/chat/jinja/py_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

// A parsed format spec: [[fill]align][sign][#][0][width][,|_][.precision][type].
struct Spec {
  char32_t fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 (type default)
  char sign = '-';
  bool alternate = false;
  int64_t width = -1;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

StatusOr<Spec> ParseSpec(std::string_view spec) {
  Spec s;
  std::u32string cps = text::Decode(spec);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    s.fill = cps[0];
    s.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    s.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) {
    s.sign = static_cast<char>(cps[i++]);
  }
  if (i < cps.size() && cps[i] == '#') {
    s.alternate = true;
    ++i;
  }
  if (i < cps.size() && cps[i] == '0') {
    if (s.align == 0) {
      s.fill = '0';
      s.align = '=';
    }
    ++i;
  }
  auto read_int = [&](int64_t* dst) {
    int64_t v = 0;
    bool any = false;
    while (i < cps.size() && text::IsDigit(cps[i]) && v < 1000000) {
      v = v * 10 + (cps[i++] - '0');
      any = true;
    }
    if (any) *dst = v;
    return any;
  };
  read_int(&s.width);
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_')) s.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    if (!read_int(&s.precision)) return ValueError("Format specifier missing precision");
  }
  if (i < cps.size()) s.type = static_cast<char>(cps[i++]);
  if (i < cps.size()) return ValueError("Invalid format specifier");
  // The padding (up to 4 bytes a fill character) and the digits are built before anything else
  // sees their size.
  ASTR_RETURN_IF_ERROR(
      ReserveBytes(SaturatingMul(static_cast<size_t>(std::max<int64_t>(s.width, 0)), 4) +
                   static_cast<size_t>(std::max<int64_t>(s.precision, 0))));
  return s;
}

std::string Pad(const std::string& body, const Spec& s, char default_align) {
  int64_t len = static_cast<int64_t>(text::Length(body));
  if (s.width <= len) return body;
  std::string fill;
  text::AppendUtf8(&fill, s.fill);
  int64_t n = s.width - len;
  char align = s.align ? s.align : default_align;
  auto rep = [&](int64_t k) {
    std::string r;
    for (int64_t j = 0; j < k; ++j) r += fill;
    return r;
  };
  if (align == '<') return body + rep(n);
  if (align == '^') return rep(n / 2) + body + rep(n - n / 2);
  if (align == '=') {
    size_t sign_len =
        (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    return body.substr(0, sign_len) + rep(n) + body.substr(sign_len);
  }
  return rep(n) + body;
}

std::string Group(const std::string& digits, char sep) {
  if (sep == 0) return digits;
  std::string out;
  int count = 0;
  for (size_t i = digits.size(); i > 0; --i) {
    if (count > 0 && count % 3 == 0) out.insert(out.begin(), sep);
    out.insert(out.begin(), digits[i - 1]);
    ++count;
  }
  return out;
}

std::string SignPrefix(bool negative, char sign) {
  if (negative) return "-";
  if (sign == '+') return "+";
  if (sign == ' ') return " ";
  return "";
}

std::string IntDigits(int64_t v, char type, bool alternate) {
  uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  char buf[80];
  std::string prefix;
  switch (type) {
    case 'x':
      std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(u));
      prefix = "0x";
      break;
    case 'X':
      std::snprintf(buf, sizeof(buf), "%llX", static_cast<unsigned long long>(u));
      prefix = "0X";
      break;
    case 'o':
      std::snprintf(buf, sizeof(buf), "%llo", static_cast<unsigned long long>(u));
      prefix = "0o";
      break;
    case 'b': {
      std::string b;
      do {
        b.insert(b.begin(), static_cast<char>('0' + (u & 1)));
        u >>= 1;
      } while (u != 0);
      return (alternate ? "0b" : "") + b;
    }
    default:
      std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(u));
      return buf;
  }
  return (alternate ? prefix : "") + std::string(buf);
}

// C printf for one double with Python's spelling of inf / nan.
std::string FloatDigits(double d, char type, int64_t precision, bool alternate) {
  double a = std::fabs(d);
  if (std::isinf(a)) return (type >= 'A' && type <= 'Z') ? "INF" : "inf";
  if (std::isnan(a)) return (type >= 'A' && type <= 'Z') ? "NAN" : "nan";
  std::string fmt = alternate ? "%#.*" : "%.*";
  fmt += type;
  int n = std::snprintf(nullptr, 0, fmt.c_str(), static_cast<int>(precision), a);
  std::string out(static_cast<size_t>(n), '\0');
  std::snprintf(out.data(), out.size() + 1, fmt.c_str(), static_cast<int>(precision), a);
  return out;
}

StatusOr<std::string> FormatInt(int64_t v, const Spec& s) {
  if (s.precision >= 0) return ValueError("Precision not allowed in integer format specifier");
  if (s.type == 'c') {
    std::string out;
    text::AppendUtf8(&out, static_cast<char32_t>(v));
    return Pad(out, s, '<');
  }
  std::string digits = IntDigits(v, s.type, s.alternate);
  if (s.type == 0 || s.type == 'd' || s.type == 'n') digits = Group(digits, s.grouping);
  return Pad(SignPrefix(v < 0, s.sign) + digits, s, '>');
}

StatusOr<std::string> FormatFloat(double d, const Spec& s) {
  char type = s.type;
  std::string body;
  if (type == 0 && s.precision < 0) {
    body = FloatRepr(std::fabs(d));
  } else {
    int64_t precision = s.precision < 0 ? 6 : s.precision;
    bool percent = type == '%';
    double x = percent ? d * 100 : d;
    char c = type == 0 ? 'g' : percent ? 'f' : type;
    if (type == 0 && precision == 0) precision = 1;
    body = FloatDigits(x, c, precision, s.alternate);
    if (type == 0 && body.find_first_of(".einn") == std::string::npos) body += ".0";
    if (percent) body += "%";
  }
  if (s.grouping != 0) {
    size_t end = body.find_first_not_of("0123456789");
    body = Group(body.substr(0, end), s.grouping) +
           body.substr(end == std::string::npos ? body.size() : end);
  }
  return Pad(SignPrefix(std::signbit(d) && !std::isnan(d), s.sign) + body, s, '>');
}

// One `%` conversion applied to `arg`.
StatusOr<std::string> PercentOne(char conv, const Value& arg, const Spec& s, bool left, bool zero) {
  Spec spec = s;
  spec.align = left ? '<' : (zero ? '=' : '>');
  spec.fill = (zero && !left) ? '0' : ' ';
  switch (conv) {
    case 's':
    case 'r':
    case 'a': {
      std::string body = conv == 's' ? ToStr(arg) : Repr(arg);
      if (s.precision >= 0) {
        std::u32string cps = text::Decode(body);
        if (static_cast<int64_t>(cps.size()) > s.precision) cps.resize(s.precision);
        body = text::Encode(cps);
      }
      spec.fill = ' ';
      spec.align = left ? '<' : '>';
      return Pad(body, spec, '>');
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
      if (arg.is_undefined()) return UndefinedUse(arg);
      if (!arg.is_number()) {
        return TypeError(
            std::string("%") + conv + " format: " +
            (conv == 'd' || conv == 'i' || conv == 'u' ? "a real number" : "an integer") +
            " is required, not " + TypeName(arg));
      }
      if (arg.is_float() && conv != 'd' && conv != 'i' && conv != 'u') {
        return TypeError(std::string("%") + conv + " format: an integer is required, not float");
      }
      int64_t v = arg.is_float() ? static_cast<int64_t>(arg.number_value()) : arg.int_value();
      std::string digits = IntDigits(v, conv == 'u' || conv == 'i' ? 'd' : conv, s.alternate);
      if (s.precision >= 0 && static_cast<int64_t>(digits.size()) < s.precision) {
        digits.insert(0, static_cast<size_t>(s.precision) - digits.size(), '0');
      }
      spec.precision = -1;
      return Pad(SignPrefix(v < 0, s.sign) + digits, spec, '>');
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G': {
      if (arg.is_undefined()) return UndefinedUse(arg);
      if (!arg.is_number()) {
        return TypeError("must be real number, not " + TypeName(arg));
      }
      double d = arg.number_value();
      std::string body = FloatDigits(d, conv, s.precision < 0 ? 6 : s.precision, s.alternate);
      return Pad(SignPrefix(std::signbit(d) && !std::isnan(d), s.sign) + body, spec, '>');
    }
    case 'c': {
      std::string out;
      if (arg.is_string() && text::Length(arg.str()) == 1) {
        out = arg.str();
      } else if (arg.is_integral()) {
        text::AppendUtf8(&out, static_cast<char32_t>(arg.int_value()));
      } else {
        return TypeError("%c requires int or char");
      }
      return Pad(out, spec, '>');
    }
    default:
      return ValueError(std::string("unsupported format character '") + conv + "'");
  }
}

}  // namespace

StatusOr<std::string> FormatValue(const Value& value, std::string_view spec) {
  if (spec.empty()) return ToStr(value);
  ASTR_ASSIGN_OR_RETURN(Spec s, ParseSpec(spec));
  if (value.is_string()) {
    if (s.type != 0 && s.type != 's') {
      return ValueError(std::string("Unknown format code '") + s.type +
                        "' for object of type 'str'");
    }
    std::string body = value.str();
    if (s.precision >= 0) {
      std::u32string cps = text::Decode(body);
      if (static_cast<int64_t>(cps.size()) > s.precision) cps.resize(s.precision);
      body = text::Encode(cps);
    }
    return Pad(body, s, '<');
  }
  if (value.is_integral()) {
    if (s.type == 'e' || s.type == 'E' || s.type == 'f' || s.type == 'F' || s.type == 'g' ||
        s.type == 'G' || s.type == '%') {
      return FormatFloat(value.number_value(), s);
    }
    return FormatInt(value.int_value(), s);
  }
  if (value.is_float()) {
    if (s.type != 0 && std::string_view("eEfFgGn%").find(s.type) == std::string_view::npos) {
      return ValueError(std::string("Unknown format code '") + s.type +
                        "' for object of type 'float'");
    }
    return FormatFloat(value.number_value(), s);
  }
  return TypeError("unsupported format string passed to " + TypeName(value) + ".__format__");
}

namespace {

// The arguments of `fmt % args` as Python sees them.
struct PercentArgs {
  ValueList positional;
  const DictData* mapping = nullptr;  // set when args is a dict
  // Python skips the "not all arguments converted" check for an argument with __getitem__.
  bool subscriptable = false;
  size_t next = 0;

  StatusOr<const Value*> Next() {
    if (next >= positional.size()) return TypeError("not enough arguments for format string");
    return &positional[next++];
  }
};

// Parses "[(key)][flags][width][.precision][length]" after a '%' at fmt[*i].
struct PercentSpec {
  Spec spec;
  bool left = false;
  bool zero = false;
  const Value* named = nullptr;
};

StatusOr<PercentSpec> ParsePercentSpec(std::string_view fmt, size_t* i, PercentArgs* args) {
  PercentSpec ps;
  if (fmt[*i] == '(') {
    size_t close = fmt.find(')', *i);
    if (close == std::string_view::npos) return ValueError("incomplete format key");
    if (args->mapping == nullptr) return TypeError("format requires a mapping");
    Value key = Value::Str(std::string(fmt.substr(*i + 1, close - *i - 1)));
    ps.named = args->mapping->Find(key);
    if (ps.named == nullptr) return InvalidArgumentError("KeyError: " + Repr(key));
    *i = close + 1;
  }
  for (; *i < fmt.size(); ++*i) {
    char f = fmt[*i];
    if (f == '-') {
      ps.left = true;
    } else if (f == '0') {
      ps.zero = true;
    } else if (f == '+' || f == ' ') {
      if (ps.spec.sign != '+') ps.spec.sign = f;
    } else if (f == '#') {
      ps.spec.alternate = true;
    } else {
      break;
    }
  }
  auto read_num = [&](int64_t* dst) -> Status {
    if (*i < fmt.size() && fmt[*i] == '*') {
      ++*i;
      ASTR_ASSIGN_OR_RETURN(const Value* w, args->Next());
      if (!w->is_integral()) return TypeError("* wants int");
      *dst = w->int_value();
      return OkStatus();
    }
    int64_t v = 0;
    bool any = false;
    while (*i < fmt.size() && fmt[*i] >= '0' && fmt[*i] <= '9' && v < 1000000) {
      v = v * 10 + (fmt[(*i)++] - '0');
      any = true;
    }
    if (any) *dst = v;
    return OkStatus();
  };
  ASTR_RETURN_IF_ERROR(read_num(&ps.spec.width));
  if (*i < fmt.size() && fmt[*i] == '.') {
    ++*i;
    ps.spec.precision = 0;
    ASTR_RETURN_IF_ERROR(read_num(&ps.spec.precision));
  }
  while (*i < fmt.size() && (fmt[*i] == 'h' || fmt[*i] == 'l' || fmt[*i] == 'L')) ++*i;
  if (*i >= fmt.size()) return ValueError("incomplete format");
  // `%*d` takes its width (and `%.*f` its precision) from the arguments: refused before the
  // padding or the digits are built when they would not fit.
  ASTR_RETURN_IF_ERROR(ReserveBytes(static_cast<size_t>(std::max<int64_t>(ps.spec.width, 0)) +
                                    static_cast<size_t>(std::max<int64_t>(ps.spec.precision, 0))));
  return ps;
}

}  // namespace

StatusOr<std::string> PercentFormat(std::string_view fmt, const Value& args) {
  PercentArgs pargs;
  if (args.is_tuple()) {
    pargs.positional = args.items();
  } else {
    pargs.positional.push_back(args);
    if (args.is_dict()) pargs.mapping = &args.dict();
    pargs.subscriptable =
        args.is_dict() || args.is_list() || args.is_range() || args.is_undefined();
  }
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    if (fmt[i] != '%') {
      out += fmt[i++];
      continue;
    }
    if (++i >= fmt.size()) return ValueError("incomplete format");
    ASTR_ASSIGN_OR_RETURN(PercentSpec ps, ParsePercentSpec(fmt, &i, &pargs));
    char conv = fmt[i++];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (std::string_view("sradiuxXoeEfFgGc").find(conv) == std::string_view::npos) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "unsupported format character '%c' (0x%x) at index %zu", conv,
                    static_cast<unsigned char>(conv), i - 1);
      return ValueError(buf);
    }
    const Value* arg = ps.named;
    if (arg == nullptr) {
      ASTR_ASSIGN_OR_RETURN(arg, pargs.Next());
    }
    ASTR_ASSIGN_OR_RETURN(std::string piece, PercentOne(conv, *arg, ps.spec, ps.left, ps.zero));
    out += piece;
  }
  if (!pargs.subscriptable && pargs.next < pargs.positional.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return out;
}

StatusOr<std::string> StrFormat(std::string_view fmt, const CallArgs& args,
                                const AttrLookup& get_attr) {
  std::string out;
  size_t auto_index = 0;
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      return ValueError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) return ValueError("expected '}' before end of string");
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    i = close + 1;
    std::string_view spec, conversion;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      conversion = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t name_end = field.find_first_of(".[");
    std::string_view first = field.substr(0, name_end);
    Value obj;
    if (first.empty() || (first.find_first_not_of("0123456789") == std::string_view::npos)) {
      size_t idx = first.empty() ? auto_index++ : std::stoul(std::string(first));
      if (idx >= args.positional.size()) {
        return InvalidArgumentError("IndexError: Replacement index " + std::to_string(idx) +
                                    " out of range for positional args tuple");
      }
      obj = args.positional[idx];
    } else {
      const Value* kw = args.Keyword(first);
      if (kw == nullptr) return InvalidArgumentError("KeyError: " + StrRepr(first));
      obj = *kw;
    }
    size_t p = name_end == std::string_view::npos ? field.size() : name_end;
    while (p < field.size()) {
      bool attr = field[p] == '.';
      size_t end = attr ? field.find_first_of(".[", p + 1) : field.find(']', p);
      if (end == std::string_view::npos) end = field.size();
      std::string_view key = field.substr(p + 1, end - p - 1);
      Value k = (!attr && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos)
                    ? Value::Int(std::stoll(std::string(key)))
                    : Value::Str(std::string(key));
      ASTR_ASSIGN_OR_RETURN(obj, get_attr(obj, k, attr));
      p = attr ? end : end + 1;
    }
    if (conversion == "r" || conversion == "a") {
      obj = Value::Str(Repr(obj));
    } else if (conversion == "s") {
      obj = Value::Str(ToStr(obj));
    }
    ASTR_ASSIGN_OR_RETURN(std::string piece, FormatValue(obj, spec));
    out += piece;
  }
  return out;
}

}  // namespace astr::jinja
