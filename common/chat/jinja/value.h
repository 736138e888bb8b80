// The values a template computes with, modelled on the Python objects jinja2 sees: None, bool,
// int, float, str (optionally markupsafe.Markup), list, tuple, dict (insertion-ordered), iterators
// (generators from filters, dict views), jinja2's Undefined, namespaces / loop contexts, and
// callables (macros, globals, bound methods).
//
// Lists, tuples and dicts are immutable once built (the ImmutableSandboxedEnvironment that
// transformers uses forbids list.append / dict.update), so a Value copy shares its payload. Only
// namespaces (assigned with `{% set ns.x = ... %}`) and iterators (consumed by iteration) mutate.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/base/status.h"

namespace astr::jinja {

class Value;
class Callable;
using ValueList = std::vector<Value>;

// A Python dict: (key, value) pairs in insertion order.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  // Value for `key` (Python equality), or nullptr.
  const Value* Find(const Value& key) const;
  // Replaces the value of an existing key or appends a new pair.
  void Set(Value key, Value value);
};

// A Python iterator: the items are computed eagerly, `pos` marks how far it has been consumed.
struct IteratorData {
  std::string type_name;  // "generator", "dict_items", "list_reverseiterator", ...
  ValueList items;
  size_t pos = 0;
  bool reiterable = false;  // dict views can be iterated again; generators only once
  bool sized = false;       // len() works (dict views)
};

// An object with named attributes: jinja2's Namespace (mutable) or a LoopContext.
struct ObjectData {
  std::string type_name;  // Python class name: "Namespace", "LoopContext", ...
  std::string module;     // for error messages: "jinja2.utils", "jinja2.runtime"
  std::vector<std::pair<std::string, Value>> attrs;
  std::string repr;  // str()/repr() when not a namespace
  // Nesting depth Value::depth() reports. 0: computed from `attrs` when the Value is made. A
  // namespace, whose attributes change later, gets a fixed depth its attributes must stay below
  // (RenderBudget::namespace_depth), so that the depth recorded by a container holding it stays
  // true.
  int depth = 0;
  const Value* Find(std::string_view name) const;
  void Set(const std::string& name, Value value);
};

