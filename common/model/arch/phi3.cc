// Phi-3 and Phi-4 (model_type phi3): the LLaMA layer (pre-norm, SwiGLU, rotate-half RoPE, partial
// rotary where partial_rotary_factor says so, Mistral-style sliding window where sliding_window
// says so) with q, k, v fused into one qkv_proj and gate, up into one gate_up_proj, in HF and in
// GGUF (attn_qkv, and ffn_up holding gate then up). The model file splits them into views of their
// rows (FusedTensorNames), so nothing downstream sees the fusion.
#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

Status ReadPhi3Hf(const ConfigJson& r, ModelConfig* c) {
  // LongRoPE ("longrope" / "su", Phi-3 128k and Phi-4-mini) switches between two sets of
  // per-frequency factors by sequence length and scales cos / sin; not computed yet.
  if (r.Has("rope_scaling")) {
    return r.Unsupported("rope_scaling", "is not supported for phi3 (LongRoPE is not implemented)");
  }
  if (r.Has("rope_parameters")) {
    const nlohmann::json& p = r.raw()["rope_parameters"];
    const std::string type = p.is_object() && p.contains("rope_type") && p["rope_type"].is_string()
                                 ? p["rope_type"].get<std::string>()
                                 : "default";
    if (type != "default") {
      return r.Unsupported("rope_parameters", "rope_type '" + type +
                                                  "' is not supported for phi3 (LongRoPE is not "
                                                  "implemented)");
    }
  }
  return arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/false, c);
}

Status ReadPhi3Gguf(const GgufKeys& k, ModelConfig* c) {
  for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (k.file().FindTensor(t) != nullptr) {
      return UnimplementedError(k.file().path() + ": tensor '" + t +
                                "': LongRoPE is not implemented");
    }
  }
  c->rope_layout = RopeLayout::kHalf;
  return OkStatus();
}

Status WritePhi3Hf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(arch::CheckPlainLlamaFeatures(c, "phi3", false, QkNorm::kNone));
  if (c.rope_scaling.type != RopeScaling::Type::kNone) {
    return InvalidArgumentError("HF phi3 takes no rope scaling here (LongRoPE is not implemented)");
  }
  arch::WriteLlamaFamilyHf(c, j);
  // Phi3Config's default pad id (32000) lies outside a small vocabulary; astr reads none.
  (*j)["pad_token_id"] = nullptr;
  return OkStatus();
}

Status WritePhi3Gguf(const ModelConfig& c, GgufWriter*) {
  if (c.rope_layout != RopeLayout::kHalf || c.qkv_bias || c.qk_norm != QkNorm::kNone ||
      c.gated_attention || c.sandwich_norms || c.mlp_activation != MlpActivation::kSilu ||
      c.rope_scaling.type != RopeScaling::Type::kNone) {
    return InvalidArgumentError("config features do not match GGUF phi3");
  }
  return OkStatus();
}

}  // namespace

extern const Architecture kPhi3Architecture{
    .name = "phi3",
    .hf_model_types = {"phi3"},
    .gguf_names = {"phi3"},
    .fused_names = {{"attn_qkv.weight",
                     "self_attn.qkv_proj.weight",
                     {"q_proj", "k_proj", "v_proj"}},
                    {"ffn_up.weight", "mlp.gate_up_proj.weight", {"gate_proj", "up_proj"}}},
    .read_hf = ReadPhi3Hf,
    .read_gguf = ReadPhi3Gguf,
    .write_hf = WritePhi3Hf,
    .write_gguf = WritePhi3Gguf};

}  // namespace astr::model
