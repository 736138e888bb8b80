// Template globals: jinja2's range / dict / namespace / cycler / joiner (range is the sandbox's
// safe_range) and the two functions transformers adds, raise_exception and strftime_now.
#include <sys/time.h>

#include <cinttypes>
#include <cstdint>
#include <ctime>

#include "common/chat/jinja/interpreter.h"

namespace astr::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

StatusOr<Value> Range(CallArgs& args) {
  if (!args.keyword.empty()) return TypeError("range() takes no keyword arguments");
  const ValueList& p = args.positional;
  if (p.empty()) return TypeError("range expected at least 1 argument, got 0");
  if (p.size() > 3)
    return TypeError("range expected at most 3 arguments, got " + std::to_string(p.size()));
  for (const Value& v : p) {
    if (!v.is_integral()) {
      return TypeError("'" + TypeName(v) + "' object cannot be interpreted as an integer");
    }
  }
  int64_t start = p.size() == 1 ? 0 : p[0].int_value();
  int64_t stop = p.size() == 1 ? p[0].int_value() : p[1].int_value();
  int64_t step = p.size() == 3 ? p[2].int_value() : 1;
  if (step == 0) return ValueError("range() arg 3 must not be zero");
  // Count without overflow: ceil((stop - start) / step) when positive.
  long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  long double count_ld = span / static_cast<long double>(step);
  int64_t count = count_ld <= 0 ? 0 : static_cast<int64_t>(std::ceil(count_ld));
  if (count > kMaxRange) {
    return InvalidArgumentError(
        "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  return Value::Range(start, stop, step);
}

// dict(*args, **kwargs) as a list of (key, value) pairs.
StatusOr<DictData> DictFromArgs(const CallArgs& args, const std::string& what) {
  DictData d;
  if (args.positional.size() > 1) {
    return TypeError(what + " expected at most 1 argument, got " +
                     std::to_string(args.positional.size()));
  }
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_undefined()) return UndefinedUse(src);  // dict() looks up src.keys
    if (src.is_dict()) {
      d = src.dict();
    } else {
      ASTR_ASSIGN_OR_RETURN(ValueList pairs, Iterate(src));
      for (size_t i = 0; i < pairs.size(); ++i) {
        ASTR_RETURN_IF_ERROR(BudgetStatus());  // each Set scans the keys so far
        StatusOr<ValueList> kv_or = Iterate(pairs[i]);
        if (!kv_or.ok()) {
          return TypeError("cannot convert dictionary update sequence element #" +
                           std::to_string(i) + " to a sequence");
        }
        const ValueList& kv = *kv_or;
        if (kv.size() != 2) {
          return ValueError("dictionary update sequence element #" + std::to_string(i) +
                            " has length " + std::to_string(kv.size()) + "; 2 is required");
        }
        ASTR_RETURN_IF_ERROR(CheckHashable(kv[0]));
        d.Set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.Set(Value::Str(k), v);
  return d;
}

StatusOr<Value> MakeNamespace(const DictData& d) {
  ObjectData o;
  o.type_name = "Namespace";
  o.module = "jinja2.utils";
  for (const auto& [k, v] : d.items) o.Set(ToStr(k), v);
  if (const RenderBudget* budget = RenderBudget::Current()) {
    // Its attributes may change after a container takes it in, so it counts for a fixed depth
    // they have to stay below (see RenderBudget::namespace_depth).
    for (const auto& [name, v] : o.attrs) {
      if (v.depth() >= budget->namespace_depth()) return budget->NamespaceTooDeep(v.depth());
    }
    o.depth = budget->namespace_depth();
  }
  return Value::Object(std::move(o));
}

StatusOr<Value> StrftimeNow(const InterpreterOptions& options, CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string()) {
    return TypeError("strftime_now() takes one string argument");
  }
  std::time_t t;
  int64_t micros = 0;
  if (options.now_unix_seconds) {
    t = static_cast<std::time_t>(*options.now_unix_seconds);
  } else {
    timeval tv;
    gettimeofday(&tv, nullptr);
    t = tv.tv_sec;
    micros = tv.tv_usec;
  }
  std::tm tm{};
  localtime_r(&t, &tm);
  // datetime.strftime on a naive datetime: %f is microseconds, %z and %Z are empty.
  const std::string& fmt = args.positional[0].str();
  std::string prepared;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] == '%' && i + 1 < fmt.size()) {
      char c = fmt[i + 1];
      if (c == 'f') {
        char buf[16];
        std::snprintf(buf, sizeof(buf), "%06" PRId64, micros);
        prepared += buf;
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      prepared += fmt.substr(i, 2);
      ++i;
      continue;
    }
    prepared += fmt[i];
  }
  if (prepared.empty()) return Value::Str("");
  std::string out(256 + prepared.size() * 4, '\0');
  size_t n = std::strftime(out.data(), out.size(), prepared.c_str(), &tm);
  out.resize(n);
  return Value::Str(std::move(out));
}

}  // namespace

void AddGlobals(Frame* frame, const InterpreterOptions& options) {
  frame->Set("range", NativeFunction::Make("range", "function",
                                           [](Interpreter&, CallArgs& a) { return Range(a); }));
  frame->Set("dict",
             NativeFunction::Make("dict", "type", [](Interpreter&, CallArgs& a) -> StatusOr<Value> {
               ASTR_ASSIGN_OR_RETURN(DictData d, DictFromArgs(a, "dict"));
               return Value::Dict(std::move(d));
             }));
  frame->Set(
      "namespace",
      NativeFunction::Make("namespace", "type", [](Interpreter&, CallArgs& a) -> StatusOr<Value> {
        ASTR_ASSIGN_OR_RETURN(DictData d, DictFromArgs(a, "namespace"));
        return MakeNamespace(d);
      }));
  frame->Set("joiner", NativeFunction::Make("joiner", "type", [](Interpreter&, CallArgs& a) {
               std::string sep = ", ";
               if (!a.positional.empty()) sep = ToStr(a.positional[0]);
               if (const Value* s = a.Keyword("sep")) sep = ToStr(*s);
               auto used = std::make_shared<bool>(false);
               return StatusOr<Value>(
                   NativeFunction::Make("joiner", "Joiner", [sep, used](Interpreter&, CallArgs&) {
                     if (!*used) {
                       *used = true;
                       return StatusOr<Value>(Value::Str(""));
                     }
                     return StatusOr<Value>(Value::Str(sep));
                   }));
             }));
  frame->Set("raise_exception",
             NativeFunction::Make(
                 "raise_exception", "function", [](Interpreter&, CallArgs& a) -> StatusOr<Value> {
                   std::string message = a.positional.empty() ? "" : ToStr(a.positional[0]);
                   return InvalidArgumentError(message);
                 }));
  InterpreterOptions copy = options;
  frame->Set("strftime_now",
             NativeFunction::Make("strftime_now", "function", [copy](Interpreter&, CallArgs& a) {
               return StrftimeNow(copy, a);
             }));
}

}  // namespace astr::jinja
