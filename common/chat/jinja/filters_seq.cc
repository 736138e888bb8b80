// Filters over sequences and mappings: map / select / reject, join, first / last, sort, unique,
// dictsort, groupby, batch, slice, sum, min / max, items, reverse, list, length.
#include <algorithm>

#include "common/chat/jinja/builtins.h"
#include "common/chat/jinja/filter_util.h"
#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja::filters {
namespace {

// Items of `v` for filters guarded by jinja2's `if value:` (a falsy value yields nothing).
StatusOr<ValueList> ItemsIfTruthy(const Value& v) {
  if (!Truthy(v)) return ValueList();
  return Iterate(v);
}

CallArgs Rest(const CallArgs& a, size_t from) {
  CallArgs rest;
  for (size_t i = from; i < a.positional.size(); ++i) rest.positional.push_back(a.positional[i]);
  rest.keyword = a.keyword;
  return rest;
}

// select / reject / selectattr / rejectattr.
StatusOr<Value> SelectOrReject(Interpreter& interp, const Value& v, const CallArgs& a, bool keep,
                               bool lookup_attr) {
  ASTR_ASSIGN_OR_RETURN(ValueList items, ItemsIfTruthy(v));
  if (items.empty()) return Generator({});
  size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (a.positional.empty()) return RuntimeError("Missing parameter for attribute name");
    attribute = a.positional[0];
    off = 1;
  }
  ValueList out;
  for (const Value& item : items) {
    SpendItems(1);
    ASTR_RETURN_IF_ERROR(BudgetStatus());
    Value subject = item;
    if (lookup_attr) {
      ASTR_ASSIGN_OR_RETURN(subject, GetAttribute(interp, item, attribute, nullptr));
    }
    bool passed;
    if (a.positional.size() > off) {
      if (!a.positional[off].is_string()) return RuntimeError("test name must be a string");
      ASTR_ASSIGN_OR_RETURN(passed,
                            CallTest(interp, a.positional[off].str(), subject, Rest(a, off + 1)));
    } else {
      passed = Truthy(subject);
    }
    if (passed == keep) out.push_back(item);
  }
  return Generator(std::move(out));
}

