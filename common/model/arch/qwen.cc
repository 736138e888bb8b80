// Qwen2 / Qwen2.5 (biases on q, k, v), Qwen3 (per-head q/k RMSNorm before RoPE) and Qwen3-MoE
// (Qwen3's attention; mixture-of-experts MLPs: softmax router, top-k, norm_topk_prob, dense layers
// by decoder_sparse_step / mlp_only_layers). All keep HF's rotate_half q/k order in GGUF too.
#include "common/model/arch/llama_family.h"
#include "common/model/architecture.h"
#include "common/model/config_reader.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

Status ReadQwen2Hf(const ConfigJson& r, ModelConfig* c) {
  c->qkv_bias = true;
  return arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/true, c);
}

Status ReadQwen3Hf(const ConfigJson& r, ModelConfig* c) {
  c->qk_norm = QkNorm::kBeforeRope;
  return arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/true, c);
}

Status ReadQwen2Gguf(const GgufKeys&, ModelConfig* c) {
  c->qkv_bias = true;
  return OkStatus();
}

Status ReadQwen3Gguf(const GgufKeys&, ModelConfig* c) {
  c->qk_norm = QkNorm::kBeforeRope;
  return OkStatus();
}

// The MoE keys of Qwen3MoeConfig (transformers 5 writes num_experts as num_local_experts).
Status ReadQwen3MoeHf(const ConfigJson& r, ModelConfig* c) {
  ASTR_RETURN_IF_ERROR(ReadQwen3Hf(r, c));
  const std::string experts_key = r.Has("num_experts") ? "num_experts" : "num_local_experts";
  ASTR_ASSIGN_OR_RETURN(c->num_experts, r.Int(experts_key));
  if (c->num_experts <= 0) return r.Error(experts_key, "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, r.Int("num_experts_per_tok"));
  ASTR_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.Int("moe_intermediate_size"));
  // Qwen3MoeConfig's defaults: norm_topk_prob false, decoder_sparse_step 1, no mlp_only_layers.
  ASTR_ASSIGN_OR_RETURN(c->norm_topk_prob, r.Bool("norm_topk_prob", false));
  ASTR_ASSIGN_OR_RETURN(c->moe_layer_step, r.Int("decoder_sparse_step", 1));
  if (r.Has("mlp_only_layers")) {
    const nlohmann::json& m = r.raw()["mlp_only_layers"];
    if (!m.is_array()) return r.Error("mlp_only_layers", "must be a list of layer indices");
    for (const nlohmann::json& l : m) {
      if (!l.is_number_integer()) {
        return r.Error("mlp_only_layers", "must be a list of layer indices, got " + m.dump());
      }
      c->dense_layers.push_back(l.get<int64_t>());
    }
  }
  for (const char* key : {"shared_expert_intermediate_size", "num_shared_experts"}) {
    if (r.Has(key)) return r.Unsupported(key, "(shared experts) is not supported for qwen3_moe");
  }
  return OkStatus();
}

// llama.cpp's qwen3moe: every layer MoE, top-k weights always renormalized.
Status ReadQwen3MoeGguf(const GgufKeys& k, ModelConfig* c) {
  c->qk_norm = QkNorm::kBeforeRope;
  ASTR_ASSIGN_OR_RETURN(c->num_experts, k.Int("expert_count"));
  if (c->num_experts <= 0) return k.Error("expert_count", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, k.Int("expert_used_count"));
  ASTR_ASSIGN_OR_RETURN(c->moe_intermediate_size, k.Int("expert_feed_forward_length"));
  c->norm_topk_prob = true;
  return OkStatus();
}

Status WriteQwen2Hf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(arch::CheckPlainLlamaFeatures(c, "qwen2", true, QkNorm::kNone));
  arch::WriteLlamaFamilyHf(c, j);
  (*j)["use_sliding_window"] = false;
  return OkStatus();
}

Status WriteQwen3Hf(const ModelConfig& c, nlohmann::json* j) {
  ASTR_RETURN_IF_ERROR(arch::CheckPlainLlamaFeatures(c, "qwen3", false, QkNorm::kBeforeRope));
  arch::WriteLlamaFamilyHf(c, j);
  return OkStatus();
}

Status WriteQwen3MoeHf(const ModelConfig& c, nlohmann::json* j) {
  ModelConfig dense = c;
  dense.num_experts = 0;
  ASTR_RETURN_IF_ERROR(
      arch::CheckPlainLlamaFeatures(dense, "qwen3_moe", false, QkNorm::kBeforeRope));
  arch::WriteLlamaFamilyHf(c, j);
  (*j)["num_experts"] = c.num_experts;
  (*j)["num_experts_per_tok"] = c.num_experts_per_tok;
  (*j)["moe_intermediate_size"] = c.moe_intermediate_size;
  (*j)["norm_topk_prob"] = c.norm_topk_prob;
  (*j)["decoder_sparse_step"] = c.moe_layer_step;
  (*j)["mlp_only_layers"] = c.dense_layers;
  return OkStatus();
}

Status WriteQwenGguf(const ModelConfig& c, GgufWriter*);

Status WriteQwen3MoeGguf(const ModelConfig& c, GgufWriter* w) {
  if (c.HasDenseLayers() || !c.norm_topk_prob) {
    return InvalidArgumentError(
        "GGUF qwen3moe has every layer MoE with renormalized top-k weights (norm_topk_prob)");
  }
  ASTR_RETURN_IF_ERROR(WriteQwenGguf(c, w));
  const std::string a = "qwen3moe.";
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  w->AddMetadata(a + "expert_count", u32(c.num_experts));
  w->AddMetadata(a + "expert_used_count", u32(c.num_experts_per_tok));
  w->AddMetadata(a + "expert_feed_forward_length", u32(c.moe_intermediate_size));
  return OkStatus();
}

Status WriteQwenGguf(const ModelConfig& c, GgufWriter*) {
  if (c.rope_layout != RopeLayout::kHalf) {
    return InvalidArgumentError("GGUF " + c.architecture + " stores q/k rows in half RoPE order");
  }
  return OkStatus();
}

}  // namespace

extern const Architecture kQwen2Architecture{.name = "qwen2",
                                             .hf_model_types = {"qwen2"},
                                             .gguf_names = {"qwen2"},
                                             .read_hf = ReadQwen2Hf,
                                             .read_gguf = ReadQwen2Gguf,
                                             .write_hf = WriteQwen2Hf,
                                             .write_gguf = WriteQwenGguf};
extern const Architecture kQwen3Architecture{.name = "qwen3",
                                             .hf_model_types = {"qwen3"},
                                             .gguf_names = {"qwen3"},
                                             .read_hf = ReadQwen3Hf,
                                             .read_gguf = ReadQwen3Gguf,
                                             .write_hf = WriteQwen3Hf,
                                             .write_gguf = WriteQwenGguf};
extern const Architecture kQwen3MoeArchitecture{.name = "qwen3_moe",
                                                .hf_model_types = {"qwen3_moe"},
                                                .gguf_names = {"qwen3moe"},
                                                .moe = true,
                                                .read_hf = ReadQwen3MoeHf,
                                                .read_gguf = ReadQwen3MoeGguf,
                                                .write_hf = WriteQwen3MoeHf,
                                                .write_gguf = WriteQwen3MoeGguf};

}  // namespace astr::model
