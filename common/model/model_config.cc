#include "common/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/base/file_util.h"
#include "common/base/token_ids.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& key, const std::string& why) {
  return InvalidArgumentError("config key '" + key + "' " + why);
}

}  // namespace

Status ModelConfig::Validate() const {
  const std::pair<const char*, int64_t> positive[] = {{"vocab_size", vocab_size},
                                                      {"hidden_size", hidden_size},
                                                      {"intermediate_size", intermediate_size},
                                                      {"num_layers", num_layers},
                                                      {"num_heads", num_heads},
                                                      {"num_kv_heads", num_kv_heads},
                                                      {"head_dim", head_dim},
                                                      {"rope_dim", rope_dim},
                                                      {"max_context_tokens", max_context_tokens}};
  for (const auto& [key, value] : positive) {
    if (value <= 0) return Bad(key, "must be positive, got " + std::to_string(value));
  }
  if (max_context_tokens > kMaxContextTokens) {
    return Bad("max_context_tokens", "must be at most " + std::to_string(kMaxContextTokens) +
                                         ", got " + std::to_string(max_context_tokens));
  }
  if (sliding_window < 0 || sliding_window > kMaxContextTokens) {
    return Bad("sliding_window", "must be in [0, " + std::to_string(kMaxContextTokens) + "], got " +
                                     std::to_string(sliding_window));
  }
  if (sliding_window_pattern < 0) {
    return Bad("sliding_window_pattern",
               "must be >= 0, got " + std::to_string(sliding_window_pattern));
  }
  const std::pair<const char*, double> nonneg[] = {{"rope_local_theta", rope_local_theta},
                                                   {"attn_scale", attn_scale},
                                                   {"attn_softcap", attn_softcap},
                                                   {"final_softcap", final_softcap},
                                                   {"norm_weight_offset", norm_weight_offset}};
  for (const auto& [key, value] : nonneg) {
    if (!(value >= 0.0) || !std::isfinite(value)) return Bad(key, "must be >= 0 and finite");
  }
  if (!(embed_scale > 0.0) || !std::isfinite(embed_scale)) {
    return Bad("embed_scale", "must be > 0 and finite");
  }
  if (num_heads % num_kv_heads != 0) {
    return Bad("num_kv_heads", std::to_string(num_kv_heads) + " does not divide num_heads " +
                                   std::to_string(num_heads));
  }
  if (head_dim % 2 != 0) return Bad("head_dim", "must be even, got " + std::to_string(head_dim));
  if (rope_dim % 2 != 0 || rope_dim > head_dim) {
    return Bad("rope_dim", "must be even and <= head_dim, got " + std::to_string(rope_dim));
  }
  if (!(rms_norm_eps > 0.0) || !std::isfinite(rms_norm_eps))
    return Bad("rms_norm_eps", "must be > 0");
  if (!(rope_theta > 0.0) || !std::isfinite(rope_theta)) return Bad("rope_theta", "must be > 0");
  if (rope_scaling.type != RopeScaling::Type::kNone &&
      (!(rope_scaling.factor > 0.0) || !std::isfinite(rope_scaling.factor))) {
    return Bad("rope_scaling.factor", "must be > 0 and finite");
  }
  if (rope_scaling.type == RopeScaling::Type::kLlama3 &&
      (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
       rope_scaling.original_max_position <= 0)) {
    return Bad("rope_scaling",
               "llama3 needs high_freq_factor > low_freq_factor and "
               "original_max_position_embeddings > 0");
  }
  if (rope_scaling.type == RopeScaling::Type::kLongRope) {
    const size_t half = static_cast<size_t>(rope_dim / 2);
    for (const auto* f : {&rope_scaling.short_factor, &rope_scaling.long_factor}) {
      const char* key = f == &rope_scaling.short_factor ? "rope_scaling.short_factor"
                                                        : "rope_scaling.long_factor";
      if (f->size() != half) {
        return Bad(key, "must hold rope_dim / 2 = " + std::to_string(half) + " numbers, got " +
                            std::to_string(f->size()));
      }
      for (double v : *f) {
        if (!(v > 0.0) || !std::isfinite(v)) return Bad(key, "must be > 0 and finite");
      }
    }
    if (!(rope_scaling.attention_factor > 0.0) || !std::isfinite(rope_scaling.attention_factor)) {
      return Bad("rope_scaling.attention_factor", "must be > 0 and finite");
    }
    if (rope_scaling.original_max_position <= 0) {
      return Bad("original_max_position_embeddings", "must be > 0 for LongRoPE");
    }
  }
  if (rope_scaling.type == RopeScaling::Type::kYarn) {
    if (rope_scaling.original_max_position <= 0) {
      return Bad("rope_scaling.original_max_position_embeddings", "must be > 0 for YaRN");
    }
    for (const auto& [key, v] :
         {std::pair{"rope_scaling.beta_fast", rope_scaling.beta_fast},
          std::pair{"rope_scaling.beta_slow", rope_scaling.beta_slow},
          std::pair{"rope_scaling.attention_factor", rope_scaling.attention_factor}}) {
      if (!(v > 0.0) || !std::isfinite(v)) return Bad(key, "must be > 0 and finite");
    }
  }
  if (mlp_activation == MlpActivation::kSwigluClamped &&
      (!(swiglu_limit > 0.0) || !std::isfinite(swiglu_limit) || !std::isfinite(swiglu_alpha))) {
    return Bad("swiglu_limit", "must be > 0 and finite (and swiglu_alpha finite)");
  }
  if (num_experts < 0)
    return Bad("num_experts", "must be >= 0, got " + std::to_string(num_experts));
  if (num_experts == 0 && (router_bias || expert_bias)) {
    return Bad("num_experts", "is 0 but the config has router / expert biases");
  }
  if (num_experts > 0) {
    if (router_groups < 1 || router_groups > 64 || num_experts % router_groups != 0 ||
        (router_groups > 1 && num_experts / router_groups < 2)) {
      return Bad("n_group", "must divide num_experts " + std::to_string(num_experts) +
                                " into at most 64 groups of at least 2, got " +
                                std::to_string(router_groups));
    }
    if (router_topk_groups < 1 || router_topk_groups > router_groups ||
        num_experts_per_tok > router_topk_groups * (num_experts / router_groups)) {
      return Bad("topk_group",
                 "must be in [1, n_group] and keep num_experts_per_tok experts, got " +
                     std::to_string(router_topk_groups));
    }
    if (!(routed_scaling_factor > 0.0) || !std::isfinite(routed_scaling_factor)) {
      return Bad("routed_scaling_factor", "must be > 0 and finite");
    }
    if (!router_sigmoid && (router_choice_bias || router_groups > 1)) {
      return Bad("scoring_func", "softmax routing has no choice bias or expert groups");
    }
  }
  if (num_experts > 0) {
    if (num_experts > 4096) {
      return Bad("num_experts", "must be at most 4096, got " + std::to_string(num_experts));
    }
    if (num_experts_per_tok < 1 || num_experts_per_tok > num_experts) {
      return Bad("num_experts_per_tok",
                 "must be in [1, num_experts = " + std::to_string(num_experts) + "], got " +
                     std::to_string(num_experts_per_tok));
    }
    if (moe_intermediate_size <= 0) {
      return Bad("moe_intermediate_size",
                 "must be positive, got " + std::to_string(moe_intermediate_size));
    }
    if (shared_expert_intermediate_size < 0) {
      return Bad("shared_expert_intermediate_size",
                 "must be >= 0, got " + std::to_string(shared_expert_intermediate_size));
    }
    if (moe_layer_step < 1) {
      return Bad("decoder_sparse_step", "must be >= 1, got " + std::to_string(moe_layer_step));
    }
    for (int64_t l : dense_layers) {
      if (l < 0 || l >= num_layers) {
        return Bad("mlp_only_layers",
                   "holds layer " + std::to_string(l) + " of " + std::to_string(num_layers));
      }
    }
  }
  if (bos_token_id >= vocab_size) {
    return Bad("bos_token_id", std::to_string(bos_token_id) + " is outside the vocabulary");
  }
  for (int64_t eos : eos_token_ids) {
    if (eos < 0 || eos >= vocab_size) {
      return Bad("eos_token_id", std::to_string(eos) + " is outside the vocabulary");
    }
  }
  return OkStatus();
}

