// Gemma 2 and Gemma 3 text models (Gemma2ForCausalLM; Gemma3ForCausalLM: 270M, 1B, and the text
// stack of the larger ones, read from their multimodal checkpoints, Gemma3ForConditionalGeneration,
// model_type gemma3).
//
// The layer both share: the "sandwich" norms (attention and MLP outputs RMSNorm'ed before they
// join the residual stream, four norms a layer), every norm scaling by (1 + w); GeGLU (tanh);
// embeddings scaled by sqrt(hidden); attention scaled by query_pre_attn_scalar^-1/2; sliding-window
// layers interleaved with global ones. Gemma 2 alternates them (layer 0 slides) and soft-caps the
// attention scores (50) and the final logits (30). Gemma 3 has five sliding layers to one global,
// per-head q/k RMSNorm before RoPE, and a RoPE base of its own (10000, unscaled) on the sliding
// layers.
#include <cmath>

#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

constexpr int64_t kGemma2Pattern = 2;      // layer 0 slides, layer 1 is global, ...
constexpr int64_t kGemma3Pattern = 6;      // 5 local, 1 global
constexpr double kGemma3LocalTheta = 1e4;  // rope_local_base_freq
constexpr double kGemma2AttnSoftcap = 50.0;
constexpr double kGemma2FinalSoftcap = 30.0;

