// Phi-3 and Phi-4 (model_type phi3): the LLaMA layer (pre-norm, SwiGLU, rotate-half RoPE, partial
// rotary where partial_rotary_factor says so, Mistral-style sliding window where sliding_window
// says so) with q, k, v fused into one qkv_proj and gate, up into one gate_up_proj, in HF and in
// GGUF (attn_qkv, and ffn_up holding gate then up). The model file splits them into views of their
// rows (FusedTensorNames), so nothing downstream sees the fusion. LongRoPE (Phi-3 128k,
// Phi-4-mini) is RopeScaling::kLongRope.
#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

Status ReadPhi3Hf(const ConfigJson& r, ModelConfig* c) {
  // rope_scaling / rope_parameters (LongRoPE included) are read by ConfigFromHfJson.
  return arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/false, c);
}

// llama.cpp's converter writes LongRoPE as two f32 tensors of rope_dim / 2 divisors and the
// cos / sin factor as rope.scaling.attn_factor (rope.scaling.original_context_length is read for
// every architecture).
Status ReadPhi3Gguf(const GgufKeys& k, ModelConfig* c) {
  c->rope_layout = RopeLayout::kHalf;
  const GgufFile& g = k.file();
  const GgufTensor* lng = g.FindTensor("rope_factors_long.weight");
  const GgufTensor* shrt = g.FindTensor("rope_factors_short.weight");
  if (lng == nullptr && shrt == nullptr) return OkStatus();
  if (lng == nullptr || shrt == nullptr) {
    return InvalidArgumentError(g.path() +
                                ": LongRoPE needs both rope_factors_long.weight and "
                                "rope_factors_short.weight");
  }
  if (c->rope_scaling.type != RopeScaling::Type::kNone) {
    return UnimplementedError(g.path() + ": both rope scaling keys and LongRoPE factors");
  }
  RopeScaling& rs = c->rope_scaling;
  rs.type = RopeScaling::Type::kLongRope;
  for (auto [t, out] : {std::pair{lng, &rs.long_factor}, std::pair{shrt, &rs.short_factor}}) {
    std::vector<float> f;
    ASTR_RETURN_IF_ERROR(g.ReadF32(*t, &f));
    out->assign(f.begin(), f.end());
  }
  ASTR_ASSIGN_OR_RETURN(rs.attention_factor, k.Float("rope.scaling.attn_factor", 1.0));
  rs.factor = static_cast<double>(c->max_context_tokens) /
              static_cast<double>(std::max<int64_t>(1, rs.original_max_position));
  return OkStatus();
}

Status WritePhi3Hf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(arch::CheckPlainLlamaFeatures(c, "phi3", false, QkNorm::kNone));
  if (c.rope_scaling.type != RopeScaling::Type::kNone &&
      c.rope_scaling.type != RopeScaling::Type::kLongRope) {
    return InvalidArgumentError("HF phi3 takes no rope scaling but LongRoPE");
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
    .hf_original_max_position = 4096,
    .read_hf = ReadPhi3Hf,
    .read_gguf = ReadPhi3Gguf,
    .write_hf = WritePhi3Hf,
    .write_gguf = WritePhi3Gguf};

}  // namespace astr::model
