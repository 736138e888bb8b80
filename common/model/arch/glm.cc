// GLM-4.5 / GLM-4.6 (Glm4MoeForCausalLM, model_type glm4_moe): Qwen-like attention (q/k/v biases
// as attention_bias says, per-head q/k RMSNorm before RoPE with use_qk_norm, partial rotary: half
// the head by default, rotate-half order), the first first_k_dense_replace layers dense, the
// others a mixture of n_routed_experts experts with DeepSeek-V3's routing (sigmoid scores, the
// e_score_correction_bias seen by the choice only, n_group expert groups of which topk_group stay,
// renormalized weights times routed_scaling_factor) and n_shared_experts ungated shared experts
// (one MLP of n_shared_experts x moe_intermediate_size). The checkpoints' multi-token-prediction
// layers (num_nextn_predict_layers, numbered from num_hidden_layers) are not served.
//
// GGUF (llama.cpp's glm4moe): block_count counts the multi-token-prediction layers too
// (nextn_predict_layers of them, last; their blk.N tensors are skipped), the MLP norm is
// post_attention_norm, the choice bias exp_probs_b.bias, the shared experts ffn_*_shexp, and the
// q/k norms are there or not (llama.cpp: optional); q/k/v biases always (llama.cpp requires them).
#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

Status ReadGlm4MoeHf(const ConfigJson& r, ModelConfig* c) {
  ASTR_ASSIGN_OR_RETURN(c->rms_norm_eps, r.Number("rms_norm_eps", 1e-5));
  ASTR_ASSIGN_OR_RETURN(c->qkv_bias, r.Bool("attention_bias", false));
  ASTR_ASSIGN_OR_RETURN(bool qk_norm, r.Bool("use_qk_norm", false));
  c->qk_norm = qk_norm ? QkNorm::kBeforeRope : QkNorm::kNone;
  ASTR_RETURN_IF_ERROR(arch::ReadHfActivation(r, "hidden_act", "silu", c));
  // Glm4MoeConfig's partial_rotary_factor is 0.5 when no file key says otherwise.
  const bool partial_given = r.Has("partial_rotary_factor") ||
                             (r.Has("rope_parameters") && r.raw()["rope_parameters"].is_object() &&
                              r.raw()["rope_parameters"].contains("partial_rotary_factor"));
  if (!partial_given) c->rope_dim = c->head_dim / 2;
  ASTR_ASSIGN_OR_RETURN(c->num_experts, r.Int("n_routed_experts", 128));
  if (c->num_experts <= 0) return r.Error("n_routed_experts", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, r.Int("num_experts_per_tok", 8));
  ASTR_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.Int("moe_intermediate_size", 1408));
  ASTR_ASSIGN_OR_RETURN(int64_t shared, r.Int("n_shared_experts", 1));
  if (shared < 0) return r.Error("n_shared_experts", "must be >= 0");
  c->shared_expert_intermediate_size = shared * c->moe_intermediate_size;
  c->shared_expert_gated = false;
  ASTR_ASSIGN_OR_RETURN(c->norm_topk_prob, r.Bool("norm_topk_prob", true));
  ASTR_ASSIGN_OR_RETURN(c->routed_scaling_factor, r.Number("routed_scaling_factor", 1.0));
  ASTR_ASSIGN_OR_RETURN(c->router_groups, r.Int("n_group", 1));
  ASTR_ASSIGN_OR_RETURN(c->router_topk_groups, r.Int("topk_group", 1));
  c->router_sigmoid = true;
  c->router_choice_bias = true;
  ASTR_ASSIGN_OR_RETURN(int64_t dense, r.Int("first_k_dense_replace", 1));
  if (dense < 0) return r.Error("first_k_dense_replace", "must be >= 0");
  for (int64_t l = 0; l < dense && l < c->num_layers; ++l) c->dense_layers.push_back(l);
  return OkStatus();
}

