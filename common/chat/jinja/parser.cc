#include "common/chat/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/parser_impl.h"

namespace astr::jinja {
namespace internal {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string JoinQuoted(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += " or ";
    out += Quote(v[i]);
  }
  return out;
}

}  // namespace

StatusOr<StmtList> Parser::Subparse(const std::vector<std::string>& end_tokens) {
  StmtList body;
  if (!end_tokens.empty()) end_token_stack_.push_back(end_tokens);
  auto pop = [&] {
    if (!end_tokens.empty()) end_token_stack_.pop_back();
  };
  while (Cur().type != TokenType::kEof) {
    const Token& tok = Cur();
    if (tok.type == TokenType::kData) {
      StmtPtr s = MakeStmt(StmtKind::kText, PosOf(tok));
      s->text = tok.text;
      body.push_back(std::move(s));
      Next();
    } else if (tok.type == TokenType::kVariableBegin) {
      Next();
      SourcePos pos = Here();
      auto expr = ParseTuple(false, true, {}, false);
      if (!expr.ok()) {
        pop();
        return expr.status();
      }
      StmtPtr s = MakeStmt(StmtKind::kOutput, pos);
      s->expr = std::move(*expr);
      body.push_back(std::move(s));
      if (Status st = ExpectType(TokenType::kVariableEnd, "'end of print statement'"); !st.ok()) {
        pop();
        return st;
      }
    } else if (tok.type == TokenType::kBlockBegin) {
      Next();
      if (!end_tokens.empty() && Cur().type == TokenType::kName &&
          std::find(end_tokens.begin(), end_tokens.end(), Cur().text) != end_tokens.end()) {
        pop();
        return body;
      }
      auto stmt = ParseStatement();
      if (!stmt.ok()) {
        pop();
        return stmt.status();
      }
      body.push_back(std::move(*stmt));
      if (Status st = ExpectType(TokenType::kBlockEnd, "'end of statement block'"); !st.ok()) {
        pop();
        return st;
      }
    } else {
      pop();
      return Fail("unexpected '" + DescribeToken(tok) + "'");
    }
  }
  pop();
  return body;
}

Status Parser::FailUnknownTag(const std::string& name, const Token& at, bool eof) {
  std::vector<std::string> expected;
  for (const auto& level : end_token_stack_) {
    expected.insert(expected.end(), level.begin(), level.end());
  }
  std::string message =
      eof ? "Unexpected end of template." : "Encountered unknown tag '" + name + "'.";
  if (!end_token_stack_.empty()) {
    std::string looking = JoinQuoted(end_token_stack_.back());
    if (!eof && std::find(expected.begin(), expected.end(), name) != expected.end()) {
      message +=
          " You probably made a nesting mistake. Jinja is expecting this tag, but currently "
          "looking for " +
          looking + ".";
    } else {
      message += " Jinja was looking for the following tags: " + looking + ".";
    }
  }
  if (!tag_stack_.empty()) {
    message += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
  }
  return Fail(message, at);
}

StatusOr<StmtList> Parser::ParseStatements(const std::vector<std::string>& end_tokens,
                                           bool drop_needle) {
  SkipOp(":");
  ASTR_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd, "'end of statement block'"));
  ASTR_ASSIGN_OR_RETURN(StmtList body, Subparse(end_tokens));
  if (Cur().type == TokenType::kEof) {
    end_token_stack_.push_back(end_tokens);
    Status st = FailUnknownTag("", Cur(), true);
    end_token_stack_.pop_back();
    return st;
  }
  if (drop_needle) Next();
  return body;
}

