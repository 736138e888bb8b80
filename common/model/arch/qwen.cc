// Qwen2 / Qwen2.5 (biases on q, k, v), Qwen3 (per-head q/k RMSNorm before RoPE), Qwen3-MoE
// (Qwen3's attention; mixture-of-experts MLPs: softmax router, top-k, norm_topk_prob, dense layers
// by decoder_sparse_step / mlp_only_layers) and Qwen2-MoE (Qwen2's attention, the same experts and
// a shared expert scaled by a sigmoid gate). All keep HF's rotate_half q/k order in GGUF too.
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

// The MoE keys of Qwen3MoeConfig and Qwen2MoeConfig (transformers 5 writes num_experts as
// num_local_experts); `shared`: Qwen2-MoE's shared expert (shared_expert_intermediate_size).
Status ReadQwenMoeHf(const ConfigJson& r, bool shared, ModelConfig* c) {
  const std::string experts_key = r.Has("num_experts") ? "num_experts" : "num_local_experts";
  ASTR_ASSIGN_OR_RETURN(c->num_experts, r.Int(experts_key));
  if (c->num_experts <= 0) return r.Error(experts_key, "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, r.Int("num_experts_per_tok"));
  ASTR_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.Int("moe_intermediate_size"));
  // The config classes' defaults: norm_topk_prob false, decoder_sparse_step 1, no mlp_only_layers.
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
  if (shared) {
    ASTR_ASSIGN_OR_RETURN(c->shared_expert_intermediate_size,
                          r.Int("shared_expert_intermediate_size"));
    if (c->shared_expert_intermediate_size <= 0) {
      return r.Error("shared_expert_intermediate_size", "must be positive");
    }
  } else {
    for (const char* key : {"shared_expert_intermediate_size", "num_shared_experts"}) {
      if (r.Has(key)) return r.Unsupported(key, "(shared experts) is not supported here");
    }
  }
  return OkStatus();
}

Status ReadQwen3MoeHf(const ConfigJson& r, ModelConfig* c) {
  ASTR_RETURN_IF_ERROR(ReadQwen3Hf(r, c));
  return ReadQwenMoeHf(r, /*shared=*/false, c);
}

// Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (q/k/v biases, as qkv_bias says),
// experts and a gated shared expert.
Status ReadQwen2MoeHf(const ConfigJson& r, ModelConfig* c) {
  ASTR_ASSIGN_OR_RETURN(c->qkv_bias, r.Bool("qkv_bias", true));
  ASTR_RETURN_IF_ERROR(arch::ReadLlamaFamilyHf(r, /*use_sliding_window_key=*/true, c));
  return ReadQwenMoeHf(r, /*shared=*/true, c);
}

// llama.cpp's {arch}.expert_count, expert_used_count, expert_feed_forward_length and, with
// `shared`, expert_shared_feed_forward_length.
Status ReadQwenMoeGguf(const GgufKeys& k, bool shared, ModelConfig* c) {
  ASTR_ASSIGN_OR_RETURN(c->num_experts, k.Int("expert_count"));
  if (c->num_experts <= 0) return k.Error("expert_count", "must be positive");
  ASTR_ASSIGN_OR_RETURN(c->num_experts_per_tok, k.Int("expert_used_count"));
  ASTR_ASSIGN_OR_RETURN(c->moe_intermediate_size, k.Int("expert_feed_forward_length"));
  if (!shared) return OkStatus();
  ASTR_ASSIGN_OR_RETURN(c->shared_expert_intermediate_size,
                        k.Int("expert_shared_feed_forward_length"));
  if (c->shared_expert_intermediate_size <= 0) {
    return k.Error("expert_shared_feed_forward_length", "must be positive");
  }
  return OkStatus();
}

// llama.cpp's qwen2moe: every layer MoE with a shared expert, top-k weights as the softmax gives
// them (Qwen1.5-MoE's norm_topk_prob false).
Status ReadQwen2MoeGguf(const GgufKeys& k, ModelConfig* c) {
  c->qkv_bias = true;
  c->norm_topk_prob = false;
  return ReadQwenMoeGguf(k, /*shared=*/true, c);
}

// llama.cpp's qwen3moe: every layer MoE, top-k weights always renormalized.
Status ReadQwen3MoeGguf(const GgufKeys& k, ModelConfig* c) {
  c->qk_norm = QkNorm::kBeforeRope;
  c->norm_topk_prob = true;
  return ReadQwenMoeGguf(k, /*shared=*/false, c);
}