StatusOr<Value> MinOrMax(Interpreter& interp, const Value& v, const CallArgs& a, bool want_max) {
  ASTR_ASSIGN_OR_RETURN(
      Params p, Params::Bind(want_max ? "do_max" : "do_min", a, {"case_sensitive", "attribute"}));
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::UndefinedHint("No aggregated item, sequence was empty.");
  bool case_sensitive = p.Flag(0, false);
  Value attribute = p.has(1) ? *p[1] : Value::None();
  auto key = [&](const Value& item) -> StatusOr<Value> {
    ASTR_ASSIGN_OR_RETURN(Value k, GetAttribute(interp, item, attribute, nullptr));
    return case_sensitive ? k : IgnoreCase(k);
  };
  size_t best = 0;
  ASTR_ASSIGN_OR_RETURN(Value best_key, key(items[0]));
  for (size_t i = 1; i < items.size(); ++i) {
    SpendItems(1);
    ASTR_RETURN_IF_ERROR(BudgetStatus());
    ASTR_ASSIGN_OR_RETURN(Value k, key(items[i]));
    // Python's max() asks `item > best`, min() `item < best`.
    ASTR_ASSIGN_OR_RETURN(bool better, Compare(k, best_key, want_max ? ">" : "<"));
    if (better) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

}  // namespace

StatusOr<Value> Map(Interpreter& interp, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(ValueList items, ItemsIfTruthy(v));
  if (items.empty()) return Generator({});
  ValueList out;
  out.reserve(items.size());
  const Value* attribute = a.positional.empty() ? a.Keyword("attribute") : nullptr;
  if (attribute != nullptr) {
    const Value* dflt = a.Keyword("default");
    for (const auto& [k, unused] : a.keyword) {
      if (k != "attribute" && k != "default") {
        return RuntimeError("Unexpected keyword argument " + StrRepr(k));
      }
    }
    for (const Value& item : items) {
      SpendItems(1);
      ASTR_RETURN_IF_ERROR(BudgetStatus());
      ASTR_ASSIGN_OR_RETURN(Value r,
                            GetAttribute(interp, item, *attribute,
                                         dflt != nullptr && !dflt->is_none() ? dflt : nullptr));
      out.push_back(std::move(r));
    }
    return Generator(std::move(out));
  }
  if (a.positional.empty()) return RuntimeError("map requires a filter argument");
  if (!a.positional[0].is_string()) return RuntimeError("filter name must be a string");
  std::string name = a.positional[0].str();
  CallArgs rest = Rest(a, 1);
  for (const Value& item : items) {
    SpendItems(1);
    ASTR_RETURN_IF_ERROR(BudgetStatus());
    ASTR_ASSIGN_OR_RETURN(Value r, CallFilter(interp, name, item, rest));
    out.push_back(std::move(r));
  }
  return Generator(std::move(out));
}

StatusOr<Value> Select(Interpreter& interp, const Value& v, const CallArgs& a) {
  return SelectOrReject(interp, v, a, true, false);
}
StatusOr<Value> Reject(Interpreter& interp, const Value& v, const CallArgs& a) {
  return SelectOrReject(interp, v, a, false, false);
}
StatusOr<Value> SelectAttr(Interpreter& interp, const Value& v, const CallArgs& a) {
  return SelectOrReject(interp, v, a, true, true);
}
StatusOr<Value> RejectAttr(Interpreter& interp, const Value& v, const CallArgs& a) {
  return SelectOrReject(interp, v, a, false, true);
}

StatusOr<Value> Join(Interpreter& interp, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("sync_do_join", a, {"d", "attribute"}));
  std::string sep = p.has(0) ? ToStr(*p[0]) : "";
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (p.has(1) && !p[1]->is_none()) {
      ASTR_ASSIGN_OR_RETURN(item, GetAttribute(interp, item, *p[1], nullptr));
    }
    // The text can be far longer than the list (`[s] * 1000` shares one `s`): each piece is
    // checked against the budget before it is appended.
    SpendItems(1);
    std::string piece = ToStr(item);
    ASTR_RETURN_IF_ERROR(ReserveBytes(out.size() + (i > 0 ? sep.size() : 0) + piece.size()));
    if (i > 0) out += sep;
    out += piece;
  }
  return Value::Str(std::move(out));
}

StatusOr<Value> First(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_iterator() && !v.iterator().reiterable) {
    IteratorData& it = v.iterator();
    if (it.pos < it.items.size()) return it.items[it.pos++];
    return Value::UndefinedHint("No first item, sequence was empty.");
  }
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::UndefinedHint("No first item, sequence was empty.");
  return items.front();
}

StatusOr<Value> Last(Interpreter&, const Value& v, const CallArgs&) {
  bool reversible = v.is_string() || v.has_items() || v.is_dict() || v.is_undefined() ||
                    (v.is_iterator() && v.iterator().reiterable);
  if (!reversible) return TypeError(StrRepr(TypeName(v)) + " object is not reversible");
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::UndefinedHint("No last item, sequence was empty.");
  return items.back();
}

StatusOr<Value> ListFilter(Interpreter&, const Value& v, const CallArgs&) {
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  return Value::List(std::move(items));
}

StatusOr<Value> Count(Interpreter&, const Value& v, const CallArgs&) {
  ASTR_ASSIGN_OR_RETURN(int64_t n, jinja::Length(v));
  return Value::Int(n);
}

StatusOr<Value> Unique(Interpreter& interp, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p,
                        Params::Bind("sync_do_unique", a, {"case_sensitive", "attribute"}));
  bool case_sensitive = p.Flag(0, false);
  Value attribute = p.has(1) ? *p[1] : Value::None();
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  ValueList seen, out;
  for (const Value& item : items) {
    // `seen` is searched linearly: n items cost n * n / 2 comparisons.
    SpendBytes(seen.size() * sizeof(Value));
    SpendItems(1);
    ASTR_RETURN_IF_ERROR(BudgetStatus());
    ASTR_ASSIGN_OR_RETURN(Value key, GetAttribute(interp, item, attribute, nullptr));
    if (!case_sensitive) key = IgnoreCase(key);
    ASTR_RETURN_IF_ERROR(CheckHashable(key));
    bool dup =
        std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); });
    if (!dup) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Generator(std::move(out));
}

