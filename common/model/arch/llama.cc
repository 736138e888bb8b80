// The LLaMA family: Llama 1-3, Mistral (sliding window), Mixtral (Mistral's layer with mixture-of-
// experts MLPs), AstrAI autoregressive_lm (interleaved RoPE rows, optional q/k norms after RoPE and
// gated attention). The layer is ModelConfig's with no
// extras: pre-norm, SwiGLU (or GeGLU by hidden_act), full or sliding-window attention.
#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace arch {

Status ReadHfActivation(const ConfigJson& r, const std::string& key, const std::string& dflt,
                        ModelConfig* c) {
  ASTR_ASSIGN_OR_RETURN(std::string act, r.String(key, dflt));
  if (act == "silu" || act == "swish") {
    c->mlp_activation = MlpActivation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_new") {
    c->mlp_activation = MlpActivation::kGeluTanh;
  } else {
    return r.Unsupported(key, "'" + act + "' is not supported (silu, gelu_pytorch_tanh, gelu_new)");
  }
  return OkStatus();
}

Status ReadLlamaFamilyHf(const ConfigJson& r, bool use_sliding_window_key, ModelConfig* c) {
  // Mistral's sliding_window (null = none). Qwen2/3 use theirs only with use_sliding_window, and
  // then only from layer max_window_layers on, which we do not implement.
  if (r.Has("sliding_window")) {
    bool use = true;
    if (use_sliding_window_key) {
      ASTR_ASSIGN_OR_RETURN(use, r.Bool("use_sliding_window", false));
      if (use) return r.Unsupported("use_sliding_window", "true is not supported");
    }
    if (use) {
      ASTR_ASSIGN_OR_RETURN(c->sliding_window, r.Int("sliding_window", 0));
      if (c->sliding_window < 0) return r.Error("sliding_window", "must be >= 0 or null");
      ASTR_RETURN_IF_ERROR(CheckContextTokens(c->sliding_window, [&](const std::string& why) {
        return r.Error("sliding_window", why);
      }));
    }
  }
  // Biases we have no weights for would silently change the model: refuse them.
  if (!c->qkv_bias) {
    ASTR_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", false));
    if (attention_bias) return r.Unsupported("attention_bias", "true is not supported");
  }
  // The MLP's activation: a config naming one we do not compute is refused, not run as SiLU.
  ASTR_RETURN_IF_ERROR(ReadHfActivation(r, "hidden_act", "silu", c));
  ASTR_ASSIGN_OR_RETURN(bool mlp_bias, r.Bool("mlp_bias", false));
  if (mlp_bias) return r.Unsupported("mlp_bias", "true is not supported");
  return OkStatus();
}

Status CheckPlainLlamaFeatures(const ModelConfig& c, const std::string& model_type, bool qkv_bias,
                               QkNorm qk_norm) {
  if (c.rope_layout != RopeLayout::kHalf) {
    return InvalidArgumentError("HF " + model_type +
                                " folders use half RoPE order; permute q/k rows first");
  }
  if (c.num_experts > 0) {
    return InvalidArgumentError("HF " + model_type + " has no mixture of experts");
  }
  if (c.qkv_bias != qkv_bias || c.qk_norm != qk_norm || c.gated_attention ||
      c.sliding_window_pattern != 0 || c.rope_local_theta != 0.0 || c.attn_scale != 0.0 ||
      c.embed_scale != 1.0 || c.sandwich_norms || c.norm_weight_offset != 0.0) {
    return InvalidArgumentError("config features do not match HF model_type " + model_type);
  }
  return OkStatus();
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

void WriteLlamaFamilyHf(const ModelConfig& c, nlohmann::json* j) {
  (*j)["hidden_act"] = c.mlp_activation == MlpActivation::kGeluTanh ? "gelu_pytorch_tanh" : "silu";
  if (c.sliding_window > 0) (*j)["sliding_window"] = c.sliding_window;
}

}  // namespace arch

namespace {

Status ReadLlamaHf(const ConfigJson& r, ModelConfig* c) {
  return arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/false, c);
}

// GGUF llama stores q/k rows permuted for interleaved RoPE (llama.cpp's converter). Mixtral's GGUF
// files are llama ones with experts (llama.expert_count): every layer MoE, experts of
// feed_forward_length, top-k weights renormalized.
Status ReadLlamaGguf(const GgufKeys& k, ModelConfig* c) {
  c->rope_layout = RopeLayout::kInterleaved;
  if (!k.Has("expert_count")) return OkStatus();
  ASTR_ASSIGN_OR_RETURN(c->num_experts, k.Int("expert_count"));
  if (c->num_experts <= 0) return k.Error("expert_count", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, k.Int("expert_used_count"));
  c->moe_intermediate_size = c->intermediate_size;
  c->norm_topk_prob = true;
  return OkStatus();
}

// Mixtral (model_type mixtral): the llama layer with every MLP a mixture of num_local_experts
// experts of intermediate_size, top num_experts_per_tok with renormalized weights.
Status ReadMixtralHf(const ConfigJson& r, ModelConfig* c) {
  ASTR_RETURN_IF_ERROR(arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/false, c));
  ASTR_ASSIGN_OR_RETURN(c->num_experts, r.Int("num_local_experts", 8));
  if (c->num_experts <= 0) return r.Error("num_local_experts", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, r.Int("num_experts_per_tok", 2));
  c->moe_intermediate_size = c->intermediate_size;
  c->norm_topk_prob = true;
  return OkStatus();
}

