#include "common/chat/jinja/interpreter.h"

#include <algorithm>
#include <new>
#include <stdexcept>

#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

// A {% macro %} (or the body of a {% call %} block, bound as `caller`).
class Macro : public Callable {
 public:
  Macro(const Stmt* def, FramePtr closure, std::string name)
      : def_(def), closure_(std::move(closure)), name_(std::move(name)) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro " + StrRepr(name_) + ">"; }
  StatusOr<Value> Call(Interpreter& interp, CallArgs args) const override {
    return interp.InvokeMacro(*def_, closure_, std::move(args), name_);
  }

 private:
  const Stmt* def_;
  FramePtr closure_;
  std::string name_;
};

// jinja2's LoopContext for iteration `i` of `items`.
Value MakeLoop(size_t i, const std::shared_ptr<const ValueList>& items,
               const std::shared_ptr<ValueList>& changed_state,
               const std::shared_ptr<bool>& changed_called) {
  ObjectData o;
  o.type_name = "LoopContext";
  o.module = "jinja2.runtime";
  const int64_t n = static_cast<int64_t>(items->size());
  const int64_t k = static_cast<int64_t>(i);
  o.attrs = {
      {"index0", Value::Int(k)},
      {"index", Value::Int(k + 1)},
      {"revindex", Value::Int(n - k)},
      {"revindex0", Value::Int(n - k - 1)},
      {"first", Value::Bool(k == 0)},
      {"last", Value::Bool(k + 1 == n)},
      {"length", Value::Int(n)},
      {"depth", Value::Int(1)},
      {"depth0", Value::Int(0)},
      {"previtem", k > 0 ? (*items)[i - 1] : Value::UndefinedHint("there is no previous item")},
      {"nextitem", k + 1 < n ? (*items)[i + 1] : Value::UndefinedHint("there is no next item")},
  };
  o.attrs.emplace_back("cycle",
                       NativeFunction::Make("cycle", "method", [k](Interpreter&, CallArgs& args) {
                         if (args.positional.empty())
                           return StatusOr<Value>(TypeError("no items for cycling given"));
                         return StatusOr<Value>(args.positional[k % args.positional.size()]);
                       }));
  o.attrs.emplace_back(
      "changed",
      NativeFunction::Make("changed", "method",
                           [changed_state, changed_called](Interpreter&, CallArgs& args) {
                             Value now = Value::Tuple(args.positional);
                             if (!*changed_called || !Equals(Value::Tuple(*changed_state), now)) {
                               *changed_called = true;
                               *changed_state = args.positional;
                               return StatusOr<Value>(Value::Bool(true));
                             }
                             return StatusOr<Value>(Value::Bool(false));
                           }));
  o.repr = "<LoopContext " + std::to_string(k + 1) + "/" + std::to_string(n) + ">";
  return Value::Object(std::move(o));
}

// Python's exceptions name the line, as jinja2's traceback does; a limit of the render also names
// the column, to point at the loop or the operation that ran over.
Status WithPosition(const Status& s, SourcePos pos) {
  std::string where = "line " + std::to_string(pos.line);
  if (s.code() == StatusCode::kResourceExhausted) where += ", column " + std::to_string(pos.column);
  return Status(s.code(), where + ": " + s.message());
}

}  // namespace

Status OutputBuffer::Append(std::string_view text, size_t max_output_bytes) {
  const size_t needed = text_.size() + text.size();
  if (needed > max_output_bytes) {
    return ResourceExhaustedError("rendered output exceeds " + std::to_string(max_output_bytes) +
                                  " bytes (max_output_bytes)");
  }
  if (needed > text_.capacity()) {
    // Grow as std::string would, charging the new capacity before allocating it.
    const size_t capacity = std::max(needed, 2 * text_.capacity());
    ASTR_RETURN_IF_ERROR(budget_->Reserve(capacity - charged_));
    text_.reserve(capacity);
    budget_->Charge(text_.capacity() - charged_);
    charged_ = text_.capacity();
  }
  text_.append(text);
  return OkStatus();
}

std::string OutputBuffer::Take() {
  budget_->Release(charged_);
  charged_ = 0;
  return std::move(text_);
}

const Value* Frame::Find(std::string_view name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent_.get()) {
    for (auto it = f->vars_.rbegin(); it != f->vars_.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
  }
  return nullptr;
}

void Frame::Set(const std::string& name, Value value) {
  for (auto& [k, v] : vars_) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(name, std::move(value));
}

Interpreter::Interpreter(const Program& program, InterpreterOptions options)
    : program_(program), options_(options) {}

