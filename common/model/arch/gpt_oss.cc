// gpt-oss (GptOssForCausalLM; llama.cpp's gpt-oss): pre-norm layers alternating sliding-window
// (layer 0) and global attention, biases on q, k, v and o, a learned sink logit per head in every
// attention softmax, YaRN RoPE in half (NeoX) order, and every MLP a mixture of experts: a router
// with a bias, top-k with softmax over the chosen logits (= renormalized top-k), experts with
// biases and the clamped SwiGLU ((clamp(up) + 1) * g * sigmoid(1.702 g), g = min(gate, 7)).
//
// HF checkpoints stack a layer's experts in four tensors held as `x @ W` (ModelFile exposes each
// expert's canonical tensors from them: Architecture::hf_experts_transposed); their released
// MXFP4 form (_blocks / _scales) is not read here. GGUF stacks them per part, as for Qwen-MoE,
// with the biases stacked alike ([experts, rows]).
#include <cmath>

#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

constexpr double kSwigluAlpha = 1.702;
constexpr double kSwigluLimit = 7.0;

// What every gpt-oss layer has, whatever the file says.
void SetGptOssLayer(ModelConfig* c) {
  c->rope_layout = RopeLayout::kHalf;
  c->attn_sinks = true;
  c->mlp_activation = MlpActivation::kSwigluClamped;
  c->norm_topk_prob = true;  // softmax over the top-k logits
  c->router_bias = true;
  c->expert_bias = true;
  c->moe_intermediate_size = c->intermediate_size;
  c->sliding_window_pattern = 2;  // layer 0 slides, layer 1 is global, ...
}

Status ReadGptOssHf(const ConfigJson& r, ModelConfig* c) {
  SetGptOssLayer(c);
  // GptOssConfig's defaults where they differ from the shared ones.
  ASTR_ASSIGN_OR_RETURN(c->rms_norm_eps, r.Number("rms_norm_eps", 1e-5));
  if (!r.Has("max_position_embeddings")) c->max_context_tokens = 131072;
  const bool theta_given =
      r.Has("rope_theta") || (r.Has("rope_parameters") && r.raw()["rope_parameters"].is_object() &&
                              r.raw()["rope_parameters"].contains("rope_theta"));
  if (!theta_given) c->rope_theta = 150000.0;
  if (!r.Has("rope_scaling") && !r.Has("rope_parameters")) {
    RopeScaling& rs = c->rope_scaling;  // GptOssConfig's default YaRN
    rs.type = RopeScaling::Type::kYarn;
    rs.factor = 32.0;
    rs.original_max_position = 4096;
    rs.beta_fast = 32.0;
    rs.beta_slow = 1.0;
    rs.truncate = false;
    rs.attention_factor = 0.1 * std::log(rs.factor) + 1.0;
  }
  ASTR_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", true));
  c->qkv_bias = c->o_bias = attention_bias;
  ASTR_ASSIGN_OR_RETURN(c->sliding_window, r.Int("sliding_window", 128));
  if (c->sliding_window <= 0) return r.Error("sliding_window", "must be positive");
  ASTR_RETURN_IF_ERROR(CheckContextTokens(
      c->sliding_window, [&](const std::string& why) { return r.Error("sliding_window", why); }));
  if (r.Has("layer_types")) {
    ASTR_RETURN_IF_ERROR(arch::ReadLayerTypes(r, c->num_layers, &c->sliding_window_pattern));
  }
  ASTR_ASSIGN_OR_RETURN(c->num_experts, r.Int("num_local_experts", 128));
  if (c->num_experts <= 0) return r.Error("num_local_experts", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, r.Int("num_experts_per_tok", 4));
  ASTR_ASSIGN_OR_RETURN(c->swiglu_limit, r.Number("swiglu_limit", kSwigluLimit));
  ASTR_ASSIGN_OR_RETURN(c->swiglu_alpha, r.Number("swiglu_alpha", kSwigluAlpha));
  if (!(c->swiglu_limit > 0.0)) return r.Error("swiglu_limit", "must be positive");
  return OkStatus();
}

// llama.cpp's gpt-oss keys: {arch}.expert_count, expert_used_count, expert_feed_forward_length,
// attention.sliding_window; alternation, biases, sinks and the SwiGLU constants are fixed.
Status ReadGptOssGguf(const GgufKeys& k, ModelConfig* c) {
  ASTR_ASSIGN_OR_RETURN(c->num_experts, k.Int("expert_count"));
  if (c->num_experts <= 0) return k.Error("expert_count", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, k.Int("expert_used_count"));
  ASTR_ASSIGN_OR_RETURN(c->intermediate_size, k.Int("expert_feed_forward_length"));
  SetGptOssLayer(c);
  c->qkv_bias = c->o_bias = true;
  ASTR_ASSIGN_OR_RETURN(c->sliding_window, k.Int("attention.sliding_window"));
  if (c->sliding_window <= 0) return k.Error("attention.sliding_window", "must be positive");
  c->swiglu_limit = kSwigluLimit;
  c->swiglu_alpha = kSwigluAlpha;
  return OkStatus();
}