int64_t ModelConfig::LayerWindow(int64_t l) const {
  if (sliding_window_pattern > 0 && (l + 1) % sliding_window_pattern == 0) return 0;
  return sliding_window;
}

bool ModelConfig::LayerUsesLocalRope(int64_t l) const {
  return rope_local_theta > 0.0 && LayerWindow(l) > 0;
}

bool ModelConfig::LayerIsMoe(int64_t l) const {
  if (num_experts <= 0 || moe_layer_step < 1 || (l + 1) % moe_layer_step != 0) return false;
  return std::find(dense_layers.begin(), dense_layers.end(), l) == dense_layers.end();
}

bool ModelConfig::HasDenseLayers() const {
  for (int64_t l = 0; l < num_layers; ++l) {
    if (!LayerIsMoe(l)) return true;
  }
  return false;
}

float ModelConfig::AttnScale() const {
  return attn_scale > 0.0 ? static_cast<float>(attn_scale)
                          : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int64_t ModelConfig::ParameterCount() const {
  int64_t total = 0;
  for (const WeightSpec& w : ExpectedWeights(*this)) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    total += n;
  }
  return total;
}

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c) {
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  std::vector<WeightSpec> w;
  w.push_back({"embed", {c.vocab_size, c.hidden_size}});
  w.push_back({"final_norm", {c.hidden_size}});
  if (!c.tie_word_embeddings) w.push_back({"lm_head", {c.vocab_size, c.hidden_size}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    w.push_back({p + "attn_norm", {c.hidden_size}});
    w.push_back({p + "q_proj", {q_dim, c.hidden_size}});
    w.push_back({p + "k_proj", {kv_dim, c.hidden_size}});
    w.push_back({p + "v_proj", {kv_dim, c.hidden_size}});
    if (c.qkv_bias) {
      w.push_back({p + "q_bias", {q_dim}});
      w.push_back({p + "k_bias", {kv_dim}});
      w.push_back({p + "v_bias", {kv_dim}});
    }
    if (c.gated_attention) w.push_back({p + "attn_gate", {q_dim, c.hidden_size}});
    if (c.qk_norm != QkNorm::kNone) {
      w.push_back({p + "q_norm", {c.head_dim}});
      w.push_back({p + "k_norm", {c.head_dim}});
    }
    w.push_back({p + "o_proj", {c.hidden_size, q_dim}});
    if (c.o_bias) w.push_back({p + "o_bias", {c.hidden_size}});
    if (c.attn_sinks) w.push_back({p + "attn_sinks", {c.num_heads}});
    w.push_back({p + "mlp_norm", {c.hidden_size}});
    if (c.LayerIsMoe(i)) {
      // Part by part (every expert's gate_proj, then up_proj, then down_proj): GGUF stacks them.
      w.push_back({p + "router", {c.num_experts, c.hidden_size}});
      if (c.router_bias) w.push_back({p + "router_bias", {c.num_experts}});
      if (c.router_choice_bias) w.push_back({p + "router_choice_bias", {c.num_experts}});
      const int64_t f = c.moe_intermediate_size, h = c.hidden_size;
      std::vector<std::pair<const char*, std::vector<int64_t>>> parts = {
          {"gate_proj", {f, h}}, {"up_proj", {f, h}}, {"down_proj", {h, f}}};
      if (c.expert_bias) {
        parts.insert(parts.end(), {{"gate_bias", {f}}, {"up_bias", {f}}, {"down_bias", {h}}});
      }
      for (const auto& [part, shape] : parts) {
        for (int64_t e = 0; e < c.num_experts; ++e) {
          w.push_back({p + "experts." + std::to_string(e) + "." + part, shape});
        }
      }
      if (const int64_t s = c.shared_expert_intermediate_size; s > 0) {
        w.push_back({p + "shared_expert.gate_proj", {s, h}});
        w.push_back({p + "shared_expert.up_proj", {s, h}});
        w.push_back({p + "shared_expert.down_proj", {h, s}});
        if (c.shared_expert_gated) w.push_back({p + "shared_expert_gate", {1, h}});
      }
    } else {
      w.push_back({p + "gate_proj", {c.intermediate_size, c.hidden_size}});
      w.push_back({p + "up_proj", {c.intermediate_size, c.hidden_size}});
      w.push_back({p + "down_proj", {c.hidden_size, c.intermediate_size}});
    }
    if (c.sandwich_norms) {
      w.push_back({p + "post_attn_norm", {c.hidden_size}});
      w.push_back({p + "post_mlp_norm", {c.hidden_size}});
    }
  }
  return w;
}

// ---------------------------------------------------------------------------------------------------
// HF config.json

StatusOr<int64_t> ConfigJson::Int(const std::string& key) const {
  if (!Has(key)) return Error(key, "is missing");
  if (!j_[key].is_number_integer()) return Error(key, "must be an integer, got " + j_[key].dump());
  return j_[key].get<int64_t>();
}

StatusOr<double> ConfigJson::Number(const std::string& key, double dflt) const {
  if (!Has(key)) return dflt;
  if (!j_[key].is_number()) return Error(key, "must be a number, got " + j_[key].dump());
  return j_[key].get<double>();
}

StatusOr<bool> ConfigJson::Bool(const std::string& key, bool dflt) const {
  if (!Has(key)) return dflt;
  if (!j_[key].is_boolean()) return Error(key, "must be true or false, got " + j_[key].dump());
  return j_[key].get<bool>();
}

StatusOr<std::string> ConfigJson::String(const std::string& key, const std::string& dflt) const {
  if (!Has(key)) return dflt;
  if (!j_[key].is_string()) return Error(key, "must be a string, got " + j_[key].dump());
  return j_[key].get<std::string>();
}

Status ConfigJson::IntList(const std::string& key, std::vector<int64_t>* out) const {
  if (!Has(key)) return OkStatus();
  const json& v = j_[key];
  if (v.is_number_integer()) {
    out->push_back(v.get<int64_t>());
    return OkStatus();
  }
  if (!v.is_array()) return Error(key, "must be an integer or a list of integers");
  for (const json& e : v) {
    if (!e.is_number_integer()) return Error(key, "must be an integer or a list of integers");
    out->push_back(e.get<int64_t>());
  }
  return OkStatus();
}

namespace {

StatusOr<json> ParseJsonFile(const std::string& path) {
  ASTR_ASSIGN_OR_RETURN(json j, ReadJsonFile(path));
  if (!j.is_object()) return InvalidArgumentError(path + ": not a JSON object");
  return j;
}

// LongRoPE's keys as transformers reads them (_compute_longrope_parameters): the pre-training
// context is the config's top-level original_max_position_embeddings (or the model class's
// default, `arch_default_original`), else the rope block's own, else max_position_embeddings; the
// cos / sin factor is attention_factor, else derived from `factor` (default: the context's growth,
// max_position_embeddings / original) as sqrt(1 + ln(factor) / ln(original)).
Status ReadHfLongRope(const ConfigJson& r, const ConfigJson& s, int64_t arch_default_original,
                      ModelConfig* c) {
  RopeScaling& rs = c->rope_scaling;
  rs.type = RopeScaling::Type::kLongRope;
  for (auto [key, out] :
       {std::pair{"short_factor", &rs.short_factor}, std::pair{"long_factor", &rs.long_factor}}) {
    if (!s.Has(key) || !s.raw()[key].is_array()) return s.Error(key, "must be a list of numbers");
    for (const json& v : s.raw()[key]) {
      if (!v.is_number()) return s.Error(key, "must be a list of numbers");
      out->push_back(v.get<double>());
    }
  }
  if (r.Has("original_max_position_embeddings")) {
    ASTR_ASSIGN_OR_RETURN(rs.original_max_position, r.Int("original_max_position_embeddings"));
  } else if (arch_default_original > 0) {
    rs.original_max_position = arch_default_original;
  } else {
    ASTR_ASSIGN_OR_RETURN(rs.original_max_position,
                          s.Int("original_max_position_embeddings", c->max_context_tokens));
  }
  if (rs.original_max_position <= 0) {
    return r.Error("original_max_position_embeddings", "must be positive");
  }
  ASTR_ASSIGN_OR_RETURN(rs.factor,
                        s.Number("factor", static_cast<double>(c->max_context_tokens) /
                                               static_cast<double>(rs.original_max_position)));
  const double derived =
      rs.factor <= 1.0
          ? 1.0
          : std::sqrt(1.0 + std::log(rs.factor) /
                                std::log(static_cast<double>(rs.original_max_position)));
  ASTR_ASSIGN_OR_RETURN(rs.attention_factor, s.Number("attention_factor", derived));
  return OkStatus();
}

// YaRN's keys as transformers reads them (_compute_yarn_parameters): factor (default: the context's
// growth over original_max_position_embeddings), attention_factor (default 0.1 ln(factor) + 1, or
// DeepSeek's mscale / mscale_all_dim ratio of that), beta_fast / beta_slow (32 / 1), truncate
// (true). The pre-training context is the block's original_max_position_embeddings, else the
// config's top-level one.
Status ReadHfYarn(const ConfigJson& r, const ConfigJson& s, ModelConfig* c) {
  RopeScaling& rs = c->rope_scaling;
  rs.type = RopeScaling::Type::kYarn;
  if (s.Has("original_max_position_embeddings")) {
    ASTR_ASSIGN_OR_RETURN(rs.original_max_position, s.Int("original_max_position_embeddings"));
  } else if (r.Has("original_max_position_embeddings")) {
    ASTR_ASSIGN_OR_RETURN(rs.original_max_position, r.Int("original_max_position_embeddings"));
  } else {
    return s.Error("original_max_position_embeddings", "is missing (YaRN needs it)");
  }
  if (rs.original_max_position <= 0) {
    return s.Error("original_max_position_embeddings", "must be positive");
  }
  ASTR_ASSIGN_OR_RETURN(rs.factor,
                        s.Number("factor", static_cast<double>(c->max_context_tokens) /
                                               static_cast<double>(rs.original_max_position)));
  auto mscale = [](double factor, double m) {
    return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
  };
  ASTR_ASSIGN_OR_RETURN(double m, s.Number("mscale", 0.0));
  ASTR_ASSIGN_OR_RETURN(double m_all, s.Number("mscale_all_dim", 0.0));
  const double derived = m != 0.0 && m_all != 0.0 ? mscale(rs.factor, m) / mscale(rs.factor, m_all)
                                                  : mscale(rs.factor, 1.0);
  ASTR_ASSIGN_OR_RETURN(rs.attention_factor, s.Number("attention_factor", derived));
  // transformers reads `or 32` / `or 1`: a null or 0 takes the default too.
  ASTR_ASSIGN_OR_RETURN(rs.beta_fast, s.Number("beta_fast", 0.0));
  if (rs.beta_fast == 0.0) rs.beta_fast = 32.0;
  ASTR_ASSIGN_OR_RETURN(rs.beta_slow, s.Number("beta_slow", 0.0));
  if (rs.beta_slow == 0.0) rs.beta_slow = 1.0;
  ASTR_ASSIGN_OR_RETURN(rs.truncate, s.Bool("truncate", true));
  return OkStatus();
}

// rope_scaling, or transformers 5's rope_parameters when it is one set (per-layer-type sets are the
// architecture's to read).
Status ReadHfRopeScaling(const ConfigJson& r, const Architecture& arch, ModelConfig* c) {
  std::string key = "rope_scaling";
  if (!r.Has(key)) {
    key = "rope_parameters";
    if (!r.Has(key) || RopeParametersPerLayerType(r)) return OkStatus();
  }
  const json& rs = r.raw()[key];
  if (!rs.is_object()) return r.Error(key, "must be an object or null");
  ConfigJson s(rs, r.path() + ": " + key);
  ASTR_ASSIGN_OR_RETURN(std::string type, s.String("rope_type", ""));
  if (type.empty()) {
    ASTR_ASSIGN_OR_RETURN(type, s.String("type", "default"));
  }
  if (type == "default") return OkStatus();
  if (type == "longrope" || type == "su") {
    return ReadHfLongRope(r, s, arch.hf_original_max_position, c);
  }
  if (type == "yarn") return ReadHfYarn(r, s, c);
  ASTR_ASSIGN_OR_RETURN(c->rope_scaling.factor, s.Number("factor", 1.0));
  if (type == "linear") {
    c->rope_scaling.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    c->rope_scaling.type = RopeScaling::Type::kLlama3;
    ASTR_ASSIGN_OR_RETURN(c->rope_scaling.low_freq_factor, s.Number("low_freq_factor", 1.0));
    ASTR_ASSIGN_OR_RETURN(c->rope_scaling.high_freq_factor, s.Number("high_freq_factor", 4.0));
    ASTR_ASSIGN_OR_RETURN(c->rope_scaling.original_max_position,
                          s.Int("original_max_position_embeddings", 8192));
  } else {
    return UnimplementedError(r.path() + ": key '" + key + "' type '" + type +
                              "' is not supported (supported: linear, llama3, longrope, yarn)");
  }
  return OkStatus();
}

}  // namespace

// A multimodal wrapper's config.json (Architecture::hf_wrapper_model_types) as its language
// model's: the text config class's defaults, then text_config's keys, then the wrapper's own bos /
// eos / tie_word_embeddings where text_config does not say them.
StatusOr<json> TextConfigOfWrapper(const Architecture& arch, const json& j,
                                   const std::string& path) {
  if (!j.contains("text_config") || !j["text_config"].is_object()) {
    return InvalidArgumentError(path + ": key 'text_config' must be an object (model_type '" +
                                j["model_type"].get<std::string>() + "' wraps a language model)");
  }
  json text = arch.hf_text_defaults != nullptr ? arch.hf_text_defaults() : json::object();
  const json& given = j["text_config"];
  for (auto it = given.begin(); it != given.end(); ++it) text[it.key()] = it.value();
  for (const char* key : {"bos_token_id", "eos_token_id", "tie_word_embeddings"}) {
    if (!given.contains(key) && j.contains(key) && !j[key].is_null()) text[key] = j[key];
  }
  text["model_type"] = arch.hf_model_types[0];
  return text;
}

StatusOr<ModelConfig> ConfigFromHfJson(const std::string& path) {
  ASTR_ASSIGN_OR_RETURN(json j, ParseJsonFile(path));
  std::string where = path;
  if (j.contains("model_type") && j["model_type"].is_string()) {
    if (const Architecture* w = ArchitectureOfHfWrapper(j["model_type"].get<std::string>())) {
      ASTR_ASSIGN_OR_RETURN(j, TextConfigOfWrapper(*w, j, path));
      where = path + ": text_config";
    }
  }
  ConfigJson r(j, where);
  ModelConfig c;
  ASTR_ASSIGN_OR_RETURN(std::string model_type, r.String("model_type", ""));
  const Architecture* arch = ArchitectureOfHfModelType(model_type);
  if (arch == nullptr) {
    return UnimplementedError(path + ": model_type '" + model_type + "' is not supported (" +
                              SupportedHfModelTypes() + ")");
  }
  c.architecture = arch->name;
  ASTR_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size"));
  ASTR_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size"));
  ASTR_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size"));
  ASTR_ASSIGN_OR_RETURN(c.num_layers, r.Int("num_hidden_layers"));
  ASTR_ASSIGN_OR_RETURN(c.num_heads, r.Int("num_attention_heads"));
  ASTR_ASSIGN_OR_RETURN(c.num_kv_heads, r.Int("num_key_value_heads", c.num_heads));
  if (c.num_heads <= 0) return r.Error("num_attention_heads", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c.head_dim, r.Int("head_dim", c.hidden_size / c.num_heads));
  // partial_rotary_factor: top-level, or (transformers 5) in a single rope_parameters set.
  double partial = 1.0;
  if (r.Has("partial_rotary_factor") || !r.Has("rope_parameters") ||
      !r.raw()["rope_parameters"].is_object() || RopeParametersPerLayerType(r)) {
    ASTR_ASSIGN_OR_RETURN(partial, r.Number("partial_rotary_factor", 1.0));
  } else {
    ConfigJson rp(r.raw()["rope_parameters"], path + ": rope_parameters");
    ASTR_ASSIGN_OR_RETURN(partial, rp.Number("partial_rotary_factor", 1.0));
  }
  if (!(partial > 0.0 && partial <= 1.0)) {
    return r.Error("partial_rotary_factor", "must be in (0, 1], got " + std::to_string(partial));
  }
  c.rope_dim = static_cast<int64_t>(std::llround(static_cast<double>(c.head_dim) * partial));
  ASTR_ASSIGN_OR_RETURN(c.max_context_tokens, r.Int("max_position_embeddings", 2048));
  ASTR_RETURN_IF_ERROR(CheckContextTokens(c.max_context_tokens, [&](const std::string& why) {
    return r.Error("max_position_embeddings", why);
  }));
  ASTR_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Number("rms_norm_eps", 1e-6));
  ASTR_ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta", 10000.0));
  // transformers 5 writes the base inside rope_parameters (one set; per-layer-type sets are the
  // architecture's to read).
  if (!r.Has("rope_theta") && r.Has("rope_parameters") && r.raw()["rope_parameters"].is_object() &&
      !RopeParametersPerLayerType(r)) {
    ConfigJson p(r.raw()["rope_parameters"], path + ": rope_parameters");
    ASTR_ASSIGN_OR_RETURN(c.rope_theta, p.Number("rope_theta", 10000.0));
  }
  ASTR_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  ASTR_ASSIGN_OR_RETURN(c.bos_token_id, r.Int("bos_token_id", -1));
  ASTR_RETURN_IF_ERROR(r.IntList("eos_token_id", &c.eos_token_ids));
  ASTR_RETURN_IF_ERROR(ReadHfRopeScaling(r, *arch, &c));
  ASTR_RETURN_IF_ERROR(arch->read_hf(r, &c));

  // generation_config.json holds the ids generation actually stops on (e.g. Llama 3 instruct's
  // <|eot_id|>), so its eos list is merged in.
  const auto gen_path = std::filesystem::path(path).parent_path() / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    ASTR_ASSIGN_OR_RETURN(json g, ParseJsonFile(gen_path.string()));
    ConfigJson gr(g, gen_path.string());
    std::vector<int64_t> eos;
    ASTR_RETURN_IF_ERROR(gr.IntList("eos_token_id", &eos));
    MergeTokenIds(&c.eos_token_ids, eos);
    if (c.bos_token_id < 0) {
      ASTR_ASSIGN_OR_RETURN(c.bos_token_id, gr.Int("bos_token_id", -1));
    }
  }
  Status valid = c.Validate();
  if (!valid.ok()) return valid.WithContext(path);
  return c;
}