StatusOr<std::string> Interpreter::Render(const Value& context) {
  budget_.emplace(options_.max_steps, options_.max_bytes, options_.max_depth);
  RenderBudget::Scope scope(&*budget_);
  try {
    return RenderInScope(context);
  } catch (const std::bad_alloc&) {
    // The last line of defence, for an allocation the budget did not foresee; unwinding has
    // freed what the render built.
    return ResourceExhaustedError("template render ran out of memory");
  } catch (const std::length_error&) {
    return ResourceExhaustedError("template render built a string or list too long");
  }
}

StatusOr<std::string> Interpreter::RenderInScope(const Value& context) {
  auto globals = std::make_shared<Frame>(nullptr);
  AddGlobals(globals.get(), options_);
  auto root = std::make_shared<Frame>(globals);
  // Breaks the frame <-> macro cycles when the render ends, also when an exception unwinds it:
  // every value it built must be freed while its budget lives.
  struct FreeFrames {
    Interpreter* self;
    Frame* root;
    ~FreeFrames() {
      for (const std::weak_ptr<Frame>& weak : self->macro_closures_) {
        if (FramePtr frame = weak.lock()) frame->Clear();
      }
      self->macro_closures_.clear();
      root->Clear();
    }
  } free_frames{this, root.get()};
  if (context.is_dict()) {
    for (const auto& [k, v] : context.dict().items) root->Set(ToStr(k), v);
  }
  OutputBuffer out(&*budget_);
  error_pos_ = {0, 0};
  const char stack_marker = 0;
  stack_base_ = reinterpret_cast<uintptr_t>(&stack_marker);
  StatusOr<Flow> flow = ExecList(program_.body, root, &out);
  if (!flow.ok()) {
    return WithPosition(flow.status(), error_pos_.line > 0 ? error_pos_ : SourcePos{1, 1});
  }
  return out.Take();
}

StatusOr<Interpreter::Flow> Interpreter::ExecList(const StmtList& body, const FramePtr& frame,
                                                  OutputBuffer* out) {
  for (const StmtPtr& stmt : body) {
    ASTR_ASSIGN_OR_RETURN(Flow flow, Exec(*stmt, frame, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

StatusOr<Interpreter::Flow> Interpreter::Exec(const Stmt& stmt, const FramePtr& frame,
                                              OutputBuffer* out) {
  StatusOr<Flow> r = budget_->Step() ? ExecStmt(stmt, frame, out) : budget_->status();
  // A builtin that ran over the budget marks it exhausted; the statement then fails.
  if (r.ok() && !budget_->ok()) r = budget_->status();
  if (!r.ok()) NoteError(stmt.pos);
  return r;
}

StatusOr<Interpreter::Flow> Interpreter::ExecStmt(const Stmt& stmt, const FramePtr& frame,
                                                  OutputBuffer* out) {
  switch (stmt.kind) {
    case StmtKind::kText:
      ASTR_RETURN_IF_ERROR(Append(out, stmt.text));
      return Flow::kNormal;
    case StmtKind::kOutput: {
      ASTR_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, frame));
      ASTR_RETURN_IF_ERROR(Append(out, ToStr(v)));
      return Flow::kNormal;
    }
    case StmtKind::kIf: {
      ASTR_ASSIGN_OR_RETURN(Value test, Eval(*stmt.expr, frame));
      return ExecList(Truthy(test) ? stmt.body : stmt.else_body, frame, out);
    }
    case StmtKind::kFor:
      return ExecFor(stmt, frame, out);
    case StmtKind::kSet: {
      // jinja2 checks a namespace target before it evaluates the value.
      if (stmt.target->kind == ExprKind::kNsRef)
        ASTR_RETURN_IF_ERROR(CheckNamespace(*stmt.target, frame));
      ASTR_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, frame));
      ASTR_RETURN_IF_ERROR(Assign(*stmt.target, v, frame));
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock: {
      OutputBuffer body(&*budget_);
      ASTR_RETURN_IF_ERROR(ExecList(stmt.body, std::make_shared<Frame>(frame), &body).status());
      Value v = Value::Str(body.Take());
      if (stmt.filter != nullptr) {
        filter_inputs_.push_back(v);
        StatusOr<Value> filtered = Eval(*stmt.filter, frame);
        filter_inputs_.pop_back();
        ASTR_ASSIGN_OR_RETURN(v, std::move(filtered));
      }
      if (stmt.kind == StmtKind::kSetBlock) {
        ASTR_RETURN_IF_ERROR(Assign(*stmt.target, v, frame));
      } else {
        ASTR_RETURN_IF_ERROR(Append(out, ToStr(v)));
      }
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      frame->Set(stmt.name, MakeMacro(stmt, frame, stmt.name));
      return Flow::kNormal;
    case StmtKind::kCallBlock:
      ASTR_RETURN_IF_ERROR(ExecCallBlock(stmt, frame, out));
      return Flow::kNormal;
    case StmtKind::kWith: {
      auto inner = std::make_shared<Frame>(frame);
      for (const auto& [target, value] : stmt.with_assignments) {
        ASTR_ASSIGN_OR_RETURN(Value v, Eval(*value, frame));
        ASTR_RETURN_IF_ERROR(Assign(*target, v, inner));
      }
      return ExecList(stmt.body, inner, out);
    }
    case StmtKind::kGeneration:
      return ExecList(stmt.body, std::make_shared<Frame>(frame), out);
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Stmt& stmt, const FramePtr& frame,
                                                 OutputBuffer* out) {
  ASTR_ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr, frame));
  ASTR_ASSIGN_OR_RETURN(ValueList all, Iterate(iterable));
  auto items = std::make_shared<ValueList>();
  if (stmt.filter == nullptr) {
    *items = std::move(all);
  } else {
    for (Value& item : all) {
      if (!budget_->Step()) return budget_->status();
      auto probe = std::make_shared<Frame>(frame);
      ASTR_RETURN_IF_ERROR(Assign(*stmt.target, item, probe));
      ASTR_ASSIGN_OR_RETURN(Value keep, Eval(*stmt.filter, probe));
      if (Truthy(keep)) items->push_back(std::move(item));
    }
  }
  if (items->empty()) {
    return ExecList(stmt.else_body, std::make_shared<Frame>(frame), out);
  }
  std::shared_ptr<const ValueList> shared = items;
  auto changed_state = std::make_shared<ValueList>();
  auto changed_called = std::make_shared<bool>(false);
  for (size_t i = 0; i < shared->size(); ++i) {
    // An iteration is a step of its own: a loop with an empty body must run out too.
    if (!budget_->Step()) return budget_->status();
    auto inner = std::make_shared<Frame>(frame);
    inner->Set("loop", MakeLoop(i, shared, changed_state, changed_called));
    ASTR_RETURN_IF_ERROR(Assign(*stmt.target, (*shared)[i], inner));
    ASTR_ASSIGN_OR_RETURN(Flow flow, ExecList(stmt.body, inner, out));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Status Interpreter::ExecCallBlock(const Stmt& stmt, const FramePtr& frame, OutputBuffer* out) {
  const Expr& call = *stmt.expr;
  ASTR_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0], frame));
  ASTR_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, frame));
  args.keyword.emplace_back("caller", MakeMacro(stmt, frame, "caller"));
  ASTR_ASSIGN_OR_RETURN(Value result, CallValue(callee, std::move(args)));
  return Append(out, ToStr(result));
}

