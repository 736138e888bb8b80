// Python semantics of + - * / // % ** on template values, indexing and slicing.
#include <cmath>

#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/py_format.h"
#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return TypeError("unsupported operand type(s) for " + std::string(op) + ": '" + TypeName(a) +
                   "' and '" + TypeName(b) + "'");
}

Status ZeroDivision(const std::string& message) {
  return InvalidArgumentError("ZeroDivisionError: " + message);
}

Status Overflow() { return InvalidArgumentError("OverflowError: integer result too large"); }

StatusOr<Value> Add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      int64_t r;
      if (__builtin_add_overflow(a.int_value(), b.int_value(), &r)) return Overflow();
      return Value::Int(r);
    }
    return Value::Float(a.number_value() + b.number_value());
  }
  if (a.is_string() && b.is_string()) {
    ASTR_RETURN_IF_ERROR(ReserveBytes(a.str().size() + b.str().size()));
    if (a.is_markup() == b.is_markup()) {
      std::string s = a.str() + b.str();
      return a.is_markup() ? Value::Markup(std::move(s)) : Value::Str(std::move(s));
    }
    // markupsafe.Markup escapes the plain str it is added to.
    return Value::Markup((a.is_markup() ? a.str() : HtmlEscape(a.str())) +
                         (b.is_markup() ? b.str() : HtmlEscape(b.str())));
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    ASTR_RETURN_IF_ERROR(ReserveBytes((a.items().size() + b.items().size()) * sizeof(Value)));
    ValueList items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return a.is_list() ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
  }
  if (a.is_markup()) return Unsupported("+", a, b);  // Markup.__add__ takes only strings
  if (a.is_string() || a.is_list() || a.is_tuple()) {
    std::string t = a.is_string() ? "str" : TypeName(a);
    return TypeError("can only concatenate " + t + " (not \"" + TypeName(b) + "\") to " + t);
  }
  return Unsupported("+", a, b);
}

StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  // An empty operand repeats to itself whatever the count: no loop of n empty appends ('' * 10**12
  // took hours).
  if (n < 0 || (seq.is_string() ? seq.str().empty() : seq.items().empty())) n = 0;
  // The result may be far larger than the operands: refused before anything is allocated.
  if (seq.is_string()) {
    ASTR_RETURN_IF_ERROR(ReserveBytes(SaturatingMul(seq.str().size(), static_cast<size_t>(n))));
    std::string out;
    out.reserve(seq.str().size() * n);
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return seq.is_markup() ? Value::Markup(std::move(out)) : Value::Str(std::move(out));
  }
  ASTR_RETURN_IF_ERROR(
      ReserveBytes(SaturatingMul(seq.items().size() * sizeof(Value), static_cast<size_t>(n))));
  ValueList out;
  out.reserve(seq.items().size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_list() ? Value::List(std::move(out)) : Value::Tuple(std::move(out));
}

StatusOr<Value> Mul(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      int64_t r;
      if (__builtin_mul_overflow(a.int_value(), b.int_value(), &r)) return Overflow();
      return Value::Int(r);
    }
    return Value::Float(a.number_value() * b.number_value());
  }
  if (a.is_markup() || b.is_markup()) {
    // Markup.__mul__ / __rmul__ hand the other operand to str.__mul__.
    const Value& other = a.is_markup() ? b : a;
    const Value& markup = a.is_markup() ? a : b;
    if (!other.is_integral()) {
      return TypeError(StrRepr(TypeName(other)) + " object cannot be interpreted as an integer");
    }
    return Repeat(markup, other.int_value());
  }
  auto is_seq = [](const Value& v) { return v.is_string() || v.is_sequence(); };
  if (is_seq(a) && b.is_integral()) return Repeat(a, b.int_value());
  if (a.is_integral() && is_seq(b)) return Repeat(b, a.int_value());
  if (is_seq(a) || is_seq(b)) {
    return TypeError("can't multiply sequence by non-int of type '" + TypeName(is_seq(a) ? b : a) +
                     "'");
  }
  return Unsupported("*", a, b);
}

int64_t FloorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

