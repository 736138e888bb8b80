// Expression evaluation of the interpreter.
#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/interpreter.h"

namespace astr::jinja {

StatusOr<Value> Interpreter::Eval(const Expr& expr, const FramePtr& frame) {
  StatusOr<Value> r = budget_->Step() ? EvalExpr(expr, frame) : budget_->status();
  // A builtin that ran over the budget marks it exhausted; the expression then fails.
  if (r.ok() && !budget_->ok()) r = budget_->status();
  if (!r.ok()) NoteError(expr.pos);
  return r;
}

StatusOr<Value> Interpreter::EvalExpr(const Expr& expr, const FramePtr& frame) {
  switch (expr.kind) {
    case ExprKind::kConst:
      return expr.value;
    case ExprKind::kName: {
      const Value* v = frame->Find(expr.name);
      return v != nullptr ? *v : Value::UndefinedName(expr.name);
    }
    case ExprKind::kNsRef:
      return RuntimeError("namespace reference outside an assignment");
    case ExprKind::kGetattr: {
      ASTR_ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], frame));
      return GetAttr(obj, expr.name);
    }
    case ExprKind::kGetitem:
      return EvalGetitem(expr, frame);
    case ExprKind::kSlice:
      return TypeError("slice outside a subscript");
    case ExprKind::kCall: {
      ASTR_ASSIGN_OR_RETURN(Value callee, Eval(*expr.children[0], frame));
      ASTR_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, frame));
      return CallValue(callee, std::move(args));
    }
    case ExprKind::kFilter:
      return EvalFilter(expr, frame);
    case ExprKind::kTest: {
      ASTR_ASSIGN_OR_RETURN(Value v, Eval(*expr.children[0], frame));
      ASTR_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, frame));
      // An unknown test the parser let through (inside an `if`) fails only when reached.
      if (!IsBuiltinTest(expr.name))
        return RuntimeError("No test named '" + expr.name + "' found.");
      ASTR_ASSIGN_OR_RETURN(bool r, CallTest(*this, expr.name, v, args));
      return Value::Bool(r);
    }
    case ExprKind::kNot: {
      ASTR_ASSIGN_OR_RETURN(Value v, Eval(*expr.children[0], frame));
      return Value::Bool(!Truthy(v));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      ASTR_ASSIGN_OR_RETURN(Value v, Eval(*expr.children[0], frame));
      bool neg = expr.kind == ExprKind::kNeg;
      if (v.is_undefined()) return UndefinedUse(v);
      if (v.is_float()) return Value::Float(neg ? -v.number_value() : v.number_value());
      if (v.is_integral()) return Value::Int(neg ? -v.int_value() : v.int_value());
      return TypeError(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" +
                       TypeName(v) + "'");
    }
    case ExprKind::kBinary:
      return EvalBinary(expr, frame);
    case ExprKind::kConcat: {
      std::string out;
      for (const ExprPtr& child : expr.children) {
        ASTR_ASSIGN_OR_RETURN(Value v, Eval(*child, frame));
        std::string piece = ToStr(v);
        ASTR_RETURN_IF_ERROR(ReserveBytes(out.size() + piece.size()));
        out += piece;
      }
      return Value::Str(std::move(out));
    }
    case ExprKind::kCompare:
      return EvalCompare(expr, frame);
    case ExprKind::kCondExpr: {
      ASTR_ASSIGN_OR_RETURN(Value test, Eval(*expr.children[0], frame));
      if (Truthy(test)) return Eval(*expr.children[1], frame);
      if (expr.children[2] != nullptr) return Eval(*expr.children[2], frame);
      return Value::UndefinedHint("the inline if-expression on line " +
                                  std::to_string(expr.pos.line) +
                                  " evaluated to false and no else section was defined.");
    }
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return EvalLiteral(expr, frame);
  }
  return InternalError("unknown expression");
}

StatusOr<Value> Interpreter::EvalLiteral(const Expr& expr, const FramePtr& frame) {
  if (expr.kind == ExprKind::kDict) {
    DictData d;
    for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
      ASTR_ASSIGN_OR_RETURN(Value k, Eval(*expr.children[i], frame));
      ASTR_ASSIGN_OR_RETURN(Value v, Eval(*expr.children[i + 1], frame));
      ASTR_RETURN_IF_ERROR(CheckHashable(k));
      d.Set(std::move(k), std::move(v));
    }
    return Value::Dict(std::move(d));
  }
  ValueList items;
  items.reserve(expr.children.size());
  for (const ExprPtr& child : expr.children) {
    ASTR_ASSIGN_OR_RETURN(Value v, Eval(*child, frame));
    items.push_back(std::move(v));
  }
  return expr.kind == ExprKind::kList ? Value::List(std::move(items))
                                      : Value::Tuple(std::move(items));
}

