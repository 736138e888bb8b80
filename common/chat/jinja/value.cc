#include "common/chat/jinja/value.h"

#include <algorithm>

#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

// Heap bytes a string owns beyond its own object (none when the text fits inline).
size_t HeapBytes(const std::string& s) {
  const char* self = reinterpret_cast<const char*>(&s);
  bool inline_text = s.data() >= self && s.data() < self + sizeof(std::string);
  return inline_text ? 0 : s.capacity() + 1;
}

size_t HeapBytes(const ValueList& items) { return items.capacity() * sizeof(Value); }

size_t HeapBytes(const DictData& d) { return d.items.capacity() * sizeof(std::pair<Value, Value>); }

size_t HeapBytes(const ObjectData& o) {
  size_t n = HeapBytes(o.type_name) + HeapBytes(o.module) + HeapBytes(o.repr) +
             o.attrs.capacity() * sizeof(std::pair<std::string, Value>);
  for (const auto& [name, unused] : o.attrs) n += HeapBytes(name);
  return n;
}

size_t HeapBytes(const UndefinedData& u) {
  return HeapBytes(u.hint) + HeapBytes(u.obj_type_repr) + HeapBytes(u.name);
}

// 1 + the deepest of `items` (a container's depth); refused past the render's limit.
uint16_t ContainerDepth(int deepest_item) {
  int depth = std::min(deepest_item + 1, int{UINT16_MAX});
  if (RenderBudget* budget = RenderBudget::Current()) budget->CheckDepth(depth);
  return static_cast<uint16_t>(depth);
}

int DeepestItem(const ValueList& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  return d;
}

// Work proportional to `items` values compared or copied.
void SpendValues(size_t items) { SpendBytes(items * sizeof(Value)); }

}  // namespace

Status TypeError(const std::string& m) { return InvalidArgumentError("TypeError: " + m); }
Status ValueError(const std::string& m) { return InvalidArgumentError("ValueError: " + m); }
Status UndefinedError(const std::string& m) { return InvalidArgumentError("UndefinedError: " + m); }
Status SecurityError(const std::string& m) { return InvalidArgumentError("SecurityError: " + m); }
Status RuntimeError(const std::string& m) {
  return InvalidArgumentError("TemplateRuntimeError: " + m);
}
Status UndefinedUse(const Value& undefined) {
  const UndefinedData& u = undefined.undefined();
  return u.security ? SecurityError(u.Message()) : UndefinedError(u.Message());
}

const Value* DictData::Find(const Value& key) const {
  SpendValues(items.size());
  for (const auto& [k, v] : items) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}

void DictData::Set(Value key, Value value) {
  SpendValues(items.size());
  for (auto& [k, v] : items) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* ObjectData::Find(std::string_view name) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void ObjectData::Set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

std::string UndefinedData::Message() const {
  if (!hint.empty()) return hint;
  if (!has_obj) return StrRepr(name) + " is undefined";
  if (!name_is_str) return obj_type_repr + " has no element " + name;
  return StrRepr(obj_type_repr) + " has no attribute " + StrRepr(name);
}

const Value* CallArgs::Keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value::Value() : data_(std::shared_ptr<const UndefinedData>()) {}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  v.data_ = std::monostate();
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = d;
  return v;
}
Value Value::Str(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  size_t heap = HeapBytes(s);
  v.data_ = MakeCharged<const std::string>(heap, std::move(s));
  return v;
}
Value Value::Markup(std::string s) {
  Value v = Str(std::move(s));
  v.markup_ = true;
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.depth_ = ContainerDepth(DeepestItem(items));
  size_t heap = HeapBytes(items);
  v.data_ = MakeCharged<const ValueList>(heap, std::move(items));
  return v;
}
Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::NamedTuple(std::string type_name, ValueList items, std::vector<std::string> fields) {
  Value v = Tuple(std::move(items));
  size_t heap = HeapBytes(type_name) + fields.capacity() * sizeof(std::string);
  for (const std::string& f : fields) heap += HeapBytes(f);
  auto extra = MakeCharged<SequenceExtra>(heap);
  extra->type_name = std::move(type_name);
  extra->fields = std::move(fields);
  v.extra_ = std::move(extra);
  return v;
}
Value Value::Range(int64_t start, int64_t stop, int64_t step) {
  // Length as Python computes it, in 128 bits so that no bound overflows.
  __int128 span = static_cast<__int128>(stop) - start;
  __int128 count = step > 0 ? (span + step - 1) / step : (span + step + 1) / step;
  ValueList items;
  for (__int128 k = 0; k < count; ++k) items.push_back(Int(static_cast<int64_t>(start + k * step)));
  Value v = List(std::move(items));
  v.kind_ = Kind::kRange;
  auto extra = MakeCharged<SequenceExtra>(0);
  extra->range[0] = start;
  extra->range[1] = stop;
  extra->range[2] = step;
  v.extra_ = std::move(extra);
  return v;
}
Value Value::Dict(DictData dict) {
  Value v;
  v.kind_ = Kind::kDict;
  int deepest = 0;
  for (const auto& [k, val] : dict.items) deepest = std::max({deepest, k.depth(), val.depth()});
  v.depth_ = ContainerDepth(deepest);
  size_t heap = HeapBytes(dict);
  v.data_ = MakeCharged<const DictData>(heap, std::move(dict));
  return v;
}
Value Value::Iterator(std::string type_name, ValueList items, bool reiterable, bool sized) {
  Value v;
  v.kind_ = Kind::kIterator;
  v.depth_ = ContainerDepth(DeepestItem(items));
  auto it = MakeCharged<IteratorData>(HeapBytes(type_name) + HeapBytes(items));
  it->type_name = std::move(type_name);
  it->items = std::move(items);
  it->reiterable = reiterable;
  it->sized = sized;
  v.data_ = std::move(it);
  return v;
}
Value Value::Object(ObjectData object) {
  if (object.depth == 0) {
    int deepest = 0;
    for (const auto& [name, attr] : object.attrs) deepest = std::max(deepest, attr.depth());
    object.depth = ContainerDepth(deepest);
  }
  Value v;
  v.kind_ = Kind::kObject;
  v.depth_ = static_cast<uint16_t>(std::min(object.depth, int{UINT16_MAX}));
  size_t heap = HeapBytes(object);
  v.data_ = MakeCharged<ObjectData>(heap, std::move(object));
  return v;
}
Value Value::Function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::move(fn);
  return v;
}
Value Value::Undefined(UndefinedData u) {
  size_t heap = HeapBytes(u);
  Value v;
  v.data_ = MakeCharged<const UndefinedData>(heap, std::move(u));
  return v;
}