// The features gpt-oss files cannot say otherwise.
Status CheckGptOss(const ModelConfig& c, const std::string& what) {
  if (c.rope_layout != RopeLayout::kHalf || !c.attn_sinks || !c.router_bias || !c.expert_bias ||
      !c.norm_topk_prob || c.mlp_activation != MlpActivation::kSwigluClamped ||
      c.qkv_bias != c.o_bias || c.num_experts <= 0 || c.HasDenseLayers() ||
      c.moe_intermediate_size != c.intermediate_size || c.sliding_window <= 0 ||
      c.sliding_window_pattern != 2 || c.qk_norm != QkNorm::kNone || c.gated_attention ||
      c.sandwich_norms || c.shared_expert_intermediate_size != 0 || c.attn_scale != 0.0 ||
      c.embed_scale != 1.0 || c.norm_weight_offset != 0.0 || c.rope_local_theta != 0.0) {
    return InvalidArgumentError("config features do not match " + what);
  }
  return OkStatus();
}

Status WriteGptOssHf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(CheckGptOss(c, "HF gpt_oss"));
  std::vector<std::string> types;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    types.push_back(c.LayerWindow(l) > 0 ? "sliding_attention" : "full_attention");
  }
  (*j)["layer_types"] = types;
  (*j)["sliding_window"] = c.sliding_window;
  (*j)["attention_bias"] = c.qkv_bias;
  (*j)["num_local_experts"] = c.num_experts;
  (*j)["num_experts_per_tok"] = c.num_experts_per_tok;
  (*j)["swiglu_limit"] = c.swiglu_limit;
  (*j)["swiglu_alpha"] = c.swiglu_alpha;
  (*j)["hidden_act"] = "silu";
  return OkStatus();
}

Status WriteGptOssGguf(const ModelConfig& c, GgufWriter* w) {
  ASTR_RETURN_IF_ERROR(CheckGptOss(c, "GGUF gpt-oss"));
  if (!c.qkv_bias || c.swiglu_limit != kSwigluLimit || c.swiglu_alpha != kSwigluAlpha) {
    return InvalidArgumentError(
        "GGUF gpt-oss has attention biases and swiglu_limit 7, swiglu_alpha 1.702");
  }
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  w->AddMetadata("gpt-oss.expert_count", u32(c.num_experts));
  w->AddMetadata("gpt-oss.expert_used_count", u32(c.num_experts_per_tok));
  w->AddMetadata("gpt-oss.expert_feed_forward_length", u32(c.moe_intermediate_size));
  w->AddMetadata("gpt-oss.attention.sliding_window", u32(c.sliding_window));
  return OkStatus();
}

}  // namespace

extern const Architecture kGptOssArchitecture{
    .name = "gpt_oss",
    .hf_model_types = {"gpt_oss"},
    .gguf_names = {"gpt-oss"},
    .layer_names = {{"mlp_norm", "post_attention_norm.weight", "post_attention_layernorm.weight"},
                    {"router", "ffn_gate_inp.weight", "mlp.router.weight"},
                    {"router_bias", "ffn_gate_inp.bias", "mlp.router.bias"}},
    .moe = true,
    .expert_names = {{"gate_proj", "ffn_gate_exps.weight", "mlp.experts.{e}.gate_proj.weight"},
                     {"up_proj", "ffn_up_exps.weight", "mlp.experts.{e}.up_proj.weight"},
                     {"down_proj", "ffn_down_exps.weight", "mlp.experts.{e}.down_proj.weight"},
                     {"gate_bias", "ffn_gate_exps.bias", "mlp.experts.{e}.gate_proj.bias"},
                     {"up_bias", "ffn_up_exps.bias", "mlp.experts.{e}.up_proj.bias"},
                     {"down_bias", "ffn_down_exps.bias", "mlp.experts.{e}.down_proj.bias"}},
    .hf_experts_transposed = true,
    .read_hf = ReadGptOssHf,
    .read_gguf = ReadGptOssGguf,
    .write_hf = WriteGptOssHf,
    .write_gguf = WriteGptOssGguf};

}  // namespace astr::model