StatusOr<Value> Interpreter::EvalGetitem(const Expr& expr, const FramePtr& frame) {
  ASTR_ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], frame));
  const Expr& key_expr = *expr.children[1];
  if (key_expr.kind != ExprKind::kSlice) {
    ASTR_ASSIGN_OR_RETURN(Value key, Eval(key_expr, frame));
    return GetItem(obj, key);
  }
  Value bounds[3] = {Value::None(), Value::None(), Value::None()};
  for (int i = 0; i < 3; ++i) {
    if (key_expr.children[i] != nullptr) {
      ASTR_ASSIGN_OR_RETURN(bounds[i], Eval(*key_expr.children[i], frame));
    }
  }
  if (obj.is_undefined()) return UndefinedUse(obj);
  if (!obj.is_string() && !obj.has_items()) {
    return Value::UndefinedAttr(obj, Value::Str("slice(" + Repr(bounds[0]) + ", " +
                                                Repr(bounds[1]) + ", " + Repr(bounds[2]) + ")"));
  }
  for (const Value& b : bounds) {
    if (!b.is_none() && !b.is_integral()) {
      return Value::UndefinedAttr(obj, Value::Str("slice"));
    }
  }
  return SliceValue(obj, bounds[0], bounds[1], bounds[2]);
}

StatusOr<Value> Interpreter::EvalCompare(const Expr& expr, const FramePtr& frame) {
  ASTR_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], frame));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    ASTR_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[i + 1], frame));
    const std::string& op = expr.ops[i];
    bool result = false;
    if (op == "in" || op == "notin") {
      ASTR_ASSIGN_OR_RETURN(bool in, Contains(right, left));
      result = op == "in" ? in : !in;
    } else {
      ASTR_ASSIGN_OR_RETURN(result, Compare(left, right, op));
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

StatusOr<Value> Interpreter::EvalBinary(const Expr& expr, const FramePtr& frame) {
  ASTR_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], frame));
  if (expr.name == "and") {
    if (!Truthy(left)) return left;
    return Eval(*expr.children[1], frame);
  }
  if (expr.name == "or") {
    if (Truthy(left)) return left;
    return Eval(*expr.children[1], frame);
  }
  ASTR_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[1], frame));
  if (left.is_undefined()) return UndefinedUse(left);
  // `str % x` formats even an undefined x (Python sees a mapping); other operators raise.
  bool str_format = expr.name == "%" && left.is_string();
  if (right.is_undefined() && !str_format) return UndefinedUse(right);
  return BinaryOp(expr.name, left, right);
}

StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& expr, const FramePtr& frame) {
  CallArgs args;
  for (const ExprPtr& a : expr.args) {
    ASTR_ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
    args.positional.push_back(std::move(v));
  }
  if (expr.dyn_args != nullptr) {
    ASTR_ASSIGN_OR_RETURN(Value v, Eval(*expr.dyn_args, frame));
    ASTR_ASSIGN_OR_RETURN(ValueList extra, Iterate(v));
    for (Value& e : extra) args.positional.push_back(std::move(e));
  }
  for (const auto& [k, e] : expr.kwargs) {
    ASTR_ASSIGN_OR_RETURN(Value v, Eval(*e, frame));
    args.keyword.emplace_back(k, std::move(v));
  }
  if (expr.dyn_kwargs != nullptr) {
    ASTR_ASSIGN_OR_RETURN(Value v, Eval(*expr.dyn_kwargs, frame));
    if (!v.is_dict()) return TypeError("argument after ** must be a mapping, not " + TypeName(v));
    for (const auto& [k, val] : v.dict().items) {
      if (!k.is_string()) return TypeError("keywords must be strings");
      args.keyword.emplace_back(k.str(), val);
    }
  }
  return args;
}

StatusOr<Value> Interpreter::EvalFilter(const Expr& expr, const FramePtr& frame) {
  Value input;
  if (expr.children[0] != nullptr) {
    ASTR_ASSIGN_OR_RETURN(input, Eval(*expr.children[0], frame));
  } else if (!filter_inputs_.empty()) {
    input = filter_inputs_.back();
  }
  ASTR_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, frame));
  // An unknown filter the parser let through (inside an `if`) fails only when reached.
  if (!IsBuiltinFilter(expr.name)) {
    return RuntimeError("No filter named '" + expr.name + "' found.");
  }
  return CallFilter(*this, expr.name, input, args);
}

}  // namespace astr::jinja
