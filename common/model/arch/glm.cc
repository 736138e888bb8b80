// GLM-4.5 / GLM-4.6 (Glm4MoeForCausalLM, model_type glm4_moe): Qwen-like attention (q/k/v biases
// as attention_bias says, per-head q/k RMSNorm before RoPE with use_qk_norm, partial rotary: half
// the head by default, rotate-half order), the first first_k_dense_replace layers dense, the
// others a mixture of n_routed_experts experts with DeepSeek-V3's routing (sigmoid scores, the
// e_score_correction_bias seen by the choice only, n_group expert groups of which topk_group stay,
// renormalized weights times routed_scaling_factor) and n_shared_experts ungated shared experts
// (one MLP of n_shared_experts x moe_intermediate_size). The checkpoints' multi-token-prediction
// layers (num_nextn_predict_layers, numbered from num_hidden_layers) are not served. HF only.
#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"

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

Status WriteGlm4MoeHf(const ModelConfig& c, nlohmann::json* j) {
  int64_t dense = 0;
  while (dense < c.num_layers && !c.LayerIsMoe(dense)) ++dense;
  for (int64_t l = dense; l < c.num_layers; ++l) {
    if (!c.LayerIsMoe(l)) return InvalidArgumentError("HF glm4_moe has its dense layers first");
  }
  if (c.rope_layout != RopeLayout::kHalf || !c.router_sigmoid || !c.router_choice_bias ||
      c.shared_expert_gated || c.moe_layer_step != 1 || c.qk_norm == QkNorm::kAfterRope ||
      c.gated_attention || c.sliding_window != 0 || c.sandwich_norms || c.o_bias || c.attn_sinks ||
      c.router_bias || c.expert_bias || c.attn_scale != 0.0 || c.embed_scale != 1.0 ||
      c.norm_weight_offset != 0.0 ||
      c.shared_expert_intermediate_size % c.moe_intermediate_size != 0) {
    return InvalidArgumentError("config features do not match HF model_type glm4_moe");
  }
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

}  // namespace

extern const Architecture kGlm4MoeArchitecture{
    .name = "glm4_moe",
    .hf_model_types = {"glm4_moe"},
    .layer_names = {{"shared_expert.gate_proj", "ffn_gate_shexp.weight",
                     "mlp.shared_experts.gate_proj.weight"},
                    {"shared_expert.up_proj", "ffn_up_shexp.weight",
                     "mlp.shared_experts.up_proj.weight"},
                    {"shared_expert.down_proj", "ffn_down_shexp.weight",
                     "mlp.shared_experts.down_proj.weight"},
                    {"router_choice_bias", "exp_probs_b.bias", "mlp.gate.e_score_correction_bias"}},
    .moe = true,
    .hf_mtp_layers = true,
    .read_hf = ReadGlm4MoeHf,
    .write_hf = WriteGlm4MoeHf};

}  // namespace astr::model