// Why a value is undefined; produces jinja2's UndefinedError message.
struct UndefinedData {
  std::string hint;           // replaces the generated message when not empty
  bool has_obj = false;       // an attribute / item of `obj_type_repr` was missing
  std::string obj_type_repr;  // jinja2 object_type_repr(obj): "dict object", "None", ...
  std::string name;           // the missing name (a str) or the repr() of a non-str key
  bool name_is_str = true;
  bool security = false;  // an unsafe attribute (SecurityError)
  std::string Message() const;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kRange,  // range(start, stop, step): a sequence of ints with its own repr
    kDict,
    kIterator,
    kObject,
    kCallable,
  };

  // A default-constructed Value is an Undefined without a name.
  Value();
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value Str(std::string s);
  static Value Markup(std::string s);  // markupsafe.Markup: concatenation escapes plain str
  static Value List(ValueList items);
  static Value Tuple(ValueList items);
  // A collections.namedtuple of class `type_name`: a tuple whose items are also attributes.
  static Value NamedTuple(std::string type_name, ValueList items, std::vector<std::string> fields);
  // Python's range object (the sandbox caps its length; see globals.cc).
  static Value Range(int64_t start, int64_t stop, int64_t step);
  static Value Dict(DictData dict);
  static Value Iterator(std::string type_name, ValueList items, bool reiterable, bool sized);
  static Value Object(ObjectData object);
  static Value Function(std::shared_ptr<const Callable> fn);
  // Undefined variable `name`.
  static Value UndefinedName(std::string name);
  // Missing attribute / item `name` of `obj`.
  static Value UndefinedAttr(const Value& obj, const Value& name);
  static Value UndefinedHint(std::string hint, bool security = false);
  // An Undefined explained by `undefined`.
  static Value Undefined(UndefinedData undefined);
  // Values from JSON keep the key order of objects (Python dicts do).
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_range() const { return kind_ == Kind::kRange; }
  // list, tuple or range: items() holds the elements.
  bool has_items() const { return is_sequence() || is_range(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_iterator() const { return kind_ == Kind::kIterator; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  // int or bool (Python's bool is an int subclass).
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integral() || kind_ == Kind::kFloat; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }

  bool bool_value() const { return std::get<bool>(data_); }
  // Integral value of an int or bool.
  int64_t int_value() const;
  // Numeric value of an int, bool or float.
  double number_value() const;
  const std::string& str() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
  const ValueList& items() const { return *std::get<std::shared_ptr<const ValueList>>(data_); }
  const DictData& dict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  IteratorData& iterator() const { return *std::get<std::shared_ptr<IteratorData>>(data_); }
  ObjectData& object() const { return *std::get<std::shared_ptr<ObjectData>>(data_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const UndefinedData& undefined() const;
  // Field names of a named tuple (nullptr for other values).
  const std::vector<std::string>* tuple_fields() const {
    return extra_ && !extra_->fields.empty() ? &extra_->fields : nullptr;
  }
  // Class name of a named tuple ("" for other values).
  const std::string& tuple_type_name() const;
  // start, stop, step of a range.
  const int64_t* range_params() const { return extra_ ? extra_->range : nullptr; }

  // Identity for `is sameas` on containers.
  const void* identity() const;
  // Nesting depth: 0 for scalars, 1 + the deepest element for containers (list, tuple, dict,
  // iterator, object). Every recursive walk of a value (repr, ==, tojson, destruction) goes this
  // deep; values a render builds are kept within RenderBudget::max_depth().
  int depth() const { return depth_; }

 private:
  // What a named tuple or a range carries besides its items.
  struct SequenceExtra {
    std::string type_name;  // named tuples
    std::vector<std::string> fields;
    int64_t range[3] = {0, 0, 1};
  };

  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;
  uint16_t depth_ = 0;  // saturates; the limits are far below
  std::shared_ptr<const SequenceExtra> extra_;
  std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
               std::shared_ptr<const ValueList>, std::shared_ptr<const DictData>,
               std::shared_ptr<IteratorData>, std::shared_ptr<ObjectData>,
               std::shared_ptr<const Callable>, std::shared_ptr<const UndefinedData>>
      data_;
};

// Python-style error statuses: the message starts with the exception class jinja2 would raise
// ("TypeError: ...", "UndefinedError: ..."), so that it reads like the Python traceback's last
// line.
Status TypeError(const std::string& message);
Status ValueError(const std::string& message);
Status UndefinedError(const std::string& message);
Status SecurityError(const std::string& message);
Status RuntimeError(const std::string& message);  // jinja2.TemplateRuntimeError
// The error of using an Undefined value (UndefinedError, or SecurityError for unsafe attributes).
Status UndefinedUse(const Value& undefined);

// Python truthiness.
bool Truthy(const Value& v);
// Python type(v).__name__ ("str", "NoneType", "dict", "Markup", "generator", ...).
std::string TypeName(const Value& v);
// jinja2's object_type_repr: "None", "dict object", "jinja2.runtime.LoopContext object", ...
std::string ObjectTypeRepr(const Value& v);
// Python ==.
bool Equals(const Value& a, const Value& b);
// Python `a < b`; `op` names the operator in the TypeError for unordered types (sorting uses
// "<").
StatusOr<bool> Less(const Value& a, const Value& b, std::string_view op);
// Python `a <op> b` for ==, !=, <, <=, >, >=.
StatusOr<bool> Compare(const Value& a, const Value& b, std::string_view op);
// TypeError("unhashable type: 'list'") for values that cannot be dict keys.
Status CheckHashable(const Value& v);
// Python len().
StatusOr<int64_t> Length(const Value& v);
// Python iter() drained into a list. Consumes one-shot iterators.
StatusOr<ValueList> Iterate(const Value& v);
// Python `needle in haystack`.
StatusOr<bool> Contains(const Value& haystack, const Value& needle);
// Python str(v) / repr(v). str(Undefined) is "".
std::string ToStr(const Value& v);
std::string Repr(const Value& v);
// Python repr() of a str and of a float.
std::string StrRepr(std::string_view s);
std::string FloatRepr(double d);
// markupsafe.escape(str).
std::string HtmlEscape(std::string_view s);

// Callables: macros, global functions, bound methods. Arguments follow Python's calling
// convention.
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or nullptr.
  const Value* Keyword(std::string_view name) const;
};

class Interpreter;

class Callable {
 public:
  virtual ~Callable() = default;
  // Python type name for messages ("Macro", "builtin_function_or_method", "function").
  virtual std::string type_name() const = 0;
  virtual std::string repr() const = 0;
  virtual StatusOr<Value> Call(Interpreter& interp, CallArgs args) const = 0;
};

}  // namespace astr::jinja