StatusOr<std::string> ConfigToHfJson(const ModelConfig& c) {
  const Architecture* arch = FindArchitecture(c.architecture);
  if (arch == nullptr || arch->write_hf == nullptr || arch->hf_model_types.empty()) {
    return InvalidArgumentError("no HF model_type for architecture '" + c.architecture + "'");
  }
  if (c.num_experts > 0 && !arch->moe) {
    return InvalidArgumentError("architecture '" + c.architecture + "' has no mixture of experts");
  }
  json j = {{"model_type", arch->hf_model_types[0]},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"max_position_embeddings", c.max_context_tokens},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"torch_dtype", "bfloat16"}};
  if (c.rope_dim != c.head_dim) {
    j["partial_rotary_factor"] = static_cast<double>(c.rope_dim) / static_cast<double>(c.head_dim);
  }
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  if (c.rope_scaling.type == RopeScaling::Type::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
  } else if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  } else if (c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    j["rope_scaling"] = {{"rope_type", "longrope"},
                         {"short_factor", c.rope_scaling.short_factor},
                         {"long_factor", c.rope_scaling.long_factor},
                         {"factor", c.rope_scaling.factor},
                         {"attention_factor", c.rope_scaling.attention_factor}};
    j["original_max_position_embeddings"] = c.rope_scaling.original_max_position;
  } else if (c.rope_scaling.type == RopeScaling::Type::kYarn) {
    j["rope_scaling"] = {
        {"rope_type", "yarn"},
        {"factor", c.rope_scaling.factor},
        {"attention_factor", c.rope_scaling.attention_factor},
        {"beta_fast", c.rope_scaling.beta_fast},
        {"beta_slow", c.rope_scaling.beta_slow},
        {"truncate", c.rope_scaling.truncate},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  }
  ASTR_RETURN_IF_ERROR(arch->write_hf(c, &j));
  return j.dump(2) + "\n";
}

