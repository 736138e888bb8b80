// Expression half of the parser: precedence climbing exactly as jinja2's parser.py.
#include <algorithm>

#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/parser_impl.h"

namespace astr::jinja::internal {

StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Fail("expression nesting too deep");
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

StatusOr<ExprPtr> Parser::ParseCondExpr() {
  SourcePos pos = Here();
  ASTR_ASSIGN_OR_RETURN(ExprPtr expr1, ParseOr());
  while (SkipName("if")) {
    ExprPtr cond = MakeExpr(ExprKind::kCondExpr, pos);
    // Unknown filters / tests inside a conditional expression fail only when evaluated.
    ++soft_depth_;
    StatusOr<ExprPtr> test = ParseOr();
    ExprPtr otherwise;
    if (test.ok() && SkipName("else")) {
      StatusOr<ExprPtr> e = ParseCondExpr();
      if (!e.ok()) test = e.status();
      if (e.ok()) otherwise = std::move(*e);
    }
    --soft_depth_;
    ASTR_RETURN_IF_ERROR(test.status());
    cond->children.push_back(std::move(*test));
    cond->children.push_back(std::move(expr1));
    cond->children.push_back(std::move(otherwise));
    expr1 = std::move(cond);
    pos = Here();
  }
  return expr1;
}

StatusOr<ExprPtr> Parser::ParseKeywordChain(const char* keyword,
                                            StatusOr<ExprPtr> (Parser::*operand)()) {
  SourcePos pos = Here();
  ASTR_ASSIGN_OR_RETURN(ExprPtr left, (this->*operand)());
  while (SkipName(keyword)) {
    ASTR_ASSIGN_OR_RETURN(ExprPtr right, (this->*operand)());
    ExprPtr node = MakeExpr(ExprKind::kBinary, pos);
    node->name = keyword;
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    left = std::move(node);
    pos = Here();
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseOr() { return ParseKeywordChain("or", &Parser::ParseAnd); }

StatusOr<ExprPtr> Parser::ParseAnd() { return ParseKeywordChain("and", &Parser::ParseNot); }

StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    SourcePos pos = Here();
    Next();
    DepthGuard guard(&depth_);
    if (guard.too_deep()) return Fail("expression nesting too deep");
    ASTR_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    ExprPtr node = MakeExpr(ExprKind::kNot, pos);
    node->children.push_back(std::move(operand));
    return node;
  }
  return ParseCompare();
}

StatusOr<ExprPtr> Parser::ParseCompare() {
  SourcePos pos = Here();
  ASTR_ASSIGN_OR_RETURN(ExprPtr expr, ParseMath1());
  ExprPtr node;
  while (true) {
    std::string op;
    if (Cur().type == TokenType::kOperator &&
        (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
         Cur().text == ">" || Cur().text == ">=")) {
      op = Cur().text;
      Next();
    } else if (SkipName("in")) {
      op = "in";
    } else if (IsName("not") && Look().type == TokenType::kName && Look().text == "in") {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    ASTR_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
    if (node == nullptr) {
      node = MakeExpr(ExprKind::kCompare, pos);
      node->children.push_back(std::move(expr));
    }
    node->ops.push_back(op);
    node->children.push_back(std::move(right));
    pos = Here();
  }
  if (node == nullptr) return expr;
  node->pos = pos;
  return node;
}

namespace {

ExprPtr MakeBinary(const std::string& op, ExprPtr left, ExprPtr right, SourcePos pos) {
  auto node = std::make_unique<Expr>();
  node->kind = ExprKind::kBinary;
  node->pos = pos;
  node->name = op;
  node->children.push_back(std::move(left));
  node->children.push_back(std::move(right));
  return node;
}

}  // namespace

StatusOr<ExprPtr> Parser::ParseMath1() {
  SourcePos pos = Here();
  ASTR_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    std::string op = Cur().text;
    Next();
    ASTR_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    left = MakeBinary(op, std::move(left), std::move(right), pos);
    pos = Here();
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseConcat() {
  SourcePos pos = Here();
  ASTR_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!IsOp("~")) return first;
  ExprPtr node = MakeExpr(ExprKind::kConcat, pos);
  node->children.push_back(std::move(first));
  while (SkipOp("~")) {
    ASTR_ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
    node->children.push_back(std::move(next));
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParseMath2() {
  SourcePos pos = Here();
  ASTR_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    std::string op = Cur().text;
    Next();
    ASTR_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    left = MakeBinary(op, std::move(left), std::move(right), pos);
    pos = Here();
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParsePow() {
  SourcePos pos = Here();
  ASTR_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary());
  while (SkipOp("**")) {
    ASTR_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary());
    left = MakeBinary("**", std::move(left), std::move(right), pos);
    pos = Here();
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Fail("expression nesting too deep");
  SourcePos pos = Here();
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    ExprKind kind = IsOp("-") ? ExprKind::kNeg : ExprKind::kPos;
    Next();
    ASTR_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node = MakeExpr(kind, pos);
    node->children.push_back(std::move(operand));
  } else {
    ASTR_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ASTR_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    ASTR_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParsePrimary(bool with_namespace) {
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Fail("expression nesting too deep");
  const Token& tok = Cur();
  SourcePos pos = PosOf(tok);
  switch (tok.type) {
    case TokenType::kName: {
      std::string name = tok.text;
      Next();
      if (name == "true" || name == "false" || name == "True" || name == "False") {
        ExprPtr c = MakeExpr(ExprKind::kConst, pos);
        c->value = Value::Bool(name == "true" || name == "True");
        return c;
      }
      if (name == "none" || name == "None") {
        ExprPtr c = MakeExpr(ExprKind::kConst, pos);
        c->value = Value::None();
        return c;
      }
      if (with_namespace && IsOp(".")) {
        Next();
        ExprPtr ref = MakeExpr(ExprKind::kNsRef, pos);
        ref->name = name;
        ASTR_ASSIGN_OR_RETURN(ref->attr, ExpectName());
        return ref;
      }
      ExprPtr n = MakeExpr(ExprKind::kName, pos);
      n->name = std::move(name);
      return n;
    }
    case TokenType::kString: {
      std::string s = tok.text;
      Next();
      while (Cur().type == TokenType::kString) {
        s += Cur().text;
        Next();
      }
      ExprPtr c = MakeExpr(ExprKind::kConst, pos);
      c->value = Value::Str(std::move(s));
      return c;
    }
    case TokenType::kInteger:
    case TokenType::kFloat: {
      ExprPtr c = MakeExpr(ExprKind::kConst, pos);
      c->value = tok.type == TokenType::kInteger ? Value::Int(tok.int_value)
                                                 : Value::Float(tok.float_value);
      Next();
      return c;
    }
    case TokenType::kOperator:
      if (tok.text == "(") {
        Next();
        ASTR_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(false, true, {}, true));
        ASTR_RETURN_IF_ERROR(ExpectOp(")"));
        return inner;
      }
      if (tok.text == "[") return ParseList();
      if (tok.text == "{") return ParseDict();
      break;
    default:
      break;
  }
  if (tok.type == TokenType::kEof) return Fail("unexpected end of template");
  return Fail("unexpected '" + DescribeToken(tok) + "'");
}

bool Parser::IsTupleEnd(const std::vector<std::string>& extra_end) const {
  if (Cur().type == TokenType::kVariableEnd || Cur().type == TokenType::kBlockEnd || IsOp(")")) {
    return true;
  }
  return Cur().type == TokenType::kName &&
         std::find(extra_end.begin(), extra_end.end(), Cur().text) != extra_end.end();
}

StatusOr<ExprPtr> Parser::ParseTuple(bool simplified, bool with_condexpr,
                                     const std::vector<std::string>& extra_end,
                                     bool explicit_parentheses, bool with_namespace) {
  SourcePos pos = Here();
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) ASTR_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    StatusOr<ExprPtr> item =
        simplified ? ParsePrimary(with_namespace) : ParseExpression(with_condexpr);
    ASTR_RETURN_IF_ERROR(item.status());
    args.push_back(std::move(*item));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
    pos = Here();
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) {
      return Fail("Expected an expression, got '" + DescribeToken(Cur()) + "'");
    }
  }
  ExprPtr tuple = MakeExpr(ExprKind::kTuple, pos);
  tuple->children = std::move(args);
  return tuple;
}

StatusOr<ExprPtr> Parser::ParseList() {
  ExprPtr list = MakeExpr(ExprKind::kList, Here());
  ASTR_RETURN_IF_ERROR(ExpectOp("["));
  while (!IsOp("]")) {
    if (!list->children.empty()) ASTR_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("]")) break;
    ASTR_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    list->children.push_back(std::move(item));
  }
  ASTR_RETURN_IF_ERROR(ExpectOp("]"));
  return list;
}

