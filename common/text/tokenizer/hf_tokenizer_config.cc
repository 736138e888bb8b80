#include "common/text/tokenizer/hf_tokenizer_config.h"

#include "common/base/file_util.h"

namespace astr::tok {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// A token entry: "text", {"content": "text", ...} (AddedToken) or null.
StatusOr<std::optional<std::string>> TokenString(const ojson& v, const std::string& where) {
  if (v.is_null()) return std::optional<std::string>();
  if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return std::optional<std::string>(v["content"].get<std::string>());
  }
  return InvalidArgumentError(where + ": expected a string, an AddedToken object or null");
}

// Special tokens from tokenizer_config.json, falling back to special_tokens_map.json per key.
Status ReadHfTokens(const ojson& config, const std::string& config_path,
                    const std::optional<ojson>& special_map, const std::string& map_path,
                    ChatSpecialTokens* tokens) {
  for (const SpecialTokenField& f : kSpecialTokenFields) {
    const ojson* src = nullptr;
    std::string where;
    if (config.contains(f.key)) {
      src = &config[f.key];
      where = config_path + ": " + f.key;
    } else if (special_map && special_map->is_object() && special_map->contains(f.key)) {
      src = &(*special_map)[f.key];
      where = map_path + ": " + f.key;
    }
    if (src == nullptr) continue;
    ASTR_ASSIGN_OR_RETURN(tokens->*f.member, TokenString(*src, where));
  }
  const ojson* extra = nullptr;
  if (config.contains("additional_special_tokens")) {
    extra = &config["additional_special_tokens"];
  } else if (special_map && special_map->is_object() &&
             special_map->contains("additional_special_tokens")) {
    extra = &(*special_map)["additional_special_tokens"];
  }
  if (extra != nullptr && extra->is_array()) {
    for (const ojson& t : *extra) {
      ASTR_ASSIGN_OR_RETURN(std::optional<std::string> s,
                            TokenString(t, config_path + ": additional_special_tokens"));
      if (s) tokens->additional.push_back(*s);
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<HfTokenizerConfig> ReadHfTokenizerConfig(const fs::path& config_path) {
  HfTokenizerConfig out;
  if (fs::exists(config_path)) {
    ASTR_ASSIGN_OR_RETURN(out.config, ReadOrderedJsonFile(config_path.string()));
    if (!out.config.is_object()) {
      return InvalidArgumentError(config_path.string() + ": expected a JSON object");
    }
  }
  std::optional<ojson> special_map;
  const fs::path map_path = config_path.parent_path() / "special_tokens_map.json";
  if (fs::exists(map_path)) {
    ASTR_ASSIGN_OR_RETURN(special_map, ReadOrderedJsonFile(map_path.string()));
  }
  ASTR_RETURN_IF_ERROR(
      ReadHfTokens(out.config, config_path.string(), special_map, map_path.string(), &out.tokens));
  return out;
}

}  // namespace astr::tok
