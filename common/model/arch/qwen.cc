// Qwen2 / Qwen2.5 (biases on q, k, v) and Qwen3 (per-head q/k RMSNorm before RoPE). Both keep HF's
// rotate_half q/k order in GGUF too.
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

}  // namespace astr::model