std::string GenerationConfigJson(const ModelConfig& c) {
  json j = json::object();
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  return j.dump(2) + "\n";
}

}  // namespace astr::model

// ---------------------------------------------------------------------------------------------------
// GGUF metadata

namespace astr::model {
namespace {

// llama.cpp's converter stores llama3 rope scaling as per-frequency divisors (rope_freqs.weight),
// not as keys. Accept it when it matches the scaling every Llama 3.x release uses, with the factor
// read from the tensor; anything else would run with the wrong frequencies, so it is an error.
Status ReadGgufRopeFreqs(const GgufFile& g, const GgufTensor& t, ModelConfig* c) {
  std::vector<float> divisors;
  ASTR_RETURN_IF_ERROR(g.ReadF32(t, &divisors));
  const std::string err = g.path() + ": tensor 'rope_freqs.weight' ";
  if (divisors.empty() || static_cast<int64_t>(divisors.size()) != c->rope_dim / 2) {
    return InvalidArgumentError(
        err + "has " + std::to_string(divisors.size()) +
        " entries, expected rope_dim/2 = " + std::to_string(c->rope_dim / 2));
  }
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = *std::max_element(divisors.begin(), divisors.end());
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  for (size_t i = 0; i < divisors.size(); ++i) {
    const double freq =
        std::pow(c->rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c->rope_dim));
    const double wavelen = 2.0 * M_PI / freq;
    double expected = 1.0;
    if (wavelen > low_wavelen) {
      expected = s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      expected = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    if (std::fabs(expected - divisors[i]) > 1e-3 * expected) {
      return UnimplementedError(err +
                                "is not llama3 scaling with low 1, high 4, original 8192; "
                                "custom rope frequency factors are not supported");
    }
  }
  c->rope_scaling = s;
  return OkStatus();
}

Status ReadGgufRopeScaling(const GgufFile& g, const GgufKeys& k, ModelConfig* c) {
  ASTR_ASSIGN_OR_RETURN(std::string type, g.GetString(k.Key("rope.scaling.type"), "none"));
  if (type == "linear") {
    c->rope_scaling.type = RopeScaling::Type::kLinear;
    ASTR_ASSIGN_OR_RETURN(c->rope_scaling.factor, k.Float("rope.scaling.factor", 1.0));
  } else if (type == "yarn") {
    // llama.cpp's YaRN: beta_fast 32, beta_slow 1, correction dims floored / ceiled, cos / sin
    // times attn_factor * (1 + 0.1 ln(factor)).
    RopeScaling& rs = c->rope_scaling;
    rs.type = RopeScaling::Type::kYarn;
    ASTR_ASSIGN_OR_RETURN(rs.factor, k.Float("rope.scaling.factor", 1.0));
    ASTR_ASSIGN_OR_RETURN(double attn_factor, k.Float("rope.scaling.attn_factor", 1.0));
    ASTR_ASSIGN_OR_RETURN(double log_mul, k.Float("rope.scaling.yarn_log_multiplier", 0.1));
    rs.attention_factor =
        attn_factor * (rs.factor > 1.0 ? 1.0 + log_mul * std::log(rs.factor) : 1.0);
    rs.truncate = true;
  } else if (type != "none") {
    return UnimplementedError(g.path() + ": key '" + k.Key("rope.scaling.type") + "' value '" +
                              type + "' is not supported (none, linear, yarn)");
  }
  if (const GgufTensor* t = g.FindTensor("rope_freqs.weight")) {
    if (c->rope_scaling.type != RopeScaling::Type::kNone) {
      return UnimplementedError(g.path() + ": both rope scaling keys and rope_freqs.weight");
    }
    ASTR_RETURN_IF_ERROR(ReadGgufRopeFreqs(g, *t, c));
  }
  return OkStatus();
}

}  // namespace

std::string GgufKeys::Key(const std::string& rest) const { return GgufConfigKey(g_, arch_, rest); }

std::string GgufConfigKey(const GgufFile& g, const std::string& arch, const std::string& rest) {
  const std::string k = arch + "." + rest;
  return g.Find(k) == nullptr && g.Find("llama." + rest) != nullptr ? "llama." + rest : k;
}

StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& g) {
  ASTR_ASSIGN_OR_RETURN(std::string arch, g.GetString("general.architecture"));
  ModelConfig c;
  const Architecture* description = ArchitectureOfGguf(arch);
  if (description == nullptr) {
    return UnimplementedError(g.path() + ": general.architecture '" + arch +
                              "' is not supported (" + SupportedGgufArchitectures() + ")");
  }
  c.architecture = description->name;
  GgufKeys k(g, arch);
  ASTR_ASSIGN_OR_RETURN(c.hidden_size, k.Int("embedding_length"));
  ASTR_ASSIGN_OR_RETURN(c.num_layers, k.Int("block_count"));
  ASTR_ASSIGN_OR_RETURN(c.intermediate_size, k.Int("feed_forward_length"));
  ASTR_ASSIGN_OR_RETURN(c.num_heads, k.Int("attention.head_count"));
  ASTR_ASSIGN_OR_RETURN(c.num_kv_heads, k.Int("attention.head_count_kv", c.num_heads));
  if (c.num_heads <= 0) {
    return InvalidArgumentError(g.path() + ": key '" + k.Key("attention.head_count") +
                                "' must be positive");
  }
  ASTR_ASSIGN_OR_RETURN(c.head_dim, k.Int("attention.key_length", c.hidden_size / c.num_heads));
  ASTR_ASSIGN_OR_RETURN(c.rope_dim, k.Int("rope.dimension_count", c.head_dim));
  ASTR_ASSIGN_OR_RETURN(c.rope_theta, k.Float("rope.freq_base", 10000.0));
  ASTR_ASSIGN_OR_RETURN(c.rms_norm_eps, k.Float("attention.layer_norm_rms_epsilon", 1e-5));
  ASTR_ASSIGN_OR_RETURN(c.max_context_tokens, k.Int("context_length", 2048));
  ASTR_RETURN_IF_ERROR(CheckContextTokens(c.max_context_tokens, [&](const std::string& why) {
    return InvalidArgumentError(g.path() + ": key '" + k.Key("context_length") + "' " + why);
  }));
  ASTR_RETURN_IF_ERROR(ReadGgufRopeScaling(g, k, &c));
  ASTR_ASSIGN_OR_RETURN(
      c.rope_scaling.original_max_position,
      k.Int("rope.scaling.original_context_length", c.rope_scaling.original_max_position));

  const GgufTensor* embd = g.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFoundError(g.path() + ": missing tensor 'token_embd.weight'");
  if (embd->shape.size() != 2) {
    return InvalidArgumentError(g.path() + ": tensor 'token_embd.weight' must be 2-D");
  }
  c.vocab_size = embd->shape[0];
  c.tie_word_embeddings = g.FindTensor("output.weight") == nullptr;
  ASTR_ASSIGN_OR_RETURN(c.bos_token_id, g.GetInt("tokenizer.ggml.bos_token_id", -1));
  ASTR_ASSIGN_OR_RETURN(int64_t eos, g.GetInt("tokenizer.ggml.eos_token_id", -1));
  if (eos >= 0 && eos != 0xFFFFFFFF) c.eos_token_ids.push_back(eos);
  if (c.bos_token_id == 0xFFFFFFFF) c.bos_token_id = -1;  // llama.cpp's "unset"
  ASTR_RETURN_IF_ERROR(description->read_gguf(k, &c));
  Status valid = c.Validate();
  if (!valid.ok()) return valid.WithContext(g.path());
  return c;
}

