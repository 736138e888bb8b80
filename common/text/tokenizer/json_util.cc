#include "common/text/tokenizer/json_util.h"

namespace astr::tok {
namespace {

Status FieldError(std::string_view what, const char* key, const char* expected) {
  return InvalidArgumentError(std::string(what) + ": field \"" + key + "\" must be " + expected);
}

}  // namespace

StatusOr<std::string> JsonType(const nlohmann::json& j, std::string_view what) {
  if (!j.is_object()) return InvalidArgumentError(std::string(what) + " must be a JSON object");
  const auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return FieldError(what, "type", "a string");
  return it->get<std::string>();
}

StatusOr<std::string> JsonString(const nlohmann::json& j, const char* key, std::string_view what) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return FieldError(what, key, "a string");
  return it->get<std::string>();
}

StatusOr<const nlohmann::json*> JsonArray(const nlohmann::json& j, const char* key,
                                          std::string_view what) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return FieldError(what, key, "an array");
  return &*it;
}

StatusOr<bool> JsonBool(const nlohmann::json& j, const char* key, bool fallback,
                        std::string_view what) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return FieldError(what, key, "true or false");
  return it->get<bool>();
}

StatusOr<Pattern> PatternFromJson(const nlohmann::json& j, std::string_view what) {
  const auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) {
    return FieldError(what, "pattern", "an object {\"String\": ...} or {\"Regex\": ...}");
  }
  if (const auto s = it->find("String"); s != it->end() && s->is_string()) {
    return Pattern::Literal(s->get<std::string>());
  }
  if (const auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    auto pattern = Pattern::FromRegex(r->get<std::string>());
    if (!pattern.ok()) {
      return InvalidArgumentError(std::string(what) +
                                  ": bad regex pattern: " + pattern.status().message());
    }
    return pattern;
  }
  return FieldError(what, "pattern", "an object {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace astr::tok