Value Value::UndefinedName(std::string name) {
  UndefinedData u;
  u.name = std::move(name);
  return Undefined(std::move(u));
}
Value Value::UndefinedAttr(const Value& obj, const Value& name) {
  UndefinedData u;
  u.has_obj = true;
  u.obj_type_repr = ObjectTypeRepr(obj);
  u.name_is_str = name.is_string();
  u.name = name.is_string() ? name.str() : Repr(name);
  return Undefined(std::move(u));
}
Value Value::UndefinedHint(std::string hint, bool security) {
  UndefinedData u;
  u.hint = std::move(hint);
  u.security = security;
  return Undefined(std::move(u));
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.items.emplace_back(Str(it.key()), FromJson(it.value()));
      }
      return Dict(std::move(d));
    }
    default:
      return None();
  }
}

int64_t Value::int_value() const {
  if (kind_ == Kind::kBool) return std::get<bool>(data_) ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::number_value() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(int_value());
}

const std::string& Value::tuple_type_name() const {
  static const std::string kEmpty;
  return extra_ && kind_ == Kind::kTuple ? extra_->type_name : kEmpty;
}

const UndefinedData& Value::undefined() const {
  static const UndefinedData kEmpty;
  const auto& p = std::get<std::shared_ptr<const UndefinedData>>(data_);
  return p ? *p : kEmpty;
}

const void* Value::identity() const {
  return std::visit(
      [](const auto& x) -> const void* {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate> || std::is_same_v<T, bool> ||
                      std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
          return nullptr;
        } else {
          return x.get();
        }
      },
      data_);
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.bool_value();
    case Value::Kind::kInt:
      return v.int_value() != 0;
    case Value::Kind::kFloat:
      return v.number_value() != 0.0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kRange:
      return !v.items().empty();
    case Value::Kind::kDict:
      return !v.dict().items.empty();
    case Value::Kind::kIterator:
      // Generators are always true; dict views are true when not empty.
      return !v.iterator().sized || !v.iterator().items.empty();
    case Value::Kind::kObject:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return v.is_markup() ? "Markup" : "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return v.tuple_type_name().empty() ? "tuple" : v.tuple_type_name();
    case Value::Kind::kRange:
      return "range";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kIterator:
      return v.iterator().type_name;
    case Value::Kind::kObject:
      return v.object().type_name;
    case Value::Kind::kCallable:
      return v.callable().type_name();
  }
  return "object";
}

