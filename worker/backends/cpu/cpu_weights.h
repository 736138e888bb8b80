// The CPU backend's weights: projections packed for the GEMM kernels (bf16 or f32, or kept in
// their block-quantized form), norms and biases in f32, the embedding table row-major for
// gathers.
#pragma once

#include <cstdint>
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
  std::vector<float> q_norm;     // [head_dim] (qk_norm only)
  std::vector<float> k_norm;     // [head_dim] (qk_norm only)
  std::vector<float> qkv_bias;   // [qkv_rows] (qkv_bias only; zero over the gate rows)
  CpuLinear qkv;      // rows: q [heads*hd], k [kv*hd], v [kv*hd], gate [heads*hd] (gated)
  CpuLinear o;        // [hidden, heads*hd]
  CpuLinear gate_up;  // rows: gate [ffn], up [ffn]
  CpuLinear down;     // [hidden, ffn]
};

struct CpuWeights {
  // How float (F32 / F16 / BF16) projections are held; with kF32 block-quantized tensors are
  // dequantized to f32 too, with kBF16 they keep their quantized form.
  cpu::WeightType type = cpu::WeightType::kBF16;
  std::vector<float> embed_f32;      // [vocab, hidden] when type == kF32
  std::vector<uint16_t> embed_bf16;  // [vocab, hidden] when kBF16 and the file's table is float
  std::vector<uint8_t> embed_quant;  // the file's block-quantized rows, when it has them (kBF16)
  model::DType embed_quant_dtype = model::DType::kF32;
  std::vector<float> final_norm;     // [hidden]
  CpuLinear lm_head;                 // [vocab, hidden]
  std::vector<CpuLayerWeights> layers;

  // Copies embedding rows for `ids` into out [n, hidden].
  void GatherEmbeddings(const int32_t* ids, int64_t n, int64_t hidden, float* out) const;
  size_t bytes() const;
};

// Loads and packs every weight of `file` (conversion and packing run on `pool`); reports progress
// (LOG(INFO)) when `progress`. Each tensor's mapped pages are handed back to the system once it is
// packed (TensorSource::ReleaseResident), so the mapping does not stay resident next to the copy.
StatusOr<CpuWeights> LoadCpuWeights(const model::TensorSource& file, cpu::WeightType type,
                                    cpu::ThreadPool* pool, bool progress);

}  // namespace astr
