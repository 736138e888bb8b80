// Renders a parsed template: scopes, statements, expression evaluation and the attribute / item
// lookup rules of jinja2's ImmutableSandboxedEnvironment.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/chat/jinja/ast.h"
#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/value.h"

namespace astr::jinja {

// A variable scope. Loop bodies, macro calls and {% with %} blocks get a child frame; lookups
// walk up to the parent, assignments stay in the frame (jinja2's scoping rules).
class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) { ++live_; }
  ~Frame() { --live_; }
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;
  // Frames alive in the process (tests check that a render frees all of its frames).
  static int64_t live_count() { return live_.load(); }
  const Value* Find(std::string_view name) const;
  void Set(const std::string& name, Value value);
  // Drops the variables and the parent: breaks the frame -> macro -> closure frame cycles that
  // reference counting cannot free.
  void Clear() {
    vars_.clear();
    parent_.reset();
  }

 private:
  static inline std::atomic<int64_t> live_{0};
  std::shared_ptr<Frame> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};
using FramePtr = std::shared_ptr<Frame>;

// A C++ function callable from templates (globals, bound methods, loop.cycle).
class NativeFunction : public Callable {
 public:
  using Fn = std::function<StatusOr<Value>(Interpreter&, CallArgs&)>;
  NativeFunction(std::string name, std::string type_name, Fn fn)
      : name_(std::move(name)), type_name_(std::move(type_name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return type_name_; }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  StatusOr<Value> Call(Interpreter& interp, CallArgs args) const override {
    return fn_(interp, args);
  }
  static Value Make(std::string name, std::string type_name, Fn fn) {
    // A guess at what the names and the std::function's captures (a bound `self`) take.
    constexpr size_t kHeapBytes = 64;
    return Value::Function(MakeCharged<NativeFunction>(kHeapBytes, std::move(name),
                                                       std::move(type_name), std::move(fn)));
  }

 private:
  std::string name_;
  std::string type_name_;
  Fn fn_;
};

// Limits of one render (see render_budget.h); exceeding one is a ResourceExhausted error naming the
// line and column of the template where it happened and the limit.
struct InterpreterOptions {
  std::optional<int64_t> now_unix_seconds;  // strftime_now()'s clock; nullopt: system clock
  // Length of the rendered text (and of any macro or {% set %} block body).
  size_t max_output_bytes = kDefaultMaxOutputBytes;
  int max_call_depth = 200;  // macro recursion (Python's recursion limit ends jinja2 near here)
  // Stack the macro recursion of one render may use. A render runs on the caller's thread, whose
  // stack may be small, and a macro level takes several KB (tens of KB under sanitizers), so
  // recursion also stops here, with the same RecursionError, whatever the depth.
  size_t max_stack_bytes = size_t{512} << 10;
  // Steps per render: statements, expressions, loop iterations, and work in proportion to what
  // builtins copy or scan (render_budget.h). Bounds the time a render takes.
  int64_t max_steps = kDefaultMaxSteps;
  // Bytes that the values the render builds and its output buffers may hold at once.
  size_t max_bytes = kDefaultMaxBytes;
  // Nesting of the lists, tuples, dicts and objects the render builds.
  int max_depth = kDefaultMaxDepth;
};

// Text a render is producing: its result, or the body of a macro call or a {% set %} /
// {% filter %} block. Its bytes count against the render's budget while it lives.
class OutputBuffer {
 public:
  explicit OutputBuffer(RenderBudget* budget) : budget_(budget) {}
  ~OutputBuffer() { budget_->Release(charged_); }
  OutputBuffer(const OutputBuffer&) = delete;
  OutputBuffer& operator=(const OutputBuffer&) = delete;
  // ResourceExhausted when the text would pass `max_output_bytes` or the budget's bytes.
  Status Append(std::string_view text, size_t max_output_bytes);
  // The text; its bytes are no longer counted here (the caller charges what it builds from it).
  std::string Take();

 private:
  RenderBudget* budget_;
  std::string text_;
  size_t charged_ = 0;  // text_.capacity() as charged to budget_
};

class Interpreter {
 public:
  Interpreter(const Program& program, InterpreterOptions options);

