// Gemma 3 text models (Gemma3ForCausalLM: 270M, 1B; the text stack of the larger ones).
//
// The layer: q/k per-head RMSNorm before RoPE; the "sandwich" norms (attention and MLP outputs
// RMSNorm'ed before they join the residual stream, four norms a layer); every norm scales by
// (1 + w); GeGLU (tanh); embeddings scaled by sqrt(hidden); attention scaled by
// query_pre_attn_scalar^-1/2; five sliding-window layers to one global layer, the local ones with
// their own RoPE base (10000) and no RoPE scaling.
#include <cmath>

#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

constexpr int64_t kGemma3Pattern = 6;      // sliding_window_pattern: 5 local, 1 global
constexpr double kGemma3LocalTheta = 1e4;  // rope_local_base_freq

void SetGemma3Layer(ModelConfig* c) {
  c->rope_layout = RopeLayout::kHalf;
  c->qk_norm = QkNorm::kBeforeRope;
  c->sandwich_norms = true;
  c->embed_scale = std::sqrt(static_cast<double>(c->hidden_size));
}

// layer_types ["sliding_attention", ..., "full_attention", ...] as a period P (layer l global when
// (l + 1) % P == 0; 0 when every layer slides); anything else is refused.
Status ReadLayerTypes(const ConfigJson& r, int64_t num_layers, int64_t* pattern) {
  const nlohmann::json& types = r.raw()["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != num_layers) {
    return r.Error("layer_types", "must be a list of num_hidden_layers = " +
                                      std::to_string(num_layers) + " strings");
  }
  int64_t period = 0;
  for (size_t l = 0; l < types.size(); ++l) {
    if (!types[l].is_string()) return r.Error("layer_types", "must be a list of strings");
    const std::string t = types[l].get<std::string>();
    if (t != "sliding_attention" && t != "full_attention") {
      return r.Unsupported("layer_types", "entry '" + t +
                                              "' is not supported (sliding_attention, "
                                              "full_attention)");
    }
    if (t == "full_attention" && period == 0) period = static_cast<int64_t>(l) + 1;
  }
  for (size_t l = 0; l < types.size(); ++l) {
    const bool global = period > 0 && (static_cast<int64_t>(l) + 1) % period == 0;
    if ((types[l].get<std::string>() == "full_attention") != global) {
      return r.Unsupported("layer_types", "is not one global layer every N layers (layer " +
                                              std::to_string(l) +
                                              " breaks the pattern set by layer " +
                                              std::to_string(period - 1) + ")");
    }
  }
  *pattern = period;
  return OkStatus();
}

// transformers 5's rope_parameters {"full_attention": {...}, "sliding_attention": {...}}.
Status ReadRopeParameters(const ConfigJson& r, ModelConfig* c) {
  const nlohmann::json& p = r.raw()["rope_parameters"];
  if (!p.is_object()) return r.Error("rope_parameters", "must be an object");
  for (const char* kind : {"full_attention", "sliding_attention"}) {
    const std::string key = std::string("rope_parameters.") + kind;
    if (!p.contains(kind) || !p[kind].is_object()) return r.Error(key, "must be an object");
    ConfigJson k(p[kind], r.path() + ": " + key);
    ASTR_ASSIGN_OR_RETURN(std::string type, k.String("rope_type", "default"));
    const bool full = std::string(kind) == "full_attention";
    ASTR_ASSIGN_OR_RETURN(double theta, k.Number("rope_theta", full ? 1e6 : kGemma3LocalTheta));
    (full ? c->rope_theta : c->rope_local_theta) = theta;
    if (type == "default") continue;
    if (type != "linear" || !full) {
      return k.Unsupported("rope_type", "'" + type + "' is not supported here");
    }
    c->rope_scaling.type = RopeScaling::Type::kLinear;
    ASTR_ASSIGN_OR_RETURN(c->rope_scaling.factor, k.Number("factor", 1.0));
  }
  return OkStatus();
}

Status ReadGemma3Hf(const ConfigJson& r, ModelConfig* c) {
  SetGemma3Layer(c);
  c->norm_weight_offset = 1.0;  // HF stores w of (1 + w)
  // Gemma3TextConfig's defaults where they differ from the shared ones.
  ASTR_ASSIGN_OR_RETURN(c->tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  if (!r.Has("max_position_embeddings")) c->max_context_tokens = 131072;
  ASTR_RETURN_IF_ERROR(arch::ReadHfActivation(
      r, r.Has("hidden_activation") ? "hidden_activation" : "hidden_act", "gelu_pytorch_tanh", c));
  ASTR_ASSIGN_OR_RETURN(double scalar, r.Number("query_pre_attn_scalar", 256.0));
  if (!(scalar > 0.0) || !std::isfinite(scalar)) {
    return r.Error("query_pre_attn_scalar", "must be > 0");
  }
  c->attn_scale = 1.0 / std::sqrt(scalar);
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (r.Has(key)) return r.Unsupported(key, "is not supported for gemma3 (null)");
  }
  ASTR_ASSIGN_OR_RETURN(bool bidirectional, r.Bool("use_bidirectional_attention", false));
  if (bidirectional) return r.Unsupported("use_bidirectional_attention", "true is not supported");
  ASTR_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", false));
  if (attention_bias) return r.Unsupported("attention_bias", "true is not supported");
  ASTR_ASSIGN_OR_RETURN(c->sliding_window, r.Int("sliding_window", 4096));
  if (c->sliding_window <= 0) return r.Error("sliding_window", "must be positive");
  ASTR_RETURN_IF_ERROR(CheckContextTokens(
      c->sliding_window, [&](const std::string& why) { return r.Error("sliding_window", why); }));
  if (r.Has("layer_types")) {
    ASTR_RETURN_IF_ERROR(ReadLayerTypes(r, c->num_layers, &c->sliding_window_pattern));
  } else {
    const char* key =
        r.Has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    ASTR_ASSIGN_OR_RETURN(c->sliding_window_pattern, r.Int(key, kGemma3Pattern));
    if (c->sliding_window_pattern < 1) return r.Error(key, "must be positive");
  }
  if (r.Has("rope_parameters")) return ReadRopeParameters(r, c);
  ASTR_ASSIGN_OR_RETURN(c->rope_theta, r.Number("rope_theta", 1e6));
  ASTR_ASSIGN_OR_RETURN(c->rope_local_theta, r.Number("rope_local_base_freq", kGemma3LocalTheta));
  return OkStatus();
}

