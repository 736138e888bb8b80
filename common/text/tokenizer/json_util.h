// Typed access to tokenizer.json fields with errors that name the component and the field.
// Nothing here throws: every access checks the JSON type first.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/base/status.h"
#include "common/text/tokenizer/pattern.h"

namespace astr::tok {

// j["type"] as a string; `what` names the component ("normalizer", "decoder", ...).
StatusOr<std::string> JsonType(const nlohmann::json& j, std::string_view what);
StatusOr<std::string> JsonString(const nlohmann::json& j, const char* key, std::string_view what);
StatusOr<const nlohmann::json*> JsonArray(const nlohmann::json& j, const char* key,
                                          std::string_view what);
// j[key] as a bool, `fallback` when absent or null.
StatusOr<bool> JsonBool(const nlohmann::json& j, const char* key, bool fallback,
                        std::string_view what);
// j["pattern"]: {"String": "..."} or {"Regex": "..."}.
StatusOr<Pattern> PatternFromJson(const nlohmann::json& j, std::string_view what);

}  // namespace astr::tok
