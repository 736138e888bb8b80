// The jinja2 grammar's recursive-descent parser (internal to parser.cc / parser_expr.cc).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/chat/jinja/ast.h"
#include "common/chat/jinja/lexer.h"

namespace astr::jinja::internal {

// Deeper nesting than this is refused rather than risking the C++ stack.
constexpr int kMaxNesting = 256;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  StatusOr<Program> Parse() {
    Program program;
    ASTR_ASSIGN_OR_RETURN(program.body, Subparse({}));
    return program;
  }

 private:
  // ---- token stream ----
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Look(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsName(std::string_view v) const {
    return Cur().type == TokenType::kName && Cur().text == v;
  }
  bool IsOp(std::string_view v) const {
    return Cur().type == TokenType::kOperator && Cur().text == v;
  }
  bool SkipName(std::string_view v) {
    if (!IsName(v)) return false;
    Next();
    return true;
  }
  bool SkipOp(std::string_view v) {
    if (!IsOp(v)) return false;
    Next();
    return true;
  }
  Status Fail(const std::string& what, const Token& at) const {
    return InvalidArgumentError("line " + std::to_string(at.line) + ", column " +
                                std::to_string(at.column) + ": " + what);
  }
  Status Fail(const std::string& what) const { return Fail(what, Cur()); }
  Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return OkStatus();
    std::string quoted = "'";
    quoted.append(op).append("'");
    return UnexpectedToken(quoted);
  }
  Status ExpectType(TokenType type, const std::string& what) {
    if (Cur().type == type) {
      Next();
      return OkStatus();
    }
    return UnexpectedToken(what);
  }
  Status UnexpectedToken(const std::string& expected) const {
    if (Cur().type == TokenType::kEof) {
      return Fail("unexpected end of template, expected " + expected + ".");
    }
    return Fail("expected token " + expected + ", got '" + DescribeToken(Cur()) + "'");
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return UnexpectedToken("'name'");
    std::string v = Cur().text;
    Next();
    return v;
  }

  static SourcePos PosOf(const Token& t) { return {t.line, t.column}; }
  SourcePos Here() const { return PosOf(Cur()); }
  ExprPtr MakeExpr(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  StmtPtr MakeStmt(StmtKind kind, SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  // ---- statements ----
  StatusOr<StmtList> Subparse(const std::vector<std::string>& end_tokens);
  Status FailUnknownTag(const std::string& name, const Token& at, bool eof);
  StatusOr<StmtList> ParseStatements(const std::vector<std::string>& end_tokens, bool drop_needle);
  StatusOr<StmtPtr> ParseStatement();
  StatusOr<StmtPtr> ParseFor();
  StatusOr<StmtPtr> ParseIf();
  StatusOr<StmtPtr> ParseSet();
  StatusOr<StmtPtr> ParseMacro();
  StatusOr<StmtPtr> ParseCallBlock();
  StatusOr<StmtPtr> ParseFilterBlock();
  StatusOr<StmtPtr> ParseWith();
  StatusOr<StmtPtr> ParsePrint();
  StatusOr<StmtPtr> ParseBody(StmtKind kind, const std::string& end);
  Status ParseSignature(std::vector<MacroParam>* params);
  StatusOr<ExprPtr> ParseAssignTarget(bool with_tuple, bool name_only,
                                      const std::vector<std::string>& extra_end,
                                      bool with_namespace);

  // ---- expressions ----
  StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  StatusOr<ExprPtr> ParseCondExpr();
  // `operand (keyword operand)*`, left-associative, as nested binary nodes named `keyword`.
  StatusOr<ExprPtr> ParseKeywordChain(const char* keyword, StatusOr<ExprPtr> (Parser::*operand)());
  StatusOr<ExprPtr> ParseOr();
  StatusOr<ExprPtr> ParseAnd();
  StatusOr<ExprPtr> ParseNot();
  StatusOr<ExprPtr> ParseCompare();
  StatusOr<ExprPtr> ParseMath1();
  StatusOr<ExprPtr> ParseConcat();
  StatusOr<ExprPtr> ParseMath2();
  StatusOr<ExprPtr> ParsePow();
  StatusOr<ExprPtr> ParseUnary(bool with_filter = true);
  StatusOr<ExprPtr> ParsePrimary(bool with_namespace = false);
  StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                               const std::vector<std::string>& extra_end, bool explicit_parentheses,
                               bool with_namespace = false);
  StatusOr<ExprPtr> ParseList();
  StatusOr<ExprPtr> ParseDict();
  StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscribed();
  Status ParseCallArgs(Expr* call);
  StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);
  StatusOr<ExprPtr> ParseTest(ExprPtr node);
  bool IsTupleEnd(const std::vector<std::string>& extra_end) const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::vector<std::string> tag_stack_;
  std::vector<std::vector<std::string>> end_token_stack_;
  int depth_ = 0;
  int loop_depth_ = 0;  // for-loop bodies around the current statement (reset in macros)
  int soft_depth_ = 0;  // inside if / conditional expressions: unknown filters fail at runtime
};

// Guards recursion depth for one parse function.
class DepthGuard {
 public:
  explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
  ~DepthGuard() { --*depth_; }
  bool too_deep() const { return *depth_ > kMaxNesting; }

 private:
  int* depth_;
};

}  // namespace astr::jinja::internal