std::string ObjectTypeRepr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kUndefined:
      return "jinja2.runtime.Undefined object";
    case Value::Kind::kString:
      return v.is_markup() ? "markupsafe.Markup object" : "str object";
    case Value::Kind::kObject:
      return v.object().module.empty() ? v.object().type_name + " object"
                                       : v.object().module + "." + v.object().type_name + " object";
    case Value::Kind::kCallable:
      if (v.callable().type_name() == "Macro") return "jinja2.runtime.Macro object";
      return v.callable().type_name() + " object";
    default:
      return TypeName(v) + " object";
  }
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.int_value() == b.int_value();
    return a.number_value() == b.number_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      if (a.str().size() != b.str().size()) return false;
      SpendBytes(a.str().size());
      return a.str() == b.str();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kRange: {
      const ValueList& x = a.items();
      const ValueList& y = b.items();
      if (x.size() != y.size()) return false;
      SpendValues(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

namespace {

template <typename T>
bool ApplyOrder(const T& x, const T& y, std::string_view op) {
  if (op == "<") return x < y;
  if (op == "<=") return x <= y;
  if (op == ">") return x > y;
  return x >= y;
}

// Python's `a <op> b` for an ordering operator, with its TypeError for unordered types.
StatusOr<bool> Order(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) return UndefinedUse(a);
  if (b.is_undefined()) return UndefinedUse(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return ApplyOrder(a.int_value(), b.int_value(), op);
    return ApplyOrder(a.number_value(), b.number_value(), op);
  }
  if (a.is_string() && b.is_string()) {
    SpendBytes(std::min(a.str().size(), b.str().size()));
    return ApplyOrder(a.str(), b.str(), op);
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const ValueList& x = a.items();
    const ValueList& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Order(x[i], y[i], op);
    }
    return ApplyOrder(x.size(), y.size(), op);
  }
  return TypeError("'" + std::string(op) + "' not supported between instances of '" + TypeName(a) +
                   "' and '" + TypeName(b) + "'");
}

}  // namespace

StatusOr<bool> Less(const Value& a, const Value& b, std::string_view op) { return Order(a, b, op); }

StatusOr<bool> Compare(const Value& a, const Value& b, std::string_view op) {
  if (op == "==") return Equals(a, b);
  if (op == "!=") return !Equals(a, b);
  if (op == "<" || op == "<=" || op == ">" || op == ">=") return Order(a, b, op);
  return InternalError("unknown comparison " + std::string(op));
}

Status CheckHashable(const Value& v) {
  if (v.is_list() || v.is_dict()) return TypeError("unhashable type: '" + TypeName(v) + "'");
  if (v.is_tuple()) {
    for (const Value& e : v.items()) ASTR_RETURN_IF_ERROR(CheckHashable(e));
  }
  return OkStatus();
}

StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      SpendBytes(v.str().size());
      return static_cast<int64_t>(text::Length(v.str()));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kRange:
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    case Value::Kind::kIterator:
      if (v.iterator().sized) return static_cast<int64_t>(v.iterator().items.size());
      break;
    case Value::Kind::kObject:
      if (const Value* n = v.object().Find("length"); n != nullptr && n->is_int()) {
        return n->int_value();
      }
      break;
    default:
      break;
  }
  return TypeError("object of type '" + TypeName(v) + "' has no len()");
}

StatusOr<ValueList> Iterate(const Value& v) {
  // The copy costs work in proportion to its length (a str yields one value per code point).
  if (RenderBudget* budget = RenderBudget::Current()) {
    size_t n = v.is_string()     ? v.str().size()
               : v.has_items()   ? v.items().size()
               : v.is_dict()     ? v.dict().items.size()
               : v.is_iterator() ? v.iterator().items.size()
                                 : 0;
    if (!budget->StepBytes(n * sizeof(Value))) return budget->status();
  }
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList();
    case Value::Kind::kString: {
      // One str per code point: a list slot and a small string each, refused before they are
      // made when they would not fit.
      ASTR_RETURN_IF_ERROR(ReserveBytes(SaturatingMul(v.str().size(), 2 * sizeof(Value))));
      ValueList out;
      if (text::IsAscii(v.str())) {
        for (char c : v.str()) out.push_back(Value::Str(std::string(1, c)));
      } else {
        for (char32_t c : text::Decode(v.str())) {
          std::string s;
          text::AppendUtf8(&s, c);
          out.push_back(Value::Str(std::move(s)));
        }
      }
      return out;
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kRange:
      return v.items();
    case Value::Kind::kDict: {
      ValueList keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kIterator: {
      IteratorData& it = v.iterator();
      if (it.reiterable) return it.items;
      ValueList rest(it.items.begin() + static_cast<std::ptrdiff_t>(it.pos), it.items.end());
      it.pos = it.items.size();
      return rest;
    }
    default:
      return TypeError("'" + TypeName(v) + "' object is not iterable");
  }
}

StatusOr<bool> Contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kString:
      if (!needle.is_string()) {
        return TypeError("'in <string>' requires string as left operand, not " + TypeName(needle));
      }
      SpendBytes(haystack.str().size());
      return haystack.str().find(needle.str()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kRange:
      SpendValues(haystack.items().size());
      for (const Value& e : haystack.items()) {
        if (Equals(e, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      ASTR_RETURN_IF_ERROR(CheckHashable(needle));
      return haystack.dict().Find(needle) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kIterator: {
      IteratorData& it = haystack.iterator();
      size_t start = it.reiterable ? 0 : it.pos;
      for (size_t i = start; i < it.items.size(); ++i) {
        if (Equals(it.items[i], needle)) {
          if (!it.reiterable) it.pos = i + 1;
          return true;
        }
      }
      if (!it.reiterable) it.pos = it.items.size();
      return false;
    }
    default:
      return TypeError("argument of type '" + TypeName(haystack) + "' is not iterable");
  }
}

}  // namespace astr::jinja