void SetGemmaLayer(ModelConfig* c) {
  c->rope_layout = RopeLayout::kHalf;
  c->sandwich_norms = true;
  c->mlp_activation = MlpActivation::kGeluTanh;
  c->embed_scale = std::sqrt(static_cast<double>(c->hidden_size));
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

// A soft-capping key: its value, `dflt` when absent, 0 when null (off).
StatusOr<double> ReadSoftcap(const ConfigJson& r, const char* key, double dflt) {
  if (r.raw().contains(key) && r.raw()[key].is_null()) return 0.0;
  ASTR_ASSIGN_OR_RETURN(double v, r.Number(key, dflt));
  if (!(v >= 0.0) || !std::isfinite(v)) return r.Error(key, "must be >= 0 or null");
  return v;
}

// The keys Gemma 2 and 3 share; `pattern` is the sliding_window_pattern when the file says none.
Status ReadGemmaHf(const ConfigJson& r, int64_t pattern, ModelConfig* c) {
  SetGemmaLayer(c);
  c->norm_weight_offset = 1.0;  // HF stores w of (1 + w)
  // The Gemma configs' defaults where they differ from the shared ones.
  ASTR_ASSIGN_OR_RETURN(c->tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  if (!r.Has("max_position_embeddings")) c->max_context_tokens = 8192;
  const char* act = r.Has("hidden_activation") ? "hidden_activation" : "hidden_act";
  ASTR_RETURN_IF_ERROR(arch::ReadHfActivation(r, act, "gelu_pytorch_tanh", c));
  if (c->mlp_activation != MlpActivation::kGeluTanh) {
    return r.Unsupported(act, "must be gelu_pytorch_tanh for Gemma");
  }
  ASTR_ASSIGN_OR_RETURN(double scalar, r.Number("query_pre_attn_scalar", 256.0));
  if (!(scalar > 0.0) || !std::isfinite(scalar)) {
    return r.Error("query_pre_attn_scalar", "must be > 0");
  }
  c->attn_scale = 1.0 / std::sqrt(scalar);
  ASTR_ASSIGN_OR_RETURN(bool bidirectional, r.Bool("use_bidirectional_attention", false));
  if (bidirectional) return r.Unsupported("use_bidirectional_attention", "true is not supported");
  ASTR_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", false));
  if (attention_bias) return r.Unsupported("attention_bias", "true is not supported");
  ASTR_ASSIGN_OR_RETURN(c->sliding_window, r.Int("sliding_window", 4096));
  if (c->sliding_window <= 0) return r.Error("sliding_window", "must be positive");
  ASTR_RETURN_IF_ERROR(CheckContextTokens(
      c->sliding_window, [&](const std::string& why) { return r.Error("sliding_window", why); }));
  if (r.Has("layer_types"))
    return arch::ReadLayerTypes(r, c->num_layers, &c->sliding_window_pattern);
  const char* key =
      r.Has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
  ASTR_ASSIGN_OR_RETURN(c->sliding_window_pattern, r.Int(key, pattern));
  if (c->sliding_window_pattern < 1) return r.Error(key, "must be positive");
  return OkStatus();
}

Status ReadGemma2Hf(const ConfigJson& r, ModelConfig* c) {
  ASTR_RETURN_IF_ERROR(ReadGemmaHf(r, kGemma2Pattern, c));
  ASTR_ASSIGN_OR_RETURN(c->attn_softcap,
                        ReadSoftcap(r, "attn_logit_softcapping", kGemma2AttnSoftcap));
  ASTR_ASSIGN_OR_RETURN(c->final_softcap,
                        ReadSoftcap(r, "final_logit_softcapping", kGemma2FinalSoftcap));
  // transformers 5 writes one set, {"rope_theta", "rope_type"}, which ConfigFromHfJson reads; one
  // per layer type is Gemma 3's and not Gemma 2's.
  if (RopeParametersPerLayerType(r)) {
    return r.Unsupported("rope_parameters", "per layer type is not read for gemma2");
  }
  return OkStatus();
}

Status ReadGemma3Hf(const ConfigJson& r, ModelConfig* c) {
  ASTR_RETURN_IF_ERROR(ReadGemmaHf(r, kGemma3Pattern, c));
  c->qk_norm = QkNorm::kBeforeRope;
  if (!r.Has("max_position_embeddings")) c->max_context_tokens = 131072;
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (r.Has(key)) return r.Unsupported(key, "is not supported for gemma3 (null)");
  }
  if (r.Has("rope_parameters")) return ReadRopeParameters(r, c);
  ASTR_ASSIGN_OR_RETURN(c->rope_theta, r.Number("rope_theta", 1e6));
  ASTR_ASSIGN_OR_RETURN(c->rope_local_theta, r.Number("rope_local_base_freq", kGemma3LocalTheta));
  return OkStatus();
}

// What llama.cpp fixes for both and GGUF does not say: norms stored as 1 + w (its converter), the
// layer pattern, and the attention scale: 1/sqrt(head_dim), but 1/sqrt(hidden/heads) for the 27B
// models (46 layers for Gemma 2, 62 for Gemma 3), as llama.cpp decides.
Status ReadGemmaGguf(const GgufKeys& k, int64_t pattern, int64_t layers_27b, ModelConfig* c) {
  SetGemmaLayer(c);
  c->sliding_window_pattern = pattern;
  ASTR_ASSIGN_OR_RETURN(c->sliding_window, k.Int("attention.sliding_window"));
  if (c->sliding_window <= 0 || c->sliding_window > kMaxContextTokens) {
    return k.Error("attention.sliding_window",
                   "must be in [1, " + std::to_string(kMaxContextTokens) + "]");
  }
  const int64_t scale_dim =
      c->num_layers == layers_27b && c->num_heads > 0 ? c->hidden_size / c->num_heads : c->head_dim;
  if (scale_dim > 0) c->attn_scale = 1.0 / std::sqrt(static_cast<double>(scale_dim));
  return OkStatus();
}

Status ReadGemma2Gguf(const GgufKeys& k, ModelConfig* c) {
  ASTR_RETURN_IF_ERROR(ReadGemmaGguf(k, kGemma2Pattern, 46, c));
  ASTR_ASSIGN_OR_RETURN(c->attn_softcap, k.Float("attn_logit_softcapping", kGemma2AttnSoftcap));
  ASTR_ASSIGN_OR_RETURN(c->final_softcap, k.Float("final_logit_softcapping", kGemma2FinalSoftcap));
  return OkStatus();
}

Status ReadGemma3Gguf(const GgufKeys& k, ModelConfig* c) {
  ASTR_RETURN_IF_ERROR(ReadGemmaGguf(k, kGemma3Pattern, 62, c));
  c->qk_norm = QkNorm::kBeforeRope;
  c->rope_local_theta = kGemma3LocalTheta;
  return OkStatus();
}

Status CheckGemma(const ModelConfig& c, const std::string& what, QkNorm qk_norm) {
  if (c.rope_layout != RopeLayout::kHalf || c.qk_norm != qk_norm || c.qkv_bias ||
      c.gated_attention || !c.sandwich_norms || c.mlp_activation != MlpActivation::kGeluTanh ||
      c.sliding_window <= 0 ||
      std::fabs(c.embed_scale - std::sqrt(static_cast<double>(c.hidden_size))) > 1e-9 ||
      !(c.attn_scale > 0.0)) {
    return InvalidArgumentError("config features do not match " + what);
  }
  return OkStatus();
}

void WriteGemmaHf(const ModelConfig& c, nlohmann::json* j) {
  (*j)["hidden_activation"] = "gelu_pytorch_tanh";
  const double scalar = 1.0 / (c.attn_scale * c.attn_scale);
  if (std::fabs(scalar - std::round(scalar)) < 1e-6 * scalar) {
    (*j)["query_pre_attn_scalar"] = static_cast<int64_t>(std::llround(scalar));
  } else {
    (*j)["query_pre_attn_scalar"] = scalar;
  }
  (*j)["sliding_window"] = c.sliding_window;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    types.push_back(c.LayerWindow(l) > 0 ? "sliding_attention" : "full_attention");
  }
  (*j)["layer_types"] = types;
  const auto cap = [](double v) { return v > 0.0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  (*j)["attn_logit_softcapping"] = cap(c.attn_softcap);
  (*j)["final_logit_softcapping"] = cap(c.final_softcap);
}

Status CheckHfNorms(const ModelConfig& c, const std::string& model_type) {
  if (c.norm_weight_offset != 1.0) {
    return InvalidArgumentError("HF " + model_type +
                                " norms scale by 1 + w (norm_weight_offset 1)");
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    return InvalidArgumentError("HF " + model_type + " takes linear rope scaling only");
  }
  return OkStatus();
}

Status WriteGemma2Hf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(CheckGemma(c, "HF gemma2", QkNorm::kNone));
  ASTR_RETURN_IF_ERROR(CheckHfNorms(c, "gemma2"));
  if (c.rope_local_theta != 0.0) return InvalidArgumentError("HF gemma2 has one RoPE base");
  WriteGemmaHf(c, j);
  return OkStatus();
}