  // Renders the template with `context` (a dict of variables). Every value and frame the render
  // builds is freed when it returns.
  StatusOr<std::string> Render(const Value& context);
  // The budget of the last (or current) render: steps taken, bytes live (0 once Render has
  // returned) and their peak.
  const RenderBudget& budget() const { return *budget_; }

  // Environment operations used by filters, tests and methods.
  StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
  StatusOr<Value> GetItem(const Value& obj, const Value& key);
  StatusOr<Value> CallValue(const Value& fn, CallArgs args);
  const InterpreterOptions& options() const { return options_; }

  // Called by macro values.
  StatusOr<Value> InvokeMacro(const Stmt& def, const FramePtr& closure, CallArgs args,
                              const std::string& name);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  StatusOr<Flow> ExecList(const StmtList& body, const FramePtr& frame, OutputBuffer* out);
  StatusOr<Flow> Exec(const Stmt& stmt, const FramePtr& frame, OutputBuffer* out);
  StatusOr<Flow> ExecStmt(const Stmt& stmt, const FramePtr& frame, OutputBuffer* out);
  StatusOr<Flow> ExecFor(const Stmt& stmt, const FramePtr& frame, OutputBuffer* out);
  Status ExecCallBlock(const Stmt& stmt, const FramePtr& frame, OutputBuffer* out);
  Status Assign(const Expr& target, const Value& value, const FramePtr& frame);
  // RuntimeError unless `target` ({% set ns.attr %}) names a namespace.
  Status CheckNamespace(const Expr& target, const FramePtr& frame);
  Status Append(OutputBuffer* out, std::string_view text) {
    return out->Append(text, options_.max_output_bytes);
  }
  StatusOr<std::string> RenderInScope(const Value& context);
  // Records `pos` as where the render failed, unless an inner node already did.
  void NoteError(SourcePos pos) {
    if (error_pos_.line == 0) error_pos_ = pos;
  }

  StatusOr<Value> Eval(const Expr& expr, const FramePtr& frame);
  StatusOr<Value> EvalExpr(const Expr& expr, const FramePtr& frame);
  StatusOr<Value> EvalGetitem(const Expr& expr, const FramePtr& frame);
  StatusOr<Value> EvalCompare(const Expr& expr, const FramePtr& frame);
  StatusOr<Value> EvalBinary(const Expr& expr, const FramePtr& frame);
  StatusOr<Value> EvalLiteral(const Expr& expr, const FramePtr& frame);
  StatusOr<CallArgs> EvalArgs(const Expr& expr, const FramePtr& frame);
  StatusOr<Value> EvalFilter(const Expr& expr, const FramePtr& frame);
  Value MakeMacro(const Stmt& def, const FramePtr& closure, std::string name);

  const Program& program_;
  InterpreterOptions options_;
  int call_depth_ = 0;
  std::optional<RenderBudget> budget_;  // made anew by each Render
  SourcePos error_pos_{0, 0};           // the innermost node that failed; line 0: none yet
  uintptr_t stack_base_ = 0;  // address of a local of Render(): where this render's stack began
  // Frames captured by macros; Render clears them at the end so that every frame and value of
  // the render is freed (a macro stored in its own frame is a reference cycle).
  std::vector<std::weak_ptr<Frame>> macro_closures_;
  // The body text of the {% filter %} / {% set %} block whose filter chain is being evaluated.
  std::vector<Value> filter_inputs_;
};

// Python semantics of the binary operators (+ - * / // % **).
StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
// obj[index] of a str, list or tuple (negative counts from the end); nullopt when out of range.
std::optional<Value> IndexSequence(const Value& obj, int64_t index);
// Python slicing obj[start:stop:step] of str, list and tuple (null bounds are None).
StatusOr<Value> SliceValue(const Value& obj, const Value& start, const Value& stop,
                           const Value& step);
// The template globals: jinja2's range, dict, namespace, cycler, joiner plus transformers'
// raise_exception and strftime_now.
void AddGlobals(Frame* frame, const InterpreterOptions& options);

}  // namespace astr::jinja