StatusOr<StmtPtr> Parser::ParseStatement() {
  const Token& tok = Cur();
  if (tok.type != TokenType::kName) return Fail("tag name expected");
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Fail("template nesting too deep");
  const std::string name = tok.text;
  tag_stack_.push_back(name);
  StatusOr<StmtPtr> result = [&]() -> StatusOr<StmtPtr> {
    if (name == "for") return ParseFor();
    if (name == "if") return ParseIf();
    if (name == "set") return ParseSet();
    if (name == "macro") return ParseMacro();
    if (name == "call") return ParseCallBlock();
    if (name == "filter") return ParseFilterBlock();
    if (name == "with") return ParseWith();
    if (name == "print") return ParsePrint();
    if (name == "generation") return ParseBody(StmtKind::kGeneration, "endgeneration");
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Fail("'" + name + "' outside loop");
      StmtPtr s = MakeStmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, Here());
      Next();
      return s;
    }
    if (name == "block" || name == "extends" || name == "include" || name == "import" ||
        name == "from" || name == "autoescape") {
      return Fail("the '" + name + "' tag is not supported");
    }
    tag_stack_.pop_back();
    Status st = FailUnknownTag(name, Cur(), false);
    tag_stack_.push_back(name);
    return st;
  }();
  tag_stack_.pop_back();
  return result;
}

StatusOr<StmtPtr> Parser::ParseBody(StmtKind kind, const std::string& end) {
  StmtPtr s = MakeStmt(kind, Here());
  Next();
  ASTR_ASSIGN_OR_RETURN(s->body, ParseStatements({end}, true));
  return s;
}

StatusOr<StmtPtr> Parser::ParseFor() {
  StmtPtr s = MakeStmt(StmtKind::kFor, Here());
  Next();
  ASTR_ASSIGN_OR_RETURN(s->target, ParseAssignTarget(true, false, {"in"}, false));
  if (!SkipName("in")) return UnexpectedToken("'in'");
  ASTR_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, {"recursive"}, false));
  if (SkipName("if")) {
    ++soft_depth_;
    auto filter = ParseExpression();
    --soft_depth_;
    ASTR_RETURN_IF_ERROR(filter.status());
    s->filter = std::move(*filter);
  }
  if (SkipName("recursive")) return Fail("recursive for loops are not supported");
  int saved_soft = soft_depth_;
  soft_depth_ = 0;
  ++loop_depth_;
  auto body = ParseStatements({"endfor", "else"}, false);
  --loop_depth_;
  ASTR_RETURN_IF_ERROR(body.status());
  s->body = std::move(*body);
  bool is_end = IsName("endfor");
  Next();
  if (!is_end) {
    ASTR_ASSIGN_OR_RETURN(s->else_body, ParseStatements({"endfor"}, true));
  }
  soft_depth_ = saved_soft;
  return s;
}

StatusOr<StmtPtr> Parser::ParseIf() {
  StmtPtr root = MakeStmt(StmtKind::kIf, Here());
  Next();
  ++soft_depth_;
  Stmt* node = root.get();
  Status status = OkStatus();
  while (true) {
    auto test = ParseTuple(false, false, {}, false);
    if (!test.ok()) {
      status = test.status();
      break;
    }
    node->expr = std::move(*test);
    auto body = ParseStatements({"elif", "else", "endif"}, false);
    if (!body.ok()) {
      status = body.status();
      break;
    }
    node->body = std::move(*body);
    if (IsName("elif")) {
      StmtPtr next = MakeStmt(StmtKind::kIf, Here());
      Next();
      Stmt* raw = next.get();
      node->else_body.push_back(std::move(next));
      node = raw;
      continue;
    }
    if (IsName("else")) {
      Next();
      auto else_body = ParseStatements({"endif"}, true);
      if (!else_body.ok()) {
        status = else_body.status();
        break;
      }
      node->else_body = std::move(*else_body);
    } else {
      Next();  // endif
    }
    break;
  }
  --soft_depth_;
  ASTR_RETURN_IF_ERROR(status);
  return root;
}