Status AddGgufMetadata(const ModelConfig& c, GgufWriter* w) {
  const Architecture* arch = FindArchitecture(c.architecture);
  if (arch == nullptr || arch->write_gguf == nullptr || arch->gguf_names.empty()) {
    return InvalidArgumentError("GGUF output does not support architecture '" + c.architecture +
                                "'");
  }
  if (c.num_experts > 0 && !arch->moe) {
    return InvalidArgumentError("architecture '" + c.architecture + "' has no mixture of experts");
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3 ||
      c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    return UnimplementedError(
        std::string("writing ") +
        (c.rope_scaling.type == RopeScaling::Type::kLlama3 ? "llama3" : "LongRoPE") +
        " rope scaling to GGUF is not supported");
  }
  const std::string& a = arch->gguf_names[0];
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  w->AddMetadata("general.architecture", GgufValue::String(a));
  w->AddMetadata("general.name", GgufValue::String(a));
  w->AddMetadata(a + ".context_length", u32(c.max_context_tokens));
  w->AddMetadata(a + ".embedding_length", u32(c.hidden_size));
  w->AddMetadata(a + ".block_count", u32(c.num_layers));
  w->AddMetadata(a + ".feed_forward_length", u32(c.intermediate_size));
  w->AddMetadata(a + ".attention.head_count", u32(c.num_heads));
  w->AddMetadata(a + ".attention.head_count_kv", u32(c.num_kv_heads));
  w->AddMetadata(a + ".attention.key_length", u32(c.head_dim));
  w->AddMetadata(a + ".attention.value_length", u32(c.head_dim));
  w->AddMetadata(a + ".rope.dimension_count", u32(c.rope_dim));
  w->AddMetadata(a + ".rope.freq_base", GgufValue::F32(static_cast<float>(c.rope_theta)));
  w->AddMetadata(a + ".attention.layer_norm_rms_epsilon",
                 GgufValue::F32(static_cast<float>(c.rms_norm_eps)));
  w->AddMetadata(a + ".vocab_size", u32(c.vocab_size));
  if (c.rope_scaling.type == RopeScaling::Type::kLinear) {
    w->AddMetadata(a + ".rope.scaling.type", GgufValue::String("linear"));
    w->AddMetadata(a + ".rope.scaling.factor",
                   GgufValue::F32(static_cast<float>(c.rope_scaling.factor)));
  } else if (c.rope_scaling.type == RopeScaling::Type::kYarn) {
    const RopeScaling& rs = c.rope_scaling;
    const double derived = rs.factor > 1.0 ? 1.0 + 0.1 * std::log(rs.factor) : 1.0;
    if (rs.beta_fast != 32.0 || rs.beta_slow != 1.0 || !rs.truncate) {
      return InvalidArgumentError(
          "GGUF YaRN has beta_fast 32, beta_slow 1 and truncated correction dims");
    }
    w->AddMetadata(a + ".rope.scaling.type", GgufValue::String("yarn"));
    w->AddMetadata(a + ".rope.scaling.factor", GgufValue::F32(static_cast<float>(rs.factor)));
    w->AddMetadata(a + ".rope.scaling.original_context_length", u32(rs.original_max_position));
    if (std::fabs(rs.attention_factor / derived - 1.0) > 1e-6) {
      w->AddMetadata(a + ".rope.scaling.attn_factor",
                     GgufValue::F32(static_cast<float>(rs.attention_factor / derived)));
    }
  }
  return arch->write_gguf(c, w);
}

}  // namespace astr::model
