// One internal description of a pre-norm decoder, whatever file it came from (HF config.json or
// GGUF metadata of an architecture in common/model/architecture.h): its dims and the
// hyper-parameters of the layer every backend runs,
//
//   x  = embed[ids] * embed_scale
//   per layer l:
//     h  = RmsNorm(x, attn_norm)
//     q, k, v = h . q/k/v_proj (+ biases); q, k = HeadRmsNorm (qk_norm); RoPE with layer l's base
//     a  = softmax(q k^T * attn_scale, causal, layer l's window; with attn_sinks one more logit
//          per head, sinks[h], that weighs no value) v  (* sigmoid(gate): gated_attention)
//     a  = a . o_proj (+ o_bias);    a = RmsNorm(a, post_attn_norm) (sandwich_norms)
//     x += a
//     h  = RmsNorm(x, mlp_norm)
//     m  = (act(h . gate_proj) * (h . up_proj)) . down_proj;  m = RmsNorm(m, post_mlp_norm)
//     (sandwich) x += m
//   where a mixture-of-experts layer (LayerIsMoe) computes m instead as
//     p  = softmax(h . router (+ router_bias));  E = the num_experts_per_tok largest p (p
//     renormalized over E when norm_topk_prob);  m = sum over e in E, in expert order, of p_e *
//     expert e's MLP(h) (its gate / up / down projections + their biases when expert_bias)
//   logits = final_cap(RmsNorm(x, final_norm) . lm_head)
//
// where RmsNorm(v, w) = v / rms(v) * (w + norm_weight_offset) and cap(s) = c * tanh(s / c) for the
// soft-capping values c = attn_softcap / final_softcap (Gemma 2; 0 = none).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace astr::model {

// The longest context (max_position_embeddings / {arch}.context_length) and sliding window a model
// may declare. No tensor confirms these values, and they bound what clients may ask for (prompt +
// max_tokens, penalty_window) and travel as int32 in the worker's Info, so they are capped: 2^24
// is 1.6x the longest context of any released model (Llama 4 Scout, 10M tokens).
inline constexpr int64_t kMaxContextTokens = int64_t{1} << 24;

class GgufFile;
class GgufWriter;

// How RoPE pairs the dimensions of a head.
enum class RopeLayout {
  kHalf,         // HF rotate_half (GPT-NeoX): dim i pairs with i + rot_dim/2.
  kInterleaved,  // GGUF llama / AstrAI: dim 2i pairs with 2i+1.
};

// Where the per-head RMSNorm of q and k (if any) is applied.
enum class QkNorm {
  kNone,
  kBeforeRope,  // Qwen3
  kAfterRope,   // AstrAI
};

// The MLP's gate activation: out = act(gate) * up.
enum class MlpActivation {
  kSilu,      // SwiGLU: hidden_act "silu" (the llama family, and every GGUF we read)
  kGeluTanh,  // GeGLU: hidden_act "gelu_pytorch_tanh" / "gelu_new" (tanh approximation)
  // gpt-oss: g = min(gate, L), u = clamp(up, -L, L), out = (u + 1) * g * sigmoid(alpha * g) for
  // L = swiglu_limit and alpha = swiglu_alpha.
  kSwigluClamped,
};

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kLongRope, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3, LongRoPE and YaRN: the pre-training context.
  int64_t original_max_position = 8192;
  // YaRN (gpt-oss; HF rope_type "yarn"): frequency i is theta^(-2i/d) blended with it / factor by
  // a ramp between the dims that turn beta_fast and beta_slow times over original_max_position
  // (floored / ceiled when truncate, transformers' default and llama.cpp's rule), and cos / sin
  // are multiplied by attention_factor (default 0.1 ln(factor) + 1).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  // LongRoPE (Phi-3 128k, Phi-4-mini; HF rope_type "longrope" / "su"): frequency i is divided by
  // short_factor[i], or by long_factor[i] for a sequence's tokens in a step that reaches position
  // original_max_position (transformers' choice, made per sequence and step), and cos / sin are
  // multiplied by attention_factor. [rope_dim / 2] each.
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  double attention_factor = 1.0;  // LongRoPE and YaRN
};