Status WriteGemma3Hf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(CheckGemma(c, "HF gemma3", QkNorm::kBeforeRope));
  ASTR_RETURN_IF_ERROR(CheckHfNorms(c, "gemma3"));
  if (c.attn_softcap != 0.0 || c.final_softcap != 0.0) {
    return InvalidArgumentError("HF gemma3 has no logit soft-capping");
  }
  WriteGemmaHf(c, j);
  (*j)["rope_local_base_freq"] = c.rope_local_theta > 0.0 ? c.rope_local_theta : c.rope_theta;
  return OkStatus();
}

// The GGUF form llama.cpp reads back the same: norms as 1 + w, its fixed pattern and scale.
Status CheckGemmaGguf(const ModelConfig& c, const std::string& arch, int64_t pattern) {
  if (c.norm_weight_offset != 0.0 || c.sliding_window_pattern != pattern ||
      std::fabs(c.AttnScale() - 1.0f / std::sqrt(static_cast<float>(c.head_dim))) > 1e-7f) {
    return InvalidArgumentError("GGUF " + arch +
                                " holds norms as 1 + w and llama.cpp fixes the layer pattern (" +
                                std::to_string(pattern) +
                                ") and the 1/sqrt(head_dim) attention scale; this config differs");
  }
  return OkStatus();
}