StatusOr<ExprPtr> Parser::ParseDict() {
  ExprPtr dict = MakeExpr(ExprKind::kDict, Here());
  ASTR_RETURN_IF_ERROR(ExpectOp("{"));
  while (!IsOp("}")) {
    if (!dict->children.empty()) ASTR_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("}")) break;
    ASTR_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    ASTR_RETURN_IF_ERROR(ExpectOp(":"));
    ASTR_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    dict->children.push_back(std::move(key));
    dict->children.push_back(std::move(value));
  }
  ASTR_RETURN_IF_ERROR(ExpectOp("}"));
  return dict;
}

StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      ASTR_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      ExprPtr call = MakeExpr(ExprKind::kCall, Here());
      call->children.push_back(std::move(node));
      ASTR_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      ASTR_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
    } else if (IsName("is")) {
      ASTR_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      ExprPtr call = MakeExpr(ExprKind::kCall, Here());
      call->children.push_back(std::move(node));
      ASTR_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  SourcePos pos = Here();
  if (SkipOp(".")) {
    const Token& attr = Cur();
    if (attr.type == TokenType::kName) {
      ExprPtr get = MakeExpr(ExprKind::kGetattr, pos);
      get->name = attr.text;
      get->children.push_back(std::move(node));
      Next();
      return get;
    }
    if (attr.type != TokenType::kInteger) return Fail("expected name or number");
    ExprPtr get = MakeExpr(ExprKind::kGetitem, pos);
    ExprPtr index = MakeExpr(ExprKind::kConst, PosOf(attr));
    index->value = Value::Int(attr.int_value);
    Next();
    get->children.push_back(std::move(node));
    get->children.push_back(std::move(index));
    return get;
  }
  ASTR_RETURN_IF_ERROR(ExpectOp("["));
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) ASTR_RETURN_IF_ERROR(ExpectOp(","));
    ASTR_ASSIGN_OR_RETURN(ExprPtr arg, ParseSubscribed());
    args.push_back(std::move(arg));
  }
  ASTR_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr get = MakeExpr(ExprKind::kGetitem, pos);
  get->children.push_back(std::move(node));
  if (args.size() == 1) {
    get->children.push_back(std::move(args[0]));
  } else {
    ExprPtr tuple = MakeExpr(ExprKind::kTuple, pos);
    tuple->children = std::move(args);
    get->children.push_back(std::move(tuple));
  }
  return get;
}