struct ModelConfig {
  std::string architecture;  // "llama", "mistral", "qwen2", "qwen3", "autoregressive_lm"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rope_dim = 0;  // rotated dims per head (== head_dim unless partial rotary)
  int64_t max_context_tokens =
      0;  // context length: max_position_embeddings / {arch}.context_length
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeLayout rope_layout = RopeLayout::kHalf;
  RopeScaling rope_scaling;
  bool qkv_bias = false;  // Qwen2: bias on q, k, v projections
  bool o_bias = false;    // gpt-oss: bias on o_proj too
  // gpt-oss: a learned logit per query head joins each softmax over the keys (attn_sinks).
  bool attn_sinks = false;
  QkNorm qk_norm = QkNorm::kNone;
  bool gated_attention =
      false;  // AstrAI: o_proj input is attn * sigmoid(gate), gate from `attn_gate`
  bool tie_word_embeddings = false;
  MlpActivation mlp_activation = MlpActivation::kSilu;
  // kSwigluClamped's limit and sigmoid scale (gpt-oss's swiglu_limit 7, alpha 1.702).
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;
  // Mistral-style sliding window: a query at position i sees keys j with i - W < j <= i; 0 = none.
  int64_t sliding_window = 0;
  // Which layers use sliding_window: 0 = all of them; P > 0 = all but every P-th (layer l is global
  // when (l + 1) % P == 0: Gemma 3's 5 local : 1 global is P = 6, Gemma 2's alternation P = 2).
  int64_t sliding_window_pattern = 0;
  // RoPE base of the sliding-window layers when > 0 (Gemma 3's rope_local_base_freq); those layers
  // then use no rope scaling. 0 = every layer uses rope_theta and rope_scaling.
  double rope_local_theta = 0.0;
  // Softmax scale of attention scores; 0 = 1 / sqrt(head_dim). Gemma: query_pre_attn_scalar^-1/2.
  double attn_scale = 0.0;
  // The embedding rows are multiplied by this (Gemma: sqrt(hidden_size)).
  double embed_scale = 1.0;
  // Gemma 2: attention scores and final logits soft-capped to (-c, c) as c * tanh(s / c); 0 = off.
  double attn_softcap = 0.0;
  double final_softcap = 0.0;
  // Gemma 2/3: attention and MLP outputs are RmsNorm'ed (post_attn_norm, post_mlp_norm) before
  // they join the residual stream.
  bool sandwich_norms = false;
  // Added to every RmsNorm weight (norms, q/k norms) when it is applied: Gemma's HF checkpoints
  // store w for a scale of (1 + w), so 1 for them; llama.cpp's converter stores 1 + w, so 0.
  double norm_weight_offset = 0.0;
  // Mixture of experts (Qwen3-MoE): 0 = every layer is dense. A MoE layer routes each token to
  // num_experts_per_tok of num_experts MLPs of moe_intermediate_size (header comment).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  // Layer l is MoE when num_experts > 0, (l + 1) % moe_layer_step == 0 (Qwen's
  // decoder_sparse_step) and l is not in dense_layers (Qwen's mlp_only_layers); the others keep
  // the dense MLP of intermediate_size.
  int64_t moe_layer_step = 1;
  std::vector<int64_t> dense_layers;
  // Qwen2-MoE's shared expert: every MoE layer also runs a dense MLP of this size on every token,
  // scaled by sigmoid(h . shared_expert_gate), added to the experts' sum; 0 = none.
  int64_t shared_expert_intermediate_size = 0;
  // gpt-oss: a bias on the router's logits (router_bias) and on every expert's projections
  // (expert_bias).
  bool router_bias = false;
  bool expert_bias = false;
  // DeepSeek-V3-style routing (GLM-4.5; kernels/common/moe_route.h): sigmoid scores instead of a
  // softmax, a per-expert bias on the scores that only the choice sees (router_choice_bias:
  // e_score_correction_bias, noaux_tc), experts in router_groups groups of which the
  // router_topk_groups best stay, and the chosen weights times routed_scaling_factor.
  bool router_sigmoid = false;
  bool router_choice_bias = false;
  int64_t router_groups = 1;
  int64_t router_topk_groups = 1;
  double routed_scaling_factor = 1.0;
  // Whether the shared expert is scaled by sigmoid(h . shared_expert_gate) (Qwen2-MoE) or added as
  // it is (GLM-4.5's shared_experts).
  bool shared_expert_gated = true;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // Checks dims are positive and consistent (heads divide, head_dim even, ...) and
  // max_context_tokens / sliding_window at most kMaxContextTokens; names the bad key. Whether the
  // dims agree with the weights is ModelFile's check (CheckConfig).
  Status Validate() const;
  // Layer l's sliding window (0 = global attention) and whether it uses rope_local_theta.
  int64_t LayerWindow(int64_t l) const;
  bool LayerUsesLocalRope(int64_t l) const;
  // Whether layer l's MLP is a mixture of experts (num_experts above).
  bool LayerIsMoe(int64_t l) const;
  // Whether some layer is dense.
  bool HasDenseLayers() const;
  // The softmax scale attention uses (attn_scale, or 1 / sqrt(head_dim)).
  float AttnScale() const;
  // Total parameter count implied by the dims. Builds ExpectedWeights: call it only on a config
  // whose dims the weights confirm (ModelFile::Open checks them), never on one straight from a
  // file.
  int64_t ParameterCount() const;
};

