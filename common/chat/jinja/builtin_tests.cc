// jinja2's built-in tests (`x is defined`, `x is divisibleby 3`, select('equalto', ...)).
#include <map>

#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

using TestFn = StatusOr<bool> (*)(Interpreter&, const Value&, const CallArgs&);

StatusOr<const Value*> OneArg(const CallArgs& a, std::string_view test) {
  if (a.positional.size() + a.keyword.size() != 1) {
    return TypeError("test_" + std::string(test) + "() takes 2 positional arguments but " +
                     std::to_string(a.positional.size() + a.keyword.size() + 1) + " were given");
  }
  return a.positional.empty() ? &a.keyword[0].second : &a.positional[0];
}

StatusOr<Value> Mod2(const Value& v) { return BinaryOp("%", v, Value::Int(2)); }

StatusOr<bool> Odd(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return UndefinedUse(v);
  ASTR_ASSIGN_OR_RETURN(Value r, Mod2(v));
  return Equals(r, Value::Int(1));
}

StatusOr<bool> Even(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return UndefinedUse(v);
  ASTR_ASSIGN_OR_RETURN(Value r, Mod2(v));
  return Equals(r, Value::Int(0));
}

StatusOr<bool> DivisibleBy(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(const Value* n, OneArg(a, "divisibleby"));
  if (v.is_undefined()) return UndefinedUse(v);
  if (n->is_undefined()) return UndefinedUse(*n);
  ASTR_ASSIGN_OR_RETURN(Value r, BinaryOp("%", v, *n));
  return Equals(r, Value::Int(0));
}

