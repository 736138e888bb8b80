// Typed access to a model's config keys, for ConfigFromHfJson / ConfigFromGguf and the
// architecture descriptions (common/model/arch/): every error names the file and the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/gguf.h"
#include "common/model/model_config.h"

namespace astr::model {

// A config.json object (or one of its sub-objects).
class ConfigJson {
 public:
  ConfigJson(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {}

  Status Error(const std::string& key, const std::string& why) const {
    return InvalidArgumentError(path_ + ": key '" + key + "' " + why);
  }
  Status Unsupported(const std::string& key, const std::string& why) const {
    return UnimplementedError(path_ + ": key '" + key + "' " + why);
  }
  bool Has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  StatusOr<int64_t> Int(const std::string& key) const;
  StatusOr<int64_t> Int(const std::string& key, int64_t dflt) const {
    return Has(key) ? Int(key) : StatusOr<int64_t>(dflt);
  }
  StatusOr<double> Number(const std::string& key, double dflt) const;
  StatusOr<bool> Bool(const std::string& key, bool dflt) const;
  StatusOr<std::string> String(const std::string& key, const std::string& dflt) const;
  // An int or a list of ints (eos_token_id).
  Status IntList(const std::string& key, std::vector<int64_t>* out) const;
  const nlohmann::json& raw() const { return j_; }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

// GGUF metadata "{arch}.rest", falling back to "llama.rest" for architectures that reuse the llama
// keys (GgufConfigKey).
class GgufKeys {
 public:
  GgufKeys(const GgufFile& g, std::string arch) : g_(g), arch_(std::move(arch)) {}
  std::string Key(const std::string& rest) const;
  StatusOr<int64_t> Int(const std::string& rest) const { return g_.GetInt(Key(rest)); }
  StatusOr<int64_t> Int(const std::string& rest, int64_t d) const {
    return g_.GetInt(Key(rest), d);
  }
  StatusOr<double> Float(const std::string& rest, double d) const {
    return g_.GetFloat(Key(rest), d);
  }
  bool Has(const std::string& rest) const { return g_.Find(Key(rest)) != nullptr; }
  Status Error(const std::string& rest, const std::string& why) const {
    return InvalidArgumentError(g_.path() + ": key '" + Key(rest) + "' " + why);
  }
  const GgufFile& file() const { return g_; }
  const std::string& arch() const { return arch_; }

 private:
  const GgufFile& g_;
  std::string arch_;
};

// Whether config.json's rope_parameters (transformers 5) holds one set per layer type,
// {"full_attention": {...}, "sliding_attention": {...}} (Gemma 3's), rather than one set.
inline bool RopeParametersPerLayerType(const ConfigJson& r) {
  if (!r.Has("rope_parameters")) return false;
  const nlohmann::json& p = r.raw()["rope_parameters"];
  return p.is_object() && (p.contains("full_attention") || p.contains("sliding_attention"));
}

// The context length cap of ModelConfig::Validate, checked where the file's key is known so that
// the error names it (`error` turns the reason into a Status naming file and key).
template <typename ErrorFn>
Status CheckContextTokens(int64_t value, ErrorFn error) {
  if (value > kMaxContextTokens) {
    return error("= " + std::to_string(value) + " is more than the longest context astr accepts (" +
                 std::to_string(kMaxContextTokens) + " tokens)");
  }
  return OkStatus();
}

}  // namespace astr::model
