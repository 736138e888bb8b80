// The CPU backend's weights: projections packed for the GEMM kernels (bf16 or f32, or kept in
// their block-quantized form), norms and biases in f32, the embedding table row-major for
// gathers (or, tied, the output projection's rows unpacked).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"
#include "common/model/tensor_dtype.h"
#include "kernels/cpu/gemm.h"

namespace astr {

namespace model {
class TensorSource;
}  // namespace model

// A linear layer whose weight is several tensors stacked along the outputs (q, k, v; gate, up).
// Consecutive tensors that pack alike share one PackedMatrix; a GGUF file's mixed types (a Q4_K
// q_proj next to a Q6_K v_proj) get one matrix each, written side by side into y's columns.
struct CpuLinear {
  std::vector<cpu::PackedMatrix> parts;
  int64_t n() const;  // outputs, all parts
  size_t bytes() const;
  // y[m, n] = x[m, k] . Wt, part by part.
  void Apply(const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy,
             cpu::ThreadPool* pool) const;
};

struct CpuLayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> mlp_norm;   // [hidden]
  std::vector<float> post_attn_norm;  // [hidden] (sandwich_norms only)
  std::vector<float> post_mlp_norm;   // [hidden] (sandwich_norms only)
  std::vector<float> q_norm;     // [head_dim] (qk_norm only)
  std::vector<float> k_norm;     // [head_dim] (qk_norm only)
  std::vector<float> qkv_bias;   // [qkv_rows] (qkv_bias only; zero over the gate rows)
  std::vector<float> o_bias;     // [hidden] (o_bias only)
  std::vector<float> attn_sinks;  // [heads] (attn_sinks only)
  CpuLinear qkv;      // rows: q [heads*hd], k [kv*hd], v [kv*hd], gate [heads*hd] (gated)
  CpuLinear o;        // [hidden, heads*hd]
  CpuLinear gate_up;  // rows: gate [ffn], up [ffn]
  CpuLinear down;     // [hidden, ffn]
  // A MoE layer (ModelConfig::LayerIsMoe) holds these instead of gate_up / down: the router
  // [experts, hidden], always f32 (the experts a token picks should not hinge on a rounding), and
  // each expert's gate/up [2 * moe_ffn, hidden] and down [hidden, moe_ffn].
  CpuLinear router;
  std::vector<CpuLinear> expert_gate_up;
  std::vector<CpuLinear> expert_down;
  // gpt-oss: the router's bias [experts] and each expert's gate/up bias [2 * moe_ffn] and down
  // bias [hidden] (router_bias, expert_bias).
  std::vector<float> router_bias;
  // GLM-4.5 / DeepSeek-V3: the bias the choice of experts adds to their scores [experts].
  std::vector<float> router_choice_bias;
  std::vector<std::vector<float>> expert_gate_up_bias;
  std::vector<std::vector<float>> expert_down_bias;
  // The shared expert: gate/up [2 * shared, hidden], down [hidden, shared], and (Qwen2-MoE's,
  // gated) its gate [hidden] f32 (one row).
  CpuLinear shared_gate_up;
  CpuLinear shared_down;
  std::vector<float> shared_gate;
};

struct CpuWeights {
  // How float (F32 / F16 / BF16) projections are held; with kF32 block-quantized tensors are
  // dequantized to f32 too, with kBF16 they keep their quantized form.
  cpu::WeightType type = cpu::WeightType::kBF16;
  std::vector<float> embed_f32;      // [vocab, hidden] when type == kF32
  std::vector<uint16_t> embed_bf16;  // [vocab, hidden] when kBF16 and the file's table is float
  std::vector<uint8_t> embed_quant;  // the file's block-quantized rows, when it has them (kBF16)
  model::DType embed_quant_dtype = model::DType::kF32;
  // Tied embeddings held once: rows are gathered from lm_head's one packed matrix (which unpacks
  // to the file's values, or to their bf16 rounding), and embed_bf16 / embed_quant stay empty.
  bool embed_from_head = false;
  std::vector<float> final_norm;     // [hidden]
  CpuLinear lm_head;                 // [vocab, hidden]
  std::vector<CpuLayerWeights> layers;