StatusOr<Value> Sort(Interpreter& interp, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p,
                        Params::Bind("do_sort", a, {"reverse", "case_sensitive", "attribute"}));
  bool case_sensitive = p.Flag(1, false);
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  // make_multi_attrgetter: "a,b" sorts by several attributes.
  std::vector<Value> attrs;
  if (p.has(2) && p[2]->is_string()) {
    const std::string sep = ",";
    for (const std::string& part : text::Split(p[2]->str(), &sep, -1, false)) {
      attrs.push_back(Value::Str(part));
    }
  } else {
    attrs.push_back(p.has(2) ? *p[2] : Value::None());
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    SpendItems(1);
    ASTR_RETURN_IF_ERROR(BudgetStatus());
    ValueList key;
    for (const Value& attr : attrs) {
      ASTR_ASSIGN_OR_RETURN(Value k, GetAttribute(interp, item, attr, nullptr));
      key.push_back(case_sensitive ? k : IgnoreCase(k));
    }
    keyed.emplace_back(Value::List(std::move(key)), item);
  }
  ASTR_RETURN_IF_ERROR(StableSort(&keyed, p.Flag(0, false)));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

StatusOr<Value> DictSort(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p,
                        Params::Bind("do_dictsort", a, {"case_sensitive", "by", "reverse"}));
  if (v.is_undefined()) return UndefinedUse(v);
  if (!v.is_dict()) {
    return InvalidArgumentError("AttributeError: '" + TypeName(v) +
                                "' object has no attribute 'items'");
  }
  int pos = 0;
  if (p.has(1)) {
    std::string by = ToStr(*p[1]);
    if (by == "value") {
      pos = 1;
    } else if (by != "key") {
      return RuntimeError("You can only sort by either \"key\" or \"value\"");
    }
  }
  bool case_sensitive = p.Flag(0, false);
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, val] : v.dict().items) {
    Value key = pos == 0 ? k : val;
    keyed.emplace_back(case_sensitive ? key : IgnoreCase(key), Value::Tuple({k, val}));
  }
  ASTR_RETURN_IF_ERROR(StableSort(&keyed, p.Flag(2, false)));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

StatusOr<Value> Reverse(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string cps = text::Decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return v.is_markup() ? Value::Markup(text::Encode(cps)) : Value::Str(text::Encode(cps));
  }
  bool reversible = v.has_items() || v.is_dict() || (v.is_iterator() && v.iterator().reiterable);
  StatusOr<ValueList> items = Iterate(v);
  if (!items.ok()) return RuntimeError("argument must be iterable");
  std::reverse(items->begin(), items->end());
  if (!reversible) return Value::List(std::move(*items));
  std::string type = v.is_list()    ? "list_reverseiterator"
                     : v.is_range() ? "range_iterator"
                     : v.is_dict()  ? "dict_reversekeyiterator"
                                    : "reversed";
  return Value::Iterator(type, std::move(*items), false, false);
}

StatusOr<Value> Items(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Generator({});
  if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.dict().items) out.push_back(Value::Tuple({k, val}));
  return Generator(std::move(out));
}

StatusOr<Value> Batch(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("do_batch", a, {"linecount", "fill_with"}));
  if (!p.has(0) || !p[0]->is_integral()) {
    return TypeError("do_batch() missing 1 required positional argument: 'linecount'");
  }
  int64_t n = p[0]->int_value();
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (p.has(1) && !p[1]->is_none() && n > 0) {
    // The last batch is padded to `n` items.
    ASTR_RETURN_IF_ERROR(ReserveBytes(SaturatingMul(static_cast<size_t>(n), sizeof(Value))));
  }
  ValueList out, tmp;
  for (const Value& item : items) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(Value::List(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (p.has(1) && !p[1]->is_none()) {
      while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(*p[1]);
    }
    out.push_back(Value::List(std::move(tmp)));
  }
  return Generator(std::move(out));
}