// llama.cpp's glm4moe keys ({arch}.): expert_count, expert_used_count,
// expert_feed_forward_length, expert_shared_count, leading_dense_block_count, expert_weights_scale,
// expert_weights_norm (false when absent, as llama.cpp reads it), expert_gating_func (2, sigmoid,
// or absent), expert_group_count / expert_group_used_count (1 when absent) and
// nextn_predict_layers.
Status ReadGlm4MoeGguf(const GgufKeys& k, ModelConfig* c) {
  const GgufFile& g = k.file();
  ASTR_ASSIGN_OR_RETURN(int64_t nextn, k.Int("nextn_predict_layers", 0));
  if (nextn < 0 || nextn >= c->num_layers) {
    return k.Error("nextn_predict_layers", "must be >= 0 and below block_count");
  }
  c->num_layers -= nextn;
  ASTR_ASSIGN_OR_RETURN(int64_t gating, k.Int("expert_gating_func", 2));
  if (gating != 0 && gating != 2) {
    return k.Error("expert_gating_func", "must be 2 (sigmoid): glm4moe routes by sigmoid scores");
  }
  c->router_sigmoid = true;
  c->router_choice_bias = true;
  ASTR_ASSIGN_OR_RETURN(c->num_experts, k.Int("expert_count"));
  if (c->num_experts <= 0) return k.Error("expert_count", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, k.Int("expert_used_count"));
  ASTR_ASSIGN_OR_RETURN(c->moe_intermediate_size, k.Int("expert_feed_forward_length"));
  ASTR_ASSIGN_OR_RETURN(int64_t shared, k.Int("expert_shared_count", 0));
  if (shared < 0) return k.Error("expert_shared_count", "must be >= 0");
  c->shared_expert_intermediate_size = shared * c->moe_intermediate_size;
  c->shared_expert_gated = false;
  ASTR_ASSIGN_OR_RETURN(c->routed_scaling_factor, k.Float("expert_weights_scale", 1.0));
  ASTR_ASSIGN_OR_RETURN(c->norm_topk_prob, g.GetBool(k.Key("expert_weights_norm"), false));
  ASTR_ASSIGN_OR_RETURN(c->router_groups, k.Int("expert_group_count", 1));
  ASTR_ASSIGN_OR_RETURN(c->router_topk_groups, k.Int("expert_group_used_count", 1));
  ASTR_ASSIGN_OR_RETURN(int64_t dense, k.Int("leading_dense_block_count", 0));
  if (dense < 0) return k.Error("leading_dense_block_count", "must be >= 0");
  for (int64_t l = 0; l < dense && l < c->num_layers; ++l) c->dense_layers.push_back(l);
  c->qkv_bias = g.FindTensor("blk.0.attn_q.bias") != nullptr;
  c->qk_norm =
      g.FindTensor("blk.0.attn_q_norm.weight") != nullptr ? QkNorm::kBeforeRope : QkNorm::kNone;
  return OkStatus();
}

// The layers before the first MoE one, after checking that no dense layer follows it.
StatusOr<int64_t> LeadingDenseLayers(const ModelConfig& c, const std::string& what) {
  int64_t dense = 0;
  while (dense < c.num_layers && !c.LayerIsMoe(dense)) ++dense;
  for (int64_t l = dense; l < c.num_layers; ++l) {
    if (!c.LayerIsMoe(l)) return InvalidArgumentError(what + " has its dense layers first");
  }
  return dense;
}

Status CheckGlm4Moe(const ModelConfig& c, const std::string& what) {
  if (c.rope_layout != RopeLayout::kHalf || !c.router_sigmoid || !c.router_choice_bias ||
      c.shared_expert_gated || c.moe_layer_step != 1 || c.qk_norm == QkNorm::kAfterRope ||
      c.gated_attention || c.sliding_window != 0 || c.sandwich_norms || c.o_bias || c.attn_sinks ||
      c.router_bias || c.expert_bias || c.attn_scale != 0.0 || c.embed_scale != 1.0 ||
      c.norm_weight_offset != 0.0 ||
      c.shared_expert_intermediate_size % c.moe_intermediate_size != 0) {
    return InvalidArgumentError("config features do not match " + what);
  }
  return OkStatus();
}