Status Interpreter::Assign(const Expr& target, const Value& value, const FramePtr& frame) {
  switch (target.kind) {
    case ExprKind::kName:
      frame->Set(target.name, value);
      return OkStatus();
    case ExprKind::kNsRef: {
      ASTR_RETURN_IF_ERROR(CheckNamespace(target, frame));
      if (value.depth() >= budget_->namespace_depth()) {
        return budget_->NamespaceTooDeep(value.depth());
      }
      frame->Find(target.name)->object().Set(target.attr, value);
      return OkStatus();
    }
    case ExprKind::kTuple: {
      bool iterable = value.is_undefined() || value.is_string() || value.has_items() ||
                      value.is_dict() || value.is_iterator();
      if (!iterable) {
        return TypeError("cannot unpack non-iterable " + TypeName(value) + " object");
      }
      ASTR_ASSIGN_OR_RETURN(ValueList parts, Iterate(value));
      size_t want = target.children.size();
      if (parts.size() < want) {
        return ValueError("not enough values to unpack (expected " + std::to_string(want) +
                          ", got " + std::to_string(parts.size()) + ")");
      }
      if (parts.size() > want) {
        return ValueError("too many values to unpack (expected " + std::to_string(want) + ")");
      }
      for (size_t i = 0; i < want; ++i) {
        ASTR_RETURN_IF_ERROR(Assign(*target.children[i], parts[i], frame));
      }
      return OkStatus();
    }
    default:
      return RuntimeError("cannot assign to this expression");
  }
}

Status Interpreter::CheckNamespace(const Expr& target, const FramePtr& frame) {
  const Value* ns = frame->Find(target.name);
  if (ns == nullptr || !ns->is_object() || ns->object().type_name != "Namespace") {
    return RuntimeError("cannot assign attribute on non-namespace object");
  }
  return OkStatus();
}

Value Interpreter::MakeMacro(const Stmt& def, const FramePtr& closure, std::string name) {
  macro_closures_.push_back(closure);
  return Value::Function(MakeCharged<Macro>(0, &def, closure, std::move(name)));
}