StatusOr<bool> Defined(Interpreter&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
StatusOr<bool> Undefined(Interpreter&, const Value& v, const CallArgs&) { return v.is_undefined(); }
StatusOr<bool> None(Interpreter&, const Value& v, const CallArgs&) { return v.is_none(); }
StatusOr<bool> Boolean(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool(); }
StatusOr<bool> False(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_bool() && !v.bool_value();
}
StatusOr<bool> True(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_bool() && v.bool_value();
}
StatusOr<bool> Integer(Interpreter&, const Value& v, const CallArgs&) { return v.is_int(); }
StatusOr<bool> Float(Interpreter&, const Value& v, const CallArgs&) { return v.is_float(); }
StatusOr<bool> Number(Interpreter&, const Value& v, const CallArgs&) { return v.is_number(); }
StatusOr<bool> String(Interpreter&, const Value& v, const CallArgs&) { return v.is_string(); }
StatusOr<bool> Mapping(Interpreter&, const Value& v, const CallArgs&) { return v.is_dict(); }
// Undefined defines __call__ (to raise), so Python's callable() is true for it.
StatusOr<bool> Callable(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_callable() || v.is_undefined() ||
         (v.is_object() && v.object().type_name == "LoopContext");
}
StatusOr<bool> Escaped(Interpreter&, const Value& v, const CallArgs&) { return v.is_markup(); }

StatusOr<bool> Lower(Interpreter&, const Value& v, const CallArgs&) {
  bool cased = false;
  for (char32_t c : text::Decode(ToStr(v))) {
    if (!text::IsCased(c)) continue;
    cased = true;
    if (text::IsUpperChar(c)) return false;
  }
  return cased;
}

StatusOr<bool> Upper(Interpreter&, const Value& v, const CallArgs&) {
  bool cased = false;
  for (char32_t c : text::Decode(ToStr(v))) {
    if (!text::IsCased(c)) continue;
    cased = true;
    if (text::IsLowerChar(c)) return false;
  }
  return cased;
}

// len(value) and value.__getitem__ both exist.
StatusOr<bool> Sequence(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.has_items() || v.is_dict();
}

// iter(value) works.
StatusOr<bool> Iterable(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.has_items() || v.is_dict() || v.is_iterator();
}

StatusOr<bool> SameAs(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(const Value* other, OneArg(a, "sameas"));
  if (v.kind() != other->kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kBool:
      return v.bool_value() == other->bool_value();
    case Value::Kind::kInt:  // CPython caches small ints
      return v.int_value() == other->int_value() && v.int_value() >= -5 && v.int_value() <= 256;
    default:
      return v.identity() != nullptr && v.identity() == other->identity();
  }
}

StatusOr<bool> In(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(const Value* seq, OneArg(a, "in"));
  return Contains(*seq, v);
}

StatusOr<bool> FilterExists(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_string() && IsBuiltinFilter(v.str());
}
StatusOr<bool> TestExists(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_string() && IsBuiltinTest(v.str());
}

// The operator-module tests (operator.eq & co.).
template <const char* kOp, const char* kName>
StatusOr<bool> CompareTest(Interpreter&, const Value& v, const CallArgs& a) {
  if (a.positional.size() + a.keyword.size() != 1) {
    const std::string name = kName;
    if (!a.keyword.empty()) return TypeError(name + "() takes no keyword arguments");
    return TypeError(name + " expected 2 arguments, got " +
                     std::to_string(a.positional.size() + 1));
  }
  return Compare(v, a.positional[0], kOp);
}
constexpr char kEq[] = "==";
constexpr char kNe[] = "!=";
constexpr char kGt[] = ">";
constexpr char kGe[] = ">=";
constexpr char kLt[] = "<";
constexpr char kLe[] = "<=";
constexpr char kEqName[] = "eq";
constexpr char kNeName[] = "ne";
constexpr char kGtName[] = "gt";
constexpr char kGeName[] = "ge";
constexpr char kLtName[] = "lt";
constexpr char kLeName[] = "le";

const std::map<std::string_view, TestFn>& TestTable() {
  static const auto* table = new std::map<std::string_view, TestFn>{
      {"odd", Odd},
      {"even", Even},
      {"divisibleby", DivisibleBy},
      {"defined", Defined},
      {"undefined", Undefined},
      {"filter", FilterExists},
      {"test", TestExists},
      {"none", None},
      {"boolean", Boolean},
      {"false", False},
      {"true", True},
      {"integer", Integer},
      {"float", Float},
      {"lower", Lower},
      {"upper", Upper},
      {"string", String},
      {"mapping", Mapping},
      {"number", Number},
      {"sequence", Sequence},
      {"iterable", Iterable},
      {"callable", Callable},
      {"sameas", SameAs},
      {"escaped", Escaped},
      {"in", In},
      {"==", CompareTest<kEq, kEqName>},
      {"eq", CompareTest<kEq, kEqName>},
      {"equalto", CompareTest<kEq, kEqName>},
      {"!=", CompareTest<kNe, kNeName>},
      {"ne", CompareTest<kNe, kNeName>},
      {">", CompareTest<kGt, kGtName>},
      {"gt", CompareTest<kGt, kGtName>},
      {"greaterthan", CompareTest<kGt, kGtName>},
      {">=", CompareTest<kGe, kGeName>},
      {"ge", CompareTest<kGe, kGeName>},
      {"<", CompareTest<kLt, kLtName>},
      {"lt", CompareTest<kLt, kLtName>},
      {"lessthan", CompareTest<kLt, kLtName>},
      {"<=", CompareTest<kLe, kLeName>},
      {"le", CompareTest<kLe, kLeName>},
  };
  return *table;
}

}  // namespace

bool IsBuiltinTest(std::string_view name) { return TestTable().count(name) > 0; }

StatusOr<bool> CallTest(Interpreter& interp, std::string_view name, const Value& value,
                        const CallArgs& args) {
  const auto& table = TestTable();
  auto it = table.find(name);
  if (it == table.end()) return RuntimeError("No test named '" + std::string(name) + "'.");
  return it->second(interp, value, args);
}

}  // namespace astr::jinja