  // Copies embedding rows for `ids` into out [n, hidden].
  void GatherEmbeddings(const int32_t* ids, int64_t n, int64_t hidden, float* out) const;
  size_t bytes() const;
  size_t expert_bytes() const;  // MoE layers' experts (part of bytes())
  size_t embed_table_bytes() const;  // the gathered embedding table (part of bytes(); 0 when tied)
};

// Loads and packs every weight of `file` (conversion and packing run on `pool`); reports progress
// (LOG(INFO)) when `progress`. Each tensor's mapped pages are handed back to the system once it is
// packed (TensorSource::ReleaseResident), so the mapping does not stay resident next to the copy.
// Float projections are packed into the storage of `reuse`'s (a set of the same model no longer
// served; may be null) where the layouts match: no fresh pages to fault in.
StatusOr<CpuWeights> LoadCpuWeights(const model::TensorSource& file, cpu::WeightType type,
                                    cpu::ThreadPool* pool, bool progress,
                                    CpuWeights* reuse = nullptr);

// The weights in the groups that are built together: a linear layer's stacked tensors (q, k, v
// [, gate]; gate, up), one vector (a norm; the three qkv biases), the embedding table (with the
// output projection when they are tied). A weight update builds each group as soon as its
// tensors have arrived (CpuWeightBuilder).
struct CpuWeightGroup {
  enum class Kind {
    kEmbed,
    kLmHead,
    kFinalNorm,
    kAttnNorm,
    kMlpNorm,
    kPostAttnNorm,
    kPostMlpNorm,
    kQNorm,
    kKNorm,
    kQkvBias,
    kQkv,
    kO,
    kGateUp,
    kDown,
    kRouter,
    kExpertGateUp,
    kExpertDown,
    kSharedGateUp,
    kSharedDown,
    kSharedGate,
    kOBias,
    kSinks,
    kRouterBias,
    kExpertGateUpBias,
    kExpertDownBias,
    kRouterChoiceBias
  };
  Kind kind = Kind::kEmbed;
  int64_t layer = -1;
  std::vector<std::string> tensors;  // canonical names, in stacking order
  bool tied_head = false;            // kEmbed: lm_head is built from the table too
  int64_t expert = -1;               // kExpertGateUp / kExpertDown and their biases
};
// Every group of a model, in LoadCpuWeights' order.
std::vector<CpuWeightGroup> CpuWeightGroups(const model::ModelConfig& config);
// A set with no group built yet (one empty layer per layer).
CpuWeights EmptyCpuWeights(const model::ModelConfig& config, cpu::WeightType type);
// Builds group `g` of `w` from `source` as LoadCpuWeights does (storage from `reuse`, may be
// null).
Status LoadCpuWeightGroup(const model::TensorSource& source, const CpuWeightGroup& g,
                          cpu::WeightType type, cpu::ThreadPool* pool, CpuWeights* w,
                          CpuWeights* reuse);
// Copies group `g` from `from` into `w` (storage from `reuse`, may be null): the same bytes.
void CopyCpuWeightGroup(const CpuWeightGroup& g, const CpuWeights& from, CpuWeights* w,
                        CpuWeights* reuse);
// Norm weights are held with the config's norm_weight_offset added (the scale they apply).
// Tensor `canonical` (one of group `g`'s) as `w` holds it, in f32, when it is held as floats
// (packed kF32 / kBF16 values are exact); false when it is kept block-quantized (read it from its
// file).
bool UnpackCpuTensor(const model::ModelConfig& config, const CpuWeights& w, const CpuWeightGroup& g,
                     const std::string& canonical, std::vector<float>* out);

}  // namespace astr