StatusOr<StmtPtr> Parser::ParseSet() {
  SourcePos pos = Here();
  Next();
  ASTR_ASSIGN_OR_RETURN(ExprPtr target, ParseAssignTarget(true, false, {}, true));
  if (SkipOp("=")) {
    StmtPtr s = MakeStmt(StmtKind::kSet, pos);
    s->target = std::move(target);
    ASTR_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}, false));
    return s;
  }
  StmtPtr s = MakeStmt(StmtKind::kSetBlock, pos);
  s->target = std::move(target);
  if (IsOp("|")) {
    ASTR_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, false));
  }
  ASTR_ASSIGN_OR_RETURN(s->body, ParseStatements({"endset"}, true));
  return s;
}

Status Parser::ParseSignature(std::vector<MacroParam>* params) {
  ASTR_RETURN_IF_ERROR(ExpectOp("("));
  bool have_default = false;
  while (!IsOp(")")) {
    if (!params->empty()) ASTR_RETURN_IF_ERROR(ExpectOp(","));
    MacroParam p;
    ASTR_ASSIGN_OR_RETURN(p.name, ExpectName());
    if (SkipOp("=")) {
      ASTR_ASSIGN_OR_RETURN(p.default_value, ParseExpression());
      have_default = true;
    } else if (have_default) {
      return Fail("non-default argument follows default argument");
    }
    params->push_back(std::move(p));
  }
  return ExpectOp(")");
}

namespace {

// Marks which of `varargs`, `kwargs`, `caller` a macro body reads.
void ScanNames(const Expr* e, Stmt* macro);
void ScanNames(const StmtList& body, Stmt* macro) {
  for (const auto& s : body) {
    if (s == nullptr) continue;
    ScanNames(s->expr.get(), macro);
    ScanNames(s->filter.get(), macro);
    ScanNames(s->body, macro);
    ScanNames(s->else_body, macro);
    for (const auto& p : s->params) ScanNames(p.default_value.get(), macro);
    for (const auto& [t, v] : s->with_assignments) ScanNames(v.get(), macro);
  }
}
void ScanNames(const Expr* e, Stmt* macro) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) {
    if (e->name == "varargs") macro->uses_varargs = true;
    if (e->name == "kwargs") macro->uses_kwargs = true;
    if (e->name == "caller") macro->uses_caller = true;
  }
  for (const auto& c : e->children) ScanNames(c.get(), macro);
  for (const auto& c : e->args) ScanNames(c.get(), macro);
  for (const auto& [k, v] : e->kwargs) ScanNames(v.get(), macro);
  ScanNames(e->dyn_args.get(), macro);
  ScanNames(e->dyn_kwargs.get(), macro);
}

}  // namespace

StatusOr<StmtPtr> Parser::ParseMacro() {
  StmtPtr s = MakeStmt(StmtKind::kMacro, Here());
  Next();
  ASTR_ASSIGN_OR_RETURN(s->name, ExpectName());
  ASTR_RETURN_IF_ERROR(ParseSignature(&s->params));
  int saved_loop = loop_depth_, saved_soft = soft_depth_;
  loop_depth_ = soft_depth_ = 0;
  auto body = ParseStatements({"endmacro"}, true);
  loop_depth_ = saved_loop;
  soft_depth_ = saved_soft;
  ASTR_RETURN_IF_ERROR(body.status());
  s->body = std::move(*body);
  ScanNames(s->body, s.get());
  return s;
}

StatusOr<StmtPtr> Parser::ParseCallBlock() {
  StmtPtr s = MakeStmt(StmtKind::kCallBlock, Here());
  Next();
  if (IsOp("(")) ASTR_RETURN_IF_ERROR(ParseSignature(&s->params));
  ASTR_ASSIGN_OR_RETURN(s->expr, ParseExpression());
  if (s->expr->kind != ExprKind::kCall) return Fail("expected call");
  int saved_loop = loop_depth_;
  loop_depth_ = 0;
  auto body = ParseStatements({"endcall"}, true);
  loop_depth_ = saved_loop;
  ASTR_RETURN_IF_ERROR(body.status());
  s->body = std::move(*body);
  ScanNames(s->body, s.get());
  return s;
}