// llama.cpp's converter stores each norm as 1 + w; the local RoPE base and the 5:1 pattern are
// not in the metadata (llama.cpp fixes them for gemma3, as here), nor is the attention scale:
// 1/sqrt(head_dim), but 1/sqrt(hidden/heads) for the 62-layer 27B, as llama.cpp decides.
Status ReadGemma3Gguf(const GgufKeys& k, ModelConfig* c) {
  SetGemma3Layer(c);
  c->mlp_activation = MlpActivation::kGeluTanh;
  c->sliding_window_pattern = kGemma3Pattern;
  c->rope_local_theta = kGemma3LocalTheta;
  ASTR_ASSIGN_OR_RETURN(c->sliding_window, k.Int("attention.sliding_window"));
  if (c->sliding_window <= 0 || c->sliding_window > kMaxContextTokens) {
    return k.Error("attention.sliding_window",
                   "must be in [1, " + std::to_string(kMaxContextTokens) + "]");
  }
  const int64_t scale_dim =
      c->num_layers == 62 && c->num_heads > 0 ? c->hidden_size / c->num_heads : c->head_dim;
  if (scale_dim > 0) c->attn_scale = 1.0 / std::sqrt(static_cast<double>(scale_dim));
  return OkStatus();
}

Status CheckGemma3(const ModelConfig& c, const char* format) {
  if (c.rope_layout != RopeLayout::kHalf || c.qk_norm != QkNorm::kBeforeRope || c.qkv_bias ||
      c.gated_attention || !c.sandwich_norms || c.mlp_activation != MlpActivation::kGeluTanh ||
      c.sliding_window <= 0 ||
      std::fabs(c.embed_scale - std::sqrt(static_cast<double>(c.hidden_size))) > 1e-9 ||
      !(c.attn_scale > 0.0)) {
    return InvalidArgumentError(std::string("config features do not match ") + format + " gemma3");
  }
  return OkStatus();
}

Status WriteGemma3Hf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(CheckGemma3(c, "HF"));
  if (c.norm_weight_offset != 1.0) {
    return InvalidArgumentError("HF gemma3 norms scale by 1 + w (norm_weight_offset 1)");
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    return InvalidArgumentError("HF gemma3 takes linear rope scaling only");
  }
  (*j)["hidden_activation"] = "gelu_pytorch_tanh";
  const double scalar = 1.0 / (c.attn_scale * c.attn_scale);
  if (std::fabs(scalar - std::round(scalar)) < 1e-6 * scalar) {
    (*j)["query_pre_attn_scalar"] = static_cast<int64_t>(std::llround(scalar));
  } else {
    (*j)["query_pre_attn_scalar"] = scalar;
  }
  (*j)["sliding_window"] = c.sliding_window;
  (*j)["rope_local_base_freq"] = c.rope_local_theta > 0.0 ? c.rope_local_theta : c.rope_theta;
  (*j)["attn_logit_softcapping"] = nullptr;
  (*j)["final_logit_softcapping"] = nullptr;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    types.push_back(c.LayerWindow(l) > 0 ? "sliding_attention" : "full_attention");
  }
  (*j)["layer_types"] = types;
  return OkStatus();
}

Status WriteGemma3Gguf(const ModelConfig& c, GgufWriter* w) {
  ASTR_RETURN_IF_ERROR(CheckGemma3(c, "GGUF"));
  if (c.norm_weight_offset != 0.0 || c.sliding_window_pattern != kGemma3Pattern ||
      c.rope_local_theta != kGemma3LocalTheta ||
      std::fabs(c.AttnScale() - 1.0f / std::sqrt(static_cast<float>(c.head_dim))) > 1e-7f) {
    return InvalidArgumentError(
        "GGUF gemma3 holds norms as 1 + w and llama.cpp fixes the 5:1 layer pattern, the local "
        "RoPE base 10000 and the 1/sqrt(head_dim) attention scale; this config differs");
  }
  w->AddMetadata("gemma3.attention.sliding_window",
                 GgufValue::U32(static_cast<uint32_t>(c.sliding_window)));
  return OkStatus();
}

}  // namespace

extern const Architecture kGemma3Architecture{
    "gemma3",
    {"gemma3_text"},
    {"gemma3"},
    {{"mlp_norm", "ffn_norm.weight", "pre_feedforward_layernorm.weight"},
     {"post_attn_norm", "post_attention_norm.weight", "post_attention_layernorm.weight"},
     {"post_mlp_norm", "post_ffw_norm.weight", "post_feedforward_layernorm.weight"}},
    1.0,
    ReadGemma3Hf,
    ReadGemma3Gguf,
    WriteGemma3Hf,
    WriteGemma3Gguf};

}  // namespace astr::model
