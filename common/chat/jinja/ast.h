// The parsed template: expression and statement nodes, mirroring jinja2.nodes.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/chat/jinja/value.h"

namespace astr::jinja {

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name
  kNsRef,     // name.attr as an assignment target ({% set ns.attr = ... %})
  kGetattr,   // children[0].name
  kGetitem,   // children[0][children[1]]
  kSlice,     // children: start, stop, step (null when omitted)
  kCall,      // children[0](args...)
  kFilter,    // children[0] | name(args...); children[0] is null inside {% filter %}
  kTest,      // children[0] is name(args...)
  kNot,       // not children[0]
  kNeg,       // -children[0]
  kPos,       // +children[0]
  kBinary,    // children[0] op children[1]: + - * / // % ** and or
  kConcat,    // children joined with ~
  kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ...
  kCondExpr,  // children[1] if children[0] else children[2] (null: undefined)
  kList,      // [children...]
  kTuple,     // (children...)
  kDict,      // {children[0]: children[1], ...}
};

// Where a node starts in the template source (1-based), for error messages.
struct SourcePos {
  int line = 1;
  int column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  SourcePos pos;
  Value value;       // kConst
  std::string name;  // kName / kNsRef (variable), kGetattr / kNsRef (attribute), filter / test,
                     // kBinary operator
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
  // Call / filter / test arguments (positional after children[0]).
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;    // *args
  ExprPtr dyn_kwargs;  // **kwargs
  std::string attr;    // kNsRef attribute
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // expr; body; else_body (elif chains nest in else_body)
  kFor,          // target in expr [if filter]; body; else_body
  kSet,          // target = expr
  kSetBlock,     // {% set target [| filters] %}body{% endset %}
  kMacro,        // name(params) body
  kCallBlock,    // {% call(params) expr %}body{% endcall %}
  kFilterBlock,  // {% filter filters %}body{% endfilter %}
  kWith,         // {% with a = 1, ... %}body{% endwith %}
  kBreak,
  kContinue,
  kGeneration,  // transformers' {% generation %}body{% endgeneration %}: renders body
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  SourcePos pos;
  std::string text;  // kText
  std::string name;  // kMacro name
  ExprPtr expr;      // output / if test / for iterable / set value / call / filter chain
  ExprPtr target;    // for / set target (kName, kTuple of targets or kNsRef)
  ExprPtr filter;    // for-loop filter (`for x in y if filter`) / set-block filters
  StmtList body;
  StmtList else_body;
  std::vector<MacroParam> params;                             // kMacro / kCallBlock
  std::vector<std::pair<ExprPtr, ExprPtr>> with_assignments;  // kWith targets and values
  // Macro bodies: whether they read `varargs`, `kwargs` or `caller`.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
  bool recursive = false;  // {% for ... recursive %}
};

// A parsed template.
struct Program {
  StmtList body;
};

}  // namespace astr::jinja
