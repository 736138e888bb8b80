// json.dumps, following CPython's json.encoder: separators, indentation, key coercion, sort_keys,
// ensure_ascii and float repr.
#include <algorithm>
#include <cmath>

#include "common/chat/jinja/py_format.h"
#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/text.h"

namespace astr::jinja {
namespace {

constexpr int kMaxDepth = 512;

struct Dumper {
  const JsonDumpOptions& options;
  std::string item_sep;
  std::string key_sep;
  std::string out;
  // The text can be far longer than the value (`[s] * 1000` shares one `s`; indentation repeats
  // per level), so it is checked against the budget as it grows.
  GrowthCheck growth;

  Status Fail(const Value& v) {
    return TypeError("Object of type " + TypeName(v) + " is not JSON serializable");
  }

  static std::string FloatText(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    return FloatRepr(d);
  }

  Status NewLine(int level) {
    ASTR_RETURN_IF_ERROR(ReserveBytes(out.size() + level * options.indent->size()));
    out += '\n';
    for (int i = 0; i < level; ++i) out += *options.indent;
    return OkStatus();
  }

  // Dict keys: str as is; numbers, bools and None become strings like json.dumps does.
  StatusOr<std::string> KeyText(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::kString:
        return k.str();
      case Value::Kind::kBool:
        return std::string(k.bool_value() ? "true" : "false");
      case Value::Kind::kInt:
        return std::to_string(k.int_value());
      case Value::Kind::kFloat:
        return FloatText(k.number_value());
      case Value::Kind::kNone:
        return std::string("null");
      default:
        return TypeError("keys must be str, int, float, bool or None, not " + TypeName(k));
    }
  }

  Status DumpList(const ValueList& items, int level) {
    if (items.empty()) {
      out += "[]";
      return OkStatus();
    }
    out += '[';
    if (options.indent) ASTR_RETURN_IF_ERROR(NewLine(level + 1));
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) {
        out += item_sep;
        if (options.indent) ASTR_RETURN_IF_ERROR(NewLine(level + 1));
      }
      ASTR_RETURN_IF_ERROR(Dump(items[i], level + 1));
    }
    if (options.indent) ASTR_RETURN_IF_ERROR(NewLine(level));
    out += ']';
    return OkStatus();
  }

  Status DumpDict(const DictData& dict, int level) {
    if (dict.items.empty()) {
      out += "{}";
      return OkStatus();
    }
    std::vector<const std::pair<Value, Value>*> order;
    for (const auto& kv : dict.items) order.push_back(&kv);
    if (options.sort_keys) {
      Status error;
      std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
        StatusOr<bool> lt = Less(a->first, b->first, "<");
        if (!lt.ok()) {
          if (error.ok()) error = lt.status();
          return false;
        }
        return *lt;
      });
      ASTR_RETURN_IF_ERROR(error);
    }
    out += '{';
    if (options.indent) ASTR_RETURN_IF_ERROR(NewLine(level + 1));
    for (size_t i = 0; i < order.size(); ++i) {
      if (i > 0) {
        out += item_sep;
        if (options.indent) ASTR_RETURN_IF_ERROR(NewLine(level + 1));
      }
      ASTR_ASSIGN_OR_RETURN(std::string key, KeyText(order[i]->first));
      out += JsonQuote(key, options.ensure_ascii);
      out += key_sep;
      ASTR_RETURN_IF_ERROR(Dump(order[i]->second, level + 1));
    }
    if (options.indent) ASTR_RETURN_IF_ERROR(NewLine(level));
    out += '}';
    return OkStatus();
  }

  Status Dump(const Value& v, int level) {
    SpendItems(1);
    if (level > kMaxDepth)
      return InvalidArgumentError("RecursionError: maximum recursion depth exceeded");
    if (!growth.Fits(out.size())) return ReserveBytes(out.size());
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return OkStatus();
      case Value::Kind::kBool:
        out += v.bool_value() ? "true" : "false";
        return OkStatus();
      case Value::Kind::kInt:
        out += std::to_string(v.int_value());
        return OkStatus();
      case Value::Kind::kFloat:
        out += FloatText(v.number_value());
        return OkStatus();
      case Value::Kind::kString:
        out += JsonQuote(v.str(), options.ensure_ascii);
        return OkStatus();
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        return DumpList(v.items(), level);
      case Value::Kind::kDict:
        return DumpDict(v.dict(), level);
      default:
        return Fail(v);
    }
  }
};

// The escape json.dumps writes: backslash, u and four lower-case hex digits; by hand, as
// snprintf made escaping text of control characters slow.
void AppendUnicodeEscape(std::string* out, unsigned code) {
  static constexpr char kHex[] = "0123456789abcdef";
  const char escape[6] = {'\\',
                          'u',
                          kHex[(code >> 12) & 0xF],
                          kHex[(code >> 8) & 0xF],
                          kHex[(code >> 4) & 0xF],
                          kHex[code & 0xF]};
  out->append(escape, sizeof(escape));
}

}  // namespace

std::string JsonQuote(std::string_view s, bool ensure_ascii) {
  SpendText(s.size());
  std::string out = "\"";
  GrowthCheck growth;
  auto escape_ascii = [&](char32_t c) -> bool {
    switch (c) {
      case '"':
        out += "\\\"";
        return true;
      case '\\':
        out += "\\\\";
        return true;
      case '\n':
        out += "\\n";
        return true;
      case '\r':
        out += "\\r";
        return true;
      case '\t':
        out += "\\t";
        return true;
      case '\b':
        out += "\\b";
        return true;
      case '\f':
        out += "\\f";
        return true;
      default:
        if (c < 0x20) {
          AppendUnicodeEscape(&out, c);
          return true;
        }
        return false;
    }
  };
  if (!ensure_ascii) {
    for (char ch : s) {
      if (!growth.Fits(out.size())) break;  // the render fails; the text is discarded
      unsigned char b = static_cast<unsigned char>(ch);
      if (b >= 0x80 || !escape_ascii(b)) out += ch;
    }
  } else {
    for (char32_t c : text::Decode(s)) {
      if (!growth.Fits(out.size())) break;  // the render fails; the text is discarded
      if (c < 0x80) {
        if (c == 0x7F) {
          AppendUnicodeEscape(&out, c);
        } else if (!escape_ascii(c)) {
          out += static_cast<char>(c);
        }
      } else if (c < 0x10000) {
        AppendUnicodeEscape(&out, c);
      } else {
        unsigned v = c - 0x10000;
        AppendUnicodeEscape(&out, 0xD800 | (v >> 10));
        AppendUnicodeEscape(&out, 0xDC00 | (v & 0x3FF));
      }
    }
  }
  out += '"';
  return out;
}

StatusOr<std::string> JsonDumps(const Value& value, const JsonDumpOptions& options) {
  Dumper d{options, "", "", "", {}};
  d.item_sep = options.item_separator.value_or(options.indent ? "," : ", ");
  d.key_sep = options.key_separator.value_or(": ");
  ASTR_RETURN_IF_ERROR(d.Dump(value, 0));
  return std::move(d.out);
}

}  // namespace astr::jinja
