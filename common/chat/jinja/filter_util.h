// Helpers shared by the filter implementations (filters.cc, filters_seq.cc).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/value.h"

namespace astr::jinja::filters {

// Binds call arguments to parameter names like Python does: positional first, then keywords.
// Missing parameters are nullptr.
class Params {
 public:
  static StatusOr<Params> Bind(std::string_view fn, const CallArgs& args,
                               std::initializer_list<std::string_view> names);
  const Value* operator[](size_t i) const { return values_[i]; }
  bool has(size_t i) const { return values_[i] != nullptr; }
  // Python truthiness with a default for a missing parameter.
  bool Flag(size_t i, bool dflt) const { return values_[i] ? Truthy(*values_[i]) : dflt; }

 private:
  std::vector<const Value*> values_;
};

using FilterFn = StatusOr<Value> (*)(Interpreter&, const Value&, const CallArgs&);

// jinja2's make_attrgetter: "a.b.0" walks items with the sandbox's getitem; `dflt` replaces
// undefined results when given.
StatusOr<Value> GetAttribute(Interpreter& interp, const Value& item, const Value& attribute,
                             const Value* dflt);
// soft_str: str (and Markup) unchanged, anything else str().
Value SoftStr(const Value& v);
// A Python generator over `items`.
Value Generator(ValueList items);
// Stable sort with Python's `<`; the first comparison error is returned.
Status StableSort(std::vector<std::pair<Value, Value>>* keyed, bool reverse);
// Lower-cases str keys (jinja2's ignore_case).
Value IgnoreCase(const Value& v);

// Sequence filters (filters_seq.cc).
StatusOr<Value> Map(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Select(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Reject(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> SelectAttr(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> RejectAttr(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Join(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> First(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Last(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> ListFilter(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Unique(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Sort(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> DictSort(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Reverse(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Items(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Batch(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> SliceFilter(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Sum(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Min(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Max(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> GroupBy(Interpreter& interp, const Value& v, const CallArgs& a);
StatusOr<Value> Count(Interpreter& interp, const Value& v, const CallArgs& a);

}  // namespace astr::jinja::filters