StatusOr<Value> Arith(std::string_view op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) {
    return Unsupported(op == "**" ? "** or pow()" : op, a, b);
  }
  bool ints = a.is_integral() && b.is_integral();
  double x = a.number_value(), y = b.number_value();
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.int_value(), b.int_value(), &r)) return Overflow();
      return Value::Int(r);
    }
    return Value::Float(x - y);
  }
  if (op == "/") {
    if (y == 0) return ZeroDivision(ints ? "division by zero" : "float division by zero");
    return Value::Float(x / y);
  }
  if (op == "//") {
    if (y == 0) {
      return ZeroDivision(ints ? "integer division or modulo by zero"
                               : "float floor division by zero");
    }
    if (ints) {
      if (a.int_value() == INT64_MIN && b.int_value() == -1) return Overflow();
      return Value::Int(FloorDivInt(a.int_value(), b.int_value()));
    }
    return Value::Float(std::floor(x / y));
  }
  if (op == "%") {
    if (y == 0) return ZeroDivision(ints ? "integer modulo by zero" : "float modulo");
    if (ints) {
      if (b.int_value() == -1) return Value::Int(0);
      int64_t r = a.int_value() % b.int_value();
      if (r != 0 && ((r < 0) != (b.int_value() < 0))) r += b.int_value();
      return Value::Int(r);
    }
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    if (r == 0) r = std::copysign(0.0, y);
    return Value::Float(r);
  }
  // "**"
  if (ints && b.int_value() >= 0) {
    int64_t base = a.int_value(), result = 1;
    for (int64_t e = b.int_value(); e > 0; --e) {
      if (__builtin_mul_overflow(result, base, &result)) return Overflow();
      if (result == 0 || result == 1) break;
    }
    return Value::Int(result);
  }
  if (x == 0 && y < 0) return ZeroDivision("0.0 cannot be raised to a negative power");
  double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
    return InvalidArgumentError("OverflowError: (34, 'Numerical result out of range')");
  }
  return Value::Float(r);
}

}  // namespace

StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "+") return Add(a, b);
  if (op == "*") return Mul(a, b);
  if (op == "%" && a.is_string()) {
    ASTR_ASSIGN_OR_RETURN(std::string s, PercentFormat(a.str(), b));
    return a.is_markup() ? Value::Markup(std::move(s)) : Value::Str(std::move(s));
  }
  return Arith(op, a, b);
}

std::optional<Value> IndexSequence(const Value& obj, int64_t index) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (text::IsAscii(s)) {
      int64_t n = static_cast<int64_t>(s.size());
      if (index < 0) index += n;
      if (index < 0 || index >= n) return std::nullopt;
      std::string one(1, s[index]);
      return obj.is_markup() ? Value::Markup(std::move(one)) : Value::Str(std::move(one));
    }
    std::u32string cps = text::Decode(s);
    int64_t n = static_cast<int64_t>(cps.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return std::nullopt;
    std::string out;
    text::AppendUtf8(&out, cps[index]);
    return obj.is_markup() ? Value::Markup(std::move(out)) : Value::Str(std::move(out));
  }
  const ValueList& items = obj.items();
  int64_t n = static_cast<int64_t>(items.size());
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return items[index];
}

StatusOr<Value> SliceValue(const Value& obj, const Value& start, const Value& stop,
                           const Value& step) {
  int64_t st = step.is_none() || step.is_undefined() ? 1 : step.int_value();
  if (st == 0) return ValueError("slice step cannot be zero");
  std::u32string cps;
  bool ascii = obj.is_string() && text::IsAscii(obj.str());
  if (obj.is_string() && !ascii) cps = text::Decode(obj.str());
  int64_t n = obj.is_string() ? (ascii ? static_cast<int64_t>(obj.str().size())
                                       : static_cast<int64_t>(cps.size()))
                              : static_cast<int64_t>(obj.items().size());
  auto clamp = [&](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = v.int_value();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  int64_t e = clamp(stop, st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  SpendText(idx.size());  // the indices and the per-item copy below
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : idx) {
      if (ascii) {
        out += obj.str()[i];
      } else {
        text::AppendUtf8(&out, cps[i]);
      }
    }
    return obj.is_markup() ? Value::Markup(std::move(out)) : Value::Str(std::move(out));
  }
  if (obj.is_range()) {
    // range(10)[2:8:2] is range(2, 8, 4): the clamped slice bounds mapped through the range.
    const int64_t* r = obj.range_params();
    return Value::Range(r[0] + b * r[2], r[0] + e * r[2], r[2] * st);
  }
  ValueList out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(obj.items()[i]);
  return obj.is_list() ? Value::List(std::move(out)) : Value::Tuple(std::move(out));
}

}  // namespace astr::jinja