Status WriteGemma2Gguf(const ModelConfig& c, GgufWriter* w) {
  ASTR_RETURN_IF_ERROR(CheckGemma(c, "GGUF gemma2", QkNorm::kNone));
  ASTR_RETURN_IF_ERROR(CheckGemmaGguf(c, "gemma2", kGemma2Pattern));
  if (c.rope_local_theta != 0.0) return InvalidArgumentError("GGUF gemma2 has one RoPE base");
  w->AddMetadata("gemma2.attention.sliding_window",
                 GgufValue::U32(static_cast<uint32_t>(c.sliding_window)));
  w->AddMetadata("gemma2.attn_logit_softcapping",
                 GgufValue::F32(static_cast<float>(c.attn_softcap)));
  w->AddMetadata("gemma2.final_logit_softcapping",
                 GgufValue::F32(static_cast<float>(c.final_softcap)));
  return OkStatus();
}

Status WriteGemma3Gguf(const ModelConfig& c, GgufWriter* w) {
  ASTR_RETURN_IF_ERROR(CheckGemma(c, "GGUF gemma3", QkNorm::kBeforeRope));
  ASTR_RETURN_IF_ERROR(CheckGemmaGguf(c, "gemma3", kGemma3Pattern));
  if (c.rope_local_theta != kGemma3LocalTheta || c.attn_softcap != 0.0 || c.final_softcap != 0.0) {
    return InvalidArgumentError(
        "GGUF gemma3: llama.cpp fixes the local RoPE base 10000 and has no soft-capping");
  }
  w->AddMetadata("gemma3.attention.sliding_window",
                 GgufValue::U32(static_cast<uint32_t>(c.sliding_window)));
  return OkStatus();
}

// HF's post_attention_layernorm is the norm *after* attention here (llama.cpp's
// post_attention_norm), pre_feedforward_layernorm the MLP's input norm.
const std::vector<TensorNames> kGemmaNames = {
    {"mlp_norm", "ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_attn_norm", "post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"post_mlp_norm", "post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};

// Gemma3TextConfig's defaults (transformers 5.25), which the multimodal checkpoints' text_config
// leaves out (gemma-3-4b-it gives hidden_size, intermediate_size, num_hidden_layers,
// rope_scaling and sliding_window only).
nlohmann::json Gemma3TextDefaults() {
  return {{"vocab_size", 262208},
          {"hidden_size", 2304},
          {"intermediate_size", 9216},
          {"num_hidden_layers", 26},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 4},
          {"head_dim", 256},
          {"hidden_activation", "gelu_pytorch_tanh"},
          {"max_position_embeddings", 131072},
          {"rms_norm_eps", 1e-6},
          {"eos_token_id", 1},
          {"bos_token_id", 2},
          {"tie_word_embeddings", true},
          {"query_pre_attn_scalar", 256},
          {"sliding_window", 4096}};
}

}  // namespace

extern const Architecture kGemma2Architecture{.name = "gemma2",
                                              .hf_model_types = {"gemma2"},
                                              .gguf_names = {"gemma2"},
                                              .layer_names = kGemmaNames,
                                              .hf_norm_weight_offset = 1.0,
                                              .read_hf = ReadGemma2Hf,
                                              .read_gguf = ReadGemma2Gguf,
                                              .write_hf = WriteGemma2Hf,
                                              .write_gguf = WriteGemma2Gguf};
extern const Architecture kGemma3Architecture{.name = "gemma3",
                                              .hf_model_types = {"gemma3_text"},
                                              .gguf_names = {"gemma3"},
                                              .layer_names = kGemmaNames,
                                              .hf_norm_weight_offset = 1.0,
                                              .hf_wrapper_model_types = {"gemma3"},
                                              .hf_text_defaults = Gemma3TextDefaults,
                                              .read_hf = ReadGemma3Hf,
                                              .read_gguf = ReadGemma3Gguf,
                                              .write_hf = WriteGemma3Hf,
                                              .write_gguf = WriteGemma3Gguf};

}  // namespace astr::model