StatusOr<StmtPtr> Parser::ParseFilterBlock() {
  StmtPtr s = MakeStmt(StmtKind::kFilterBlock, Here());
  Next();
  ASTR_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, true));
  ASTR_ASSIGN_OR_RETURN(s->body, ParseStatements({"endfilter"}, true));
  return s;
}

StatusOr<StmtPtr> Parser::ParseWith() {
  StmtPtr s = MakeStmt(StmtKind::kWith, Here());
  Next();
  while (Cur().type != TokenType::kBlockEnd) {
    if (!s->with_assignments.empty()) ASTR_RETURN_IF_ERROR(ExpectOp(","));
    ASTR_ASSIGN_OR_RETURN(ExprPtr target, ParseAssignTarget(true, false, {}, false));
    ASTR_RETURN_IF_ERROR(ExpectOp("="));
    ASTR_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    s->with_assignments.emplace_back(std::move(target), std::move(value));
  }
  ASTR_ASSIGN_OR_RETURN(s->body, ParseStatements({"endwith"}, true));
  return s;
}

StatusOr<StmtPtr> Parser::ParsePrint() {
  StmtPtr s = MakeStmt(StmtKind::kOutput, Here());
  Next();
  ExprPtr tuple = MakeExpr(ExprKind::kTuple, s->pos);
  while (Cur().type != TokenType::kBlockEnd) {
    if (!tuple->children.empty()) ASTR_RETURN_IF_ERROR(ExpectOp(","));
    ASTR_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
    tuple->children.push_back(std::move(e));
  }
  // {% print a, b %} writes each expression in turn: a variable-less {% with %} of outputs.
  if (tuple->children.size() == 1) {
    s->expr = std::move(tuple->children[0]);
  } else {
    StmtPtr block = MakeStmt(StmtKind::kWith, s->pos);
    for (auto& e : tuple->children) {
      StmtPtr out = MakeStmt(StmtKind::kOutput, s->pos);
      out->expr = std::move(e);
      block->body.push_back(std::move(out));
    }
    return block;
  }
  return s;
}

StatusOr<ExprPtr> Parser::ParseAssignTarget(bool with_tuple, bool name_only,
                                            const std::vector<std::string>& extra_end,
                                            bool with_namespace) {
  ExprPtr target;
  if (name_only) {
    SourcePos pos = Here();
    ASTR_ASSIGN_OR_RETURN(std::string name, ExpectName());
    target = MakeExpr(ExprKind::kName, pos);
    target->name = std::move(name);
    return target;
  }
  if (with_tuple) {
    ASTR_ASSIGN_OR_RETURN(target, ParseTuple(true, true, extra_end, false, with_namespace));
  } else {
    ASTR_ASSIGN_OR_RETURN(target, ParsePrimary(with_namespace));
  }
  auto can_assign = [](const Expr& e, const auto& self) -> bool {
    if (e.kind == ExprKind::kName) {
      return e.name != "true" && e.name != "false" && e.name != "none" && e.name != "True" &&
             e.name != "False" && e.name != "None";
    }
    if (e.kind == ExprKind::kNsRef) return true;
    if (e.kind == ExprKind::kTuple) {
      for (const auto& c : e.children) {
        if (!self(*c, self)) return false;
      }
      return true;
    }
    return false;
  };
  if (!can_assign(*target, can_assign)) {
    std::string what = target->kind == ExprKind::kConst   ? "const"
                       : target->kind == ExprKind::kTuple ? "tuple"
                       : target->kind == ExprKind::kList  ? "list"
                       : target->kind == ExprKind::kDict  ? "dict"
                                                          : "expression";
    return Fail("can't assign to '" + what + "'");
  }
  return target;
}

}  // namespace internal

StatusOr<Program> ParseTemplate(std::string_view source, const LexerOptions& options) {
  ASTR_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, options));
  internal::Parser parser(std::move(tokens));
  return parser.Parse();
}

}  // namespace astr::jinja