StatusOr<ExprPtr> Parser::ParseSubscribed() {
  SourcePos pos = Here();
  ExprPtr slice = MakeExpr(ExprKind::kSlice, pos);
  if (SkipOp(":")) {
    slice->children.push_back(nullptr);
  } else {
    ASTR_ASSIGN_OR_RETURN(ExprPtr node, ParseExpression());
    if (!SkipOp(":")) return node;
    slice->children.push_back(std::move(node));
  }
  auto at_end = [&] { return IsOp("]") || IsOp(","); };
  if (IsOp(":") || at_end()) {
    slice->children.push_back(nullptr);
  } else {
    ASTR_ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression());
    slice->children.push_back(std::move(stop));
  }
  if (SkipOp(":") && !at_end()) {
    ASTR_ASSIGN_OR_RETURN(ExprPtr step, ParseExpression());
    slice->children.push_back(std::move(step));
  } else {
    slice->children.push_back(nullptr);
  }
  return slice;
}

Status Parser::ParseCallArgs(Expr* call) {
  const Token open = Cur();
  ASTR_RETURN_IF_ERROR(ExpectOp("("));
  auto ensure = [&](bool ok) -> Status {
    return ok ? OkStatus() : Fail("invalid syntax for function call expression", open);
  };
  bool require_comma = false;
  while (!IsOp(")")) {
    if (require_comma) {
      ASTR_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    if (IsOp("*")) {
      ASTR_RETURN_IF_ERROR(ensure(call->dyn_args == nullptr && call->dyn_kwargs == nullptr));
      Next();
      ASTR_ASSIGN_OR_RETURN(call->dyn_args, ParseExpression());
    } else if (IsOp("**")) {
      ASTR_RETURN_IF_ERROR(ensure(call->dyn_kwargs == nullptr));
      Next();
      ASTR_ASSIGN_OR_RETURN(call->dyn_kwargs, ParseExpression());
    } else if (Cur().type == TokenType::kName && Look().type == TokenType::kOperator &&
               Look().text == "=") {
      ASTR_RETURN_IF_ERROR(ensure(call->dyn_kwargs == nullptr));
      std::string key = Cur().text;
      Next();
      Next();
      ASTR_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      ASTR_RETURN_IF_ERROR(
          ensure(call->dyn_args == nullptr && call->dyn_kwargs == nullptr && call->kwargs.empty()));
      ASTR_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
      call->args.push_back(std::move(arg));
    }
    require_comma = true;
  }
  return ExpectOp(")");
}

StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) Next();
    SourcePos pos = Here();
    ASTR_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      ASTR_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    if (soft_depth_ == 0 && !IsBuiltinFilter(name)) {
      return Fail("No filter named '" + name + "'.");
    }
    ExprPtr filter = MakeExpr(ExprKind::kFilter, pos);
    filter->name = std::move(name);
    filter->children.push_back(std::move(node));
    if (IsOp("(")) ASTR_RETURN_IF_ERROR(ParseCallArgs(filter.get()));
    node = std::move(filter);
    start_inline = false;
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  SourcePos pos = Here();
  Next();  // 'is'
  bool negated = SkipName("not");
  ASTR_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (SkipOp(".")) {
    ASTR_ASSIGN_OR_RETURN(std::string part, ExpectName());
    name += "." + part;
  }
  if (soft_depth_ == 0 && !IsBuiltinTest(name)) return Fail("No test named '" + name + "'.");
  ExprPtr test = MakeExpr(ExprKind::kTest, pos);
  test->name = std::move(name);
  test->children.push_back(std::move(node));
  const Token& cur = Cur();
  bool arg_start =
      cur.type == TokenType::kName || cur.type == TokenType::kString ||
      cur.type == TokenType::kInteger || cur.type == TokenType::kFloat ||
      (cur.type == TokenType::kOperator && (cur.text == "(" || cur.text == "[" || cur.text == "{"));
  if (IsOp("(")) {
    ASTR_RETURN_IF_ERROR(ParseCallArgs(test.get()));
  } else if (arg_start && !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Fail("You cannot chain multiple tests with is");
    ASTR_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    ASTR_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  if (!negated) return test;
  ExprPtr neg = MakeExpr(ExprKind::kNot, pos);
  neg->children.push_back(std::move(test));
  return neg;
}

}  // namespace astr::jinja::internal