StatusOr<Value> SliceFilter(Interpreter&, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("sync_do_slice", a, {"slices", "fill_with"}));
  if (!p.has(0) || !p[0]->is_integral() || p[0]->int_value() <= 0) {
    return ValueError("slices must be a positive integer");
  }
  int64_t slices = p[0]->int_value();
  // One list per slice, however short the input.
  ASTR_RETURN_IF_ERROR(ReserveBytes(SaturatingMul(static_cast<size_t>(slices), sizeof(Value))));
  ASTR_ASSIGN_OR_RETURN(ValueList seq, Iterate(v));
  int64_t length = static_cast<int64_t>(seq.size());
  int64_t per = length / slices, extra = length % slices, offset = 0;
  ValueList out;
  for (int64_t s = 0; s < slices; ++s) {
    int64_t start = offset + s * per;
    if (s < extra) ++offset;
    int64_t end = offset + (s + 1) * per;
    ValueList part(seq.begin() + start, seq.begin() + end);
    if (p.has(1) && !p[1]->is_none() && s >= extra) part.push_back(*p[1]);
    out.push_back(Value::List(std::move(part)));
  }
  return Generator(std::move(out));
}

StatusOr<Value> Sum(Interpreter& interp, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(Params p, Params::Bind("sync_do_sum", a, {"attribute", "start"}));
  Value total = p.has(1) ? *p[1] : Value::Int(0);
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  for (const Value& item : items) {
    SpendItems(1);
    ASTR_RETURN_IF_ERROR(BudgetStatus());
    Value x = item;
    if (p.has(0) && !p[0]->is_none()) {
      ASTR_ASSIGN_OR_RETURN(x, GetAttribute(interp, item, *p[0], nullptr));
    }
    if (x.is_undefined()) return UndefinedUse(x);
    if (total.is_string()) return TypeError("sum() can't sum strings [use ''.join(seq) instead]");
    ASTR_ASSIGN_OR_RETURN(total, BinaryOp("+", total, x));
  }
  return total;
}

StatusOr<Value> Min(Interpreter& interp, const Value& v, const CallArgs& a) {
  return MinOrMax(interp, v, a, false);
}
StatusOr<Value> Max(Interpreter& interp, const Value& v, const CallArgs& a) {
  return MinOrMax(interp, v, a, true);
}

StatusOr<Value> GroupBy(Interpreter& interp, const Value& v, const CallArgs& a) {
  ASTR_ASSIGN_OR_RETURN(
      Params p, Params::Bind("sync_do_groupby", a, {"attribute", "default", "case_sensitive"}));
  if (!p.has(0)) return TypeError("sync_do_groupby() missing 1 required positional argument");
  bool case_sensitive = p.Flag(2, false);
  const Value* dflt = p.has(1) && !p[1]->is_none() ? p[1] : nullptr;
  ASTR_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    SpendItems(1);
    ASTR_RETURN_IF_ERROR(BudgetStatus());
    ASTR_ASSIGN_OR_RETURN(Value k, GetAttribute(interp, item, *p[0], dflt));
    keyed.emplace_back(case_sensitive ? k : IgnoreCase(k), item);
  }
  ASTR_RETURN_IF_ERROR(StableSort(&keyed, false));
  ValueList out;
  size_t i = 0;
  while (i < keyed.size()) {
    size_t j = i;
    ValueList group;
    while (j < keyed.size() && Equals(keyed[j].first, keyed[i].first)) {
      group.push_back(keyed[j].second);
      ++j;
    }
    Value grouper = keyed[i].first;
    if (!case_sensitive) {
      ASTR_ASSIGN_OR_RETURN(grouper, GetAttribute(interp, group[0], *p[0], dflt));
    }
    out.push_back(Value::NamedTuple("_GroupTuple", {grouper, Value::List(std::move(group))},
                                    {"grouper", "list"}));
    i = j;
  }
  return Value::List(std::move(out));
}

}  // namespace astr::jinja::filters
