// A Hugging Face model folder's tokenizer_config.json and the special-token strings it names (with
// special_tokens_map.json for the keys it lacks), read once for the tokenizer and the chat
// template.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace astr::tok {

// The special-token strings a template sees as bos_token, eos_token, ... (transformers'
// special_tokens_map). A token the model leaves unset (null) stays undefined in the template.
struct ChatSpecialTokens {
  std::optional<std::string> bos, eos, unk, sep, pad, cls, mask;
  std::vector<std::string> additional;  // additional_special_tokens
};

// The single special tokens: their key (tokenizer_config.json, template variable) and member.
struct SpecialTokenField {
  const char* key;
  std::optional<std::string> ChatSpecialTokens::*member;
};
inline constexpr SpecialTokenField kSpecialTokenFields[] = {
    {"bos_token", &ChatSpecialTokens::bos},   {"eos_token", &ChatSpecialTokens::eos},
    {"unk_token", &ChatSpecialTokens::unk},   {"sep_token", &ChatSpecialTokens::sep},
    {"pad_token", &ChatSpecialTokens::pad},   {"cls_token", &ChatSpecialTokens::cls},
    {"mask_token", &ChatSpecialTokens::mask},
};

struct HfTokenizerConfig {
  // tokenizer_config.json, keys in file order; an empty object when the file does not exist.
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  // A key of tokenizer_config.json wins, null included (the token is then unset, as in
  // transformers); special_tokens_map.json fills the keys the config does not have.
  ChatSpecialTokens tokens;
};

// `config_path`: the folder's tokenizer_config.json (it may be absent). Malformed files and token
// entries that are neither a string, an AddedToken object nor null are errors naming the file and
// key.
StatusOr<HfTokenizerConfig> ReadHfTokenizerConfig(const std::filesystem::path& config_path);

}  // namespace astr::tok