StatusOr<Value> Interpreter::InvokeMacro(const Stmt& def, const FramePtr& closure, CallArgs args,
                                         const std::string& name) {
  // The stack grows down on every target astr supports.
  const char here = 0;
  const uintptr_t stack_used = stack_base_ - reinterpret_cast<uintptr_t>(&here);
  if (call_depth_ >= options_.max_call_depth || stack_used > options_.max_stack_bytes) {
    return InvalidArgumentError("RecursionError: maximum recursion depth exceeded");
  }
  const size_t n = def.params.size();
  std::vector<std::optional<Value>> values(n);
  for (size_t i = 0; i < n && i < args.positional.size(); ++i) values[i] = args.positional[i];
  auto take_kw = [&](std::string_view key) -> std::optional<Value> {
    for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
      if (it->first == key) {
        Value v = std::move(it->second);
        args.keyword.erase(it);
        return v;
      }
    }
    return std::nullopt;
  };
  for (size_t i = args.positional.size(); i < n; ++i) values[i] = take_kw(def.params[i].name);
  auto frame = std::make_shared<Frame>(closure);
  if (def.uses_caller) {
    std::optional<Value> caller = take_kw("caller");
    frame->Set("caller", caller ? *caller : Value::UndefinedHint("No caller defined"));
  }
  if (def.uses_kwargs) {
    DictData kw;
    for (auto& [k, v] : args.keyword) kw.items.emplace_back(Value::Str(k), v);
    frame->Set("kwargs", Value::Dict(std::move(kw)));
  } else if (!args.keyword.empty()) {
    if (args.keyword.front().first == "caller") {
      return TypeError("macro " + StrRepr(name) +
                       " was invoked with two values for the special caller argument. This is "
                       "most likely a bug.");
    }
    return TypeError("macro " + StrRepr(name) + " takes no keyword argument " +
                     StrRepr(args.keyword.front().first));
  }
  if (def.uses_varargs) {
    ValueList rest;
    for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    frame->Set("varargs", Value::Tuple(std::move(rest)));
  } else if (args.positional.size() > n) {
    return TypeError("macro " + StrRepr(name) + " takes not more than " + std::to_string(n) +
                     " argument(s)");
  }
  for (size_t i = 0; i < n; ++i) {
    const MacroParam& p = def.params[i];
    if (values[i]) {
      frame->Set(p.name, *values[i]);
    } else if (p.default_value != nullptr) {
      ASTR_ASSIGN_OR_RETURN(Value d, Eval(*p.default_value, frame));
      frame->Set(p.name, d);
    } else {
      frame->Set(p.name,
                 Value::UndefinedHint("parameter " + StrRepr(p.name) + " was not provided"));
    }
  }
  ++call_depth_;
  OutputBuffer out(&*budget_);
  StatusOr<Flow> flow = ExecList(def.body, frame, &out);
  --call_depth_;
  ASTR_RETURN_IF_ERROR(flow.status());
  return Value::Str(out.Take());
}

StatusOr<Value> Interpreter::CallValue(const Value& fn, CallArgs args) {
  if (fn.is_undefined()) return UndefinedUse(fn);
  if (fn.is_callable()) return fn.callable().Call(*this, std::move(args));
  if (fn.is_object() && fn.object().type_name == "LoopContext") {
    return TypeError("The loop must have the 'recursive' marker to be called recursively.");
  }
  return TypeError("'" + TypeName(fn) + "' object is not callable");
}

StatusOr<Value> Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedUse(obj);
  if (obj.is_object()) {
    if (const Value* v = obj.object().Find(name)) return *v;
  } else if (const std::vector<std::string>* fields = obj.tuple_fields()) {
    for (size_t i = 0; i < fields->size() && i < obj.items().size(); ++i) {
      if ((*fields)[i] == name) return obj.items()[i];
    }
  }
  if (!obj.is_object()) {
    if (std::optional<Value> attr = BuiltinAttribute(obj, name)) return *attr;
  }
  if (name.size() > 4 && name.rfind("__", 0) == 0 && name.substr(name.size() - 2) == "__") {
    return Value::UndefinedHint("access to attribute " + StrRepr(name) + " of " +
                                    StrRepr(TypeName(obj)) + " object is unsafe.",
                                true);
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(Value::Str(name))) return *v;
  }
  return Value::UndefinedAttr(obj, Value::Str(name));
}

StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedUse(obj);
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (CheckHashable(key).ok()) {
        if (const Value* v = obj.dict().Find(key)) return *v;
      }
      break;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kRange:
    case Value::Kind::kString:
      if (key.is_integral()) {
        if (std::optional<Value> item = IndexSequence(obj, key.int_value())) return *item;
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (obj.is_object()) {
      if (const Value* v = obj.object().Find(key.str())) return *v;
    } else if (std::optional<Value> attr = BuiltinAttribute(obj, key.str())) {
      return *attr;
    }
  }
  return Value::UndefinedAttr(obj, key);
}

}  // namespace astr::jinja