Status WriteGlm4MoeHf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_ASSIGN_OR_RETURN(int64_t dense, LeadingDenseLayers(c, "HF glm4_moe"));
  ASTR_RETURN_IF_ERROR(CheckGlm4Moe(c, "HF model_type glm4_moe"));
  arch::WriteLlamaFamilyHf(c, j);
  (*j)["attention_bias"] = c.qkv_bias;
  (*j)["use_qk_norm"] = c.qk_norm == QkNorm::kBeforeRope;
  (*j)["partial_rotary_factor"] = static_cast<double>(c.rope_dim) / static_cast<double>(c.head_dim);
  (*j)["n_routed_experts"] = c.num_experts;
  (*j)["num_experts_per_tok"] = c.num_experts_per_tok;
  (*j)["moe_intermediate_size"] = c.moe_intermediate_size;
  (*j)["n_shared_experts"] = c.shared_expert_intermediate_size / c.moe_intermediate_size;
  (*j)["norm_topk_prob"] = c.norm_topk_prob;
  (*j)["routed_scaling_factor"] = c.routed_scaling_factor;
  (*j)["n_group"] = c.router_groups;
  (*j)["topk_group"] = c.router_topk_groups;
  (*j)["first_k_dense_replace"] = dense;
  (*j)["num_nextn_predict_layers"] = 0;
  return OkStatus();
}

Status WriteGlm4MoeGguf(const ModelConfig& c, GgufWriter* w) {
  ASTR_ASSIGN_OR_RETURN(int64_t dense, LeadingDenseLayers(c, "GGUF glm4moe"));
  ASTR_RETURN_IF_ERROR(CheckGlm4Moe(c, "GGUF glm4moe"));
  if (!c.qkv_bias) return InvalidArgumentError("GGUF glm4moe has q/k/v biases");
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  const std::string a = "glm4moe.";
  w->AddMetadata(a + "expert_count", u32(c.num_experts));
  w->AddMetadata(a + "expert_used_count", u32(c.num_experts_per_tok));
  w->AddMetadata(a + "expert_feed_forward_length", u32(c.moe_intermediate_size));
  w->AddMetadata(a + "expert_shared_count",
                 u32(c.shared_expert_intermediate_size / c.moe_intermediate_size));
  w->AddMetadata(a + "leading_dense_block_count", u32(dense));
  w->AddMetadata(a + "expert_gating_func", u32(2));
  w->AddMetadata(a + "expert_weights_scale",
                 GgufValue::F32(static_cast<float>(c.routed_scaling_factor)));
  w->AddMetadata(a + "expert_weights_norm", GgufValue::Bool(c.norm_topk_prob));
  if (c.router_groups > 1) {
    w->AddMetadata(a + "expert_group_count", u32(c.router_groups));
    w->AddMetadata(a + "expert_group_used_count", u32(c.router_topk_groups));
  }
  w->AddMetadata(a + "nextn_predict_layers", u32(0));
  return OkStatus();
}

}  // namespace

extern const Architecture kGlm4MoeArchitecture{
    .name = "glm4_moe",
    .hf_model_types = {"glm4_moe"},
    .gguf_names = {"glm4moe"},
    .layer_names = {{"mlp_norm", "post_attention_norm.weight", "post_attention_layernorm.weight"},
                    {"shared_expert.gate_proj", "ffn_gate_shexp.weight",
                     "mlp.shared_experts.gate_proj.weight"},
                    {"shared_expert.up_proj", "ffn_up_shexp.weight",
                     "mlp.shared_experts.up_proj.weight"},
                    {"shared_expert.down_proj", "ffn_down_shexp.weight",
                     "mlp.shared_experts.down_proj.weight"},
                    {"router_choice_bias", "exp_probs_b.bias", "mlp.gate.e_score_correction_bias"}},
    .moe = true,
    .mtp_layers = true,
    .read_hf = ReadGlm4MoeHf,
    .read_gguf = ReadGlm4MoeGguf,
    .write_hf = WriteGlm4MoeHf,
    .write_gguf = WriteGlm4MoeGguf};

}  // namespace astr::model