// A config whose MoE Mixtral / GGUF llama can say: every layer, experts of intermediate_size,
// renormalized top-k weights.
Status CheckMixtralMoe(const ModelConfig& c, const std::string& what) {
  if (c.HasDenseLayers() || !c.norm_topk_prob || c.moe_intermediate_size != c.intermediate_size) {
    return InvalidArgumentError(what +
                                " experts are on every layer, of intermediate_size, with "
                                "renormalized top-k weights");
  }
  return OkStatus();
}

Status WriteMixtralHf(const ModelConfig& c, nlohmann::json* j) {
  ModelConfig dense = c;
  dense.num_experts = 0;
  ASTR_RETURN_IF_ERROR(arch::CheckPlainLlamaFeatures(dense, "mixtral", false, QkNorm::kNone));
  ASTR_RETURN_IF_ERROR(CheckMixtralMoe(c, "HF mixtral"));
  arch::WriteLlamaFamilyHf(c, j);
  (*j)["num_local_experts"] = c.num_experts;
  (*j)["num_experts_per_tok"] = c.num_experts_per_tok;
  return OkStatus();
}

Status WriteLlamaHf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(arch::CheckPlainLlamaFeatures(c, (*j)["model_type"].get<std::string>(),
                                                     false, QkNorm::kNone));
  arch::WriteLlamaFamilyHf(c, j);
  return OkStatus();
}

Status WriteLlamaGguf(const ModelConfig& c, GgufWriter* w) {
  if (c.rope_layout != RopeLayout::kInterleaved) {
    return InvalidArgumentError("GGUF llama stores q/k rows in interleaved RoPE order");
  }
  if (c.qkv_bias || c.qk_norm != QkNorm::kNone || c.gated_attention || c.sandwich_norms ||
      c.sliding_window_pattern != 0 || c.embed_scale != 1.0) {
    return InvalidArgumentError("config features do not match GGUF llama");
  }
  if (c.num_experts > 0) {
    ASTR_RETURN_IF_ERROR(CheckMixtralMoe(c, "GGUF llama"));
    w->AddMetadata("llama.expert_count", GgufValue::U32(static_cast<uint32_t>(c.num_experts)));
    w->AddMetadata("llama.expert_used_count",
                   GgufValue::U32(static_cast<uint32_t>(c.num_experts_per_tok)));
  }
  return OkStatus();
}

// AstrAI's own checkpoints: interleaved q/k rows, and two optional features.
Status ReadAutoregressiveLmHf(const ConfigJson& r, ModelConfig* c) {
  c->rope_layout = RopeLayout::kInterleaved;
  ASTR_ASSIGN_OR_RETURN(bool qk_norm, r.Bool("qk_norm", false));
  if (qk_norm) c->qk_norm = QkNorm::kAfterRope;
  ASTR_ASSIGN_OR_RETURN(c->gated_attention, r.Bool("gated_attention", false));
  return arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/false, c);
}

Status WriteAutoregressiveLmHf(const ModelConfig& c, nlohmann::json* j) {
  if (c.rope_layout != RopeLayout::kInterleaved) {
    return InvalidArgumentError(
        "HF autoregressive_lm folders use interleaved RoPE order; permute q/k rows first");
  }
  if (c.qk_norm == QkNorm::kBeforeRope || c.qkv_bias || c.sliding_window_pattern != 0 ||
      c.rope_local_theta != 0.0 || c.attn_scale != 0.0 || c.embed_scale != 1.0 ||
      c.sandwich_norms || c.norm_weight_offset != 0.0) {
    return InvalidArgumentError("config features do not match HF model_type autoregressive_lm");
  }
  (*j)["qk_norm"] = c.qk_norm != QkNorm::kNone;
  (*j)["gated_attention"] = c.gated_attention;
  arch::WriteLlamaFamilyHf(c, j);
  return OkStatus();
}

}  // namespace

extern const Architecture kLlamaArchitecture{.name = "llama",
                                             .hf_model_types = {"llama"},
                                             .gguf_names = {"llama"},
                                             .moe = true,  // GGUF Mixtral
                                             .read_hf = ReadLlamaHf,
                                             .read_gguf = ReadLlamaGguf,
                                             .write_hf = WriteLlamaHf,
                                             .write_gguf = WriteLlamaGguf};
// GGUF files of Mistral models say "llama" (llama.cpp's converter); a few say "mistral".
extern const Architecture kMistralArchitecture{.name = "mistral",
                                               .hf_model_types = {"mistral"},
                                               .gguf_names = {"mistral"},
                                               .read_hf = ReadLlamaHf,
                                               .read_gguf = ReadLlamaGguf,
                                               .write_hf = WriteLlamaHf};
extern const Architecture kMixtralArchitecture{
    .name = "mixtral",
    .hf_model_types = {"mixtral"},
    .layer_names = {{"router", "ffn_gate_inp.weight", "block_sparse_moe.gate.weight"}},
    .moe = true,
    .expert_names = {{"gate_proj", "ffn_gate_exps.weight",
                      "block_sparse_moe.experts.{e}.w1.weight"},
                     {"up_proj", "ffn_up_exps.weight", "block_sparse_moe.experts.{e}.w3.weight"},
                     {"down_proj", "ffn_down_exps.weight",
                      "block_sparse_moe.experts.{e}.w2.weight"}},
    .read_hf = ReadMixtralHf,
    .write_hf = WriteMixtralHf};
extern const Architecture kAutoregressiveLmArchitecture{.name = "autoregressive_lm",
                                                        .hf_model_types = {"autoregressive_lm"},
                                                        .read_hf = ReadAutoregressiveLmHf,
                                                        .write_hf = WriteAutoregressiveLmHf};

}  // namespace astr::model