// The MoE keys of Qwen3MoeConfig / Qwen2MoeConfig (the shared expert's when there is one).
void WriteQwenMoeHf(const ModelConfig& c, nlohmann::json* j) {
  (*j)["num_experts"] = c.num_experts;
  (*j)["num_experts_per_tok"] = c.num_experts_per_tok;
  (*j)["moe_intermediate_size"] = c.moe_intermediate_size;
  if (c.shared_expert_intermediate_size > 0) {
    (*j)["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  }
  (*j)["norm_topk_prob"] = c.norm_topk_prob;
  (*j)["decoder_sparse_step"] = c.moe_layer_step;
  (*j)["mlp_only_layers"] = c.dense_layers;
}

// Their GGUF keys ({arch}.expert_*).
void WriteQwenMoeGguf(const ModelConfig& c, const std::string& arch, GgufWriter* w) {
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  w->AddMetadata(arch + ".expert_count", u32(c.num_experts));
  w->AddMetadata(arch + ".expert_used_count", u32(c.num_experts_per_tok));
  w->AddMetadata(arch + ".expert_feed_forward_length", u32(c.moe_intermediate_size));
  if (c.shared_expert_intermediate_size > 0) {
    w->AddMetadata(arch + ".expert_shared_feed_forward_length",
                   u32(c.shared_expert_intermediate_size));
  }
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
  WriteQwenMoeHf(c, j);
  return OkStatus();
}

Status WriteQwenGguf(const ModelConfig& c, GgufWriter*);

Status WriteQwen2MoeHf(const ModelConfig& c, nlohmann::json* j) {
  ModelConfig dense = c;
  dense.num_experts = 0;
  ASTR_RETURN_IF_ERROR(
      arch::CheckPlainLlamaFeatures(dense, "qwen2_moe", c.qkv_bias, QkNorm::kNone));
  if (c.shared_expert_intermediate_size <= 0) {
    return InvalidArgumentError("HF qwen2_moe has a shared expert");
  }
  arch::WriteLlamaFamilyHf(c, j);
  (*j)["use_sliding_window"] = false;
  (*j)["qkv_bias"] = c.qkv_bias;
  WriteQwenMoeHf(c, j);
  return OkStatus();
}

Status WriteQwen2MoeGguf(const ModelConfig& c, GgufWriter* w) {
  if (c.HasDenseLayers() || c.norm_topk_prob || !c.qkv_bias ||
      c.shared_expert_intermediate_size <= 0) {
    return InvalidArgumentError(
        "GGUF qwen2moe has every layer MoE with a shared expert, q/k/v biases and the top-k "
        "weights as the softmax gives them");
  }
  ASTR_RETURN_IF_ERROR(WriteQwenGguf(c, w));
  WriteQwenMoeGguf(c, "qwen2moe", w);
  return OkStatus();
}

Status WriteQwen3MoeGguf(const ModelConfig& c, GgufWriter* w) {
  if (c.HasDenseLayers() || !c.norm_topk_prob) {
    return InvalidArgumentError(
        "GGUF qwen3moe has every layer MoE with renormalized top-k weights (norm_topk_prob)");
  }
  ASTR_RETURN_IF_ERROR(WriteQwenGguf(c, w));
  WriteQwenMoeGguf(c, "qwen3moe", w);
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
extern const Architecture kQwen2MoeArchitecture{.name = "qwen2_moe",
                                                .hf_model_types = {"qwen2_moe"},
                                                .gguf_names = {"qwen2moe"},
                                                .moe = true,
                                                .read_hf = ReadQwen2MoeHf,
                                                .read_gguf = ReadQwen2MoeGguf,
                                                .write_hf = WriteQwen2MoeHf,
                                                .write_gguf = WriteQwen2MoeGguf};
extern const Architecture kQwen3MoeArchitecture{.name = "qwen3_moe",
                                                .hf_model_types = {"qwen3_moe"},
                                                .gguf_names = {"qwen3moe"},
                                                .moe = true,
                                                .read_hf = ReadQwen3MoeHf,
                                                .read_gguf = ReadQwen3MoeGguf,
                                                .write_hf = WriteQwen3MoeHf,
                                                .write_gguf = WriteQwen3MoeGguf};

}  // namespace astr::model