// Canonical weight names (what the model asks a ModelFile for) and their shapes, outermost dim
// first (torch order: a projection is [out_features, in_features]).
//   embed                [vocab, hidden]
//   final_norm           [hidden]
//   lm_head              [vocab, hidden]    (absent when tie_word_embeddings)
//   layers.{i}.attn_norm [hidden]
//   layers.{i}.q_proj    [heads*head_dim, hidden]     q_bias [heads*head_dim]      (qkv_bias)
//   layers.{i}.k_proj    [kv_heads*head_dim, hidden]  k_bias [kv_heads*head_dim]   (qkv_bias)
//   layers.{i}.v_proj    [kv_heads*head_dim, hidden]  v_bias [kv_heads*head_dim]   (qkv_bias)
//   layers.{i}.attn_gate [heads*head_dim, hidden]     (gated_attention)
//   layers.{i}.q_norm    [head_dim]   k_norm [head_dim]                            (qk_norm)
//   layers.{i}.o_proj    [hidden, heads*head_dim]     o_bias [hidden]               (o_bias)
//   layers.{i}.attn_sinks [heads]                                                    (attn_sinks)
//   layers.{i}.mlp_norm  [hidden]
//   layers.{i}.gate_proj [intermediate, hidden]  up_proj [intermediate, hidden]
//   layers.{i}.down_proj [hidden, intermediate]
//   layers.{i}.post_attn_norm [hidden]  post_mlp_norm [hidden]               (sandwich_norms)
// A MoE layer (LayerIsMoe) holds instead of gate_proj / up_proj / down_proj
//   layers.{i}.router    [num_experts, hidden]
//   layers.{i}.experts.{e}.gate_proj, up_proj [moe_intermediate, hidden]  down_proj [hidden,
//   moe_intermediate]   for e in [0, num_experts)
//   layers.{i}.shared_expert.gate_proj, up_proj [shared, hidden]  down_proj [hidden, shared]
//   layers.{i}.shared_expert_gate [1, hidden]   (shared_expert_intermediate_size > 0 and gated)
//   layers.{i}.router_choice_bias [num_experts]                              (router_choice_bias)
//   layers.{i}.router_bias [num_experts]                                            (router_bias)
//   layers.{i}.experts.{e}.gate_bias, up_bias [moe_intermediate]  down_bias [hidden] (expert_bias)
// q_proj / k_proj rows are in the order the config's rope_layout expects. The list grows with
// num_layers: as ParameterCount, build it only for a config the weights confirm.
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<WeightSpec> ExpectedWeights(const ModelConfig& config);

// Reads a Hugging Face config.json (`path` is the file). Supported model_type values:
//   llama, mistral   RopeLayout::kHalf
//   qwen2            + qkv_bias
//   qwen3            + qk_norm kBeforeRope, head_dim key
//   autoregressive_lm (AstrAI): the llama keys plus
//                      "qk_norm": bool            -> QkNorm::kAfterRope when true
//                      "gated_attention": bool    -> gated_attention (weights self_attn.gate_proj)
//                    and RopeLayout::kInterleaved (weights are stored in interleaved q/k order).
// rope_scaling {rope_type|type: linear|llama3|default, factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings} is read; other scaling types are an error. eos_token_id may be
// an int or a list; generation_config.json next to config.json adds its bos / eos ids. Errors name
// the file and the key. The dims are not yet checked against any weights: see ModelFile::Open.
StatusOr<ModelConfig> ConfigFromHfJson(const std::string& path);

// Reads GGUF metadata of general.architecture llama (also mistral), qwen2, qwen3. GGUF llama stores
// q/k rows permuted for interleaved RoPE (llama.cpp's converter), so llama -> kInterleaved; qwen2/3
// use NEOX order -> kHalf. vocab_size comes from token_embd.weight; tie_word_embeddings is true
// when output.weight is absent. A rope_freqs.weight tensor is accepted when it equals the llama3
// scaling of the Llama 3.x releases (low 1, high 4, original 8192), else it is an error. The
// other dims are not yet checked against the tensors: see ModelFile::Open.
StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& gguf);
// The key ConfigFromGguf reads for `rest` (e.g. "block_count"): "{arch}.rest", or "llama.rest" when
// only that one is present (architectures that reuse the llama keys). For errors about the value.
std::string GgufConfigKey(const GgufFile& gguf, const std::string& arch, const std::string& rest);

// HF config.json text for `config` (model_type = architecture). HF llama / mistral / qwen2 / qwen3
// folders mean RopeLayout::kHalf and autoregressive_lm kInterleaved; a config whose layout differs
// is an error (convert the q/k rows first).
StatusOr<std::string> ConfigToHfJson(const ModelConfig& config);
// generation_config.json text (bos / eos ids).
std::string GenerationConfigJson(const ModelConfig& config);
// Adds the {arch}.* and general.architecture keys of `config` (llama with kInterleaved, qwen2 /
// qwen3 with kHalf; linear rope scaling only). Tokenizer keys are the caller's.
Status AddGgufMetadata(const ModelConfig& config, GgufWriter* writer);

}  // namespace astr::model
