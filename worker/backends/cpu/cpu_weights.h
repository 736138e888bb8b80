// The CPU backend's weights: projections packed for the GEMM kernels (bf16 or f32), norms and
// biases in f32, the embedding table row-major for gathers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"
#include "kernels/cpu/gemm.h"

namespace astr {

namespace model {
class TensorSource;
}  // namespace model

struct CpuLayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> mlp_norm;   // [hidden]
  std::vector<float> q_norm;     // [head_dim] (qk_norm only)
  std::vector<float> k_norm;     // [head_dim] (qk_norm only)
  std::vector<float> qkv_bias;   // [qkv_rows] (qkv_bias only; zero over the gate rows)
  cpu::PackedMatrix qkv;      // rows: q [heads*hd], k [kv*hd], v [kv*hd], gate [heads*hd] (gated)
  cpu::PackedMatrix o;        // [hidden, heads*hd]
  cpu::PackedMatrix gate_up;  // rows: gate [ffn], up [ffn]
  cpu::PackedMatrix down;     // [hidden, ffn]
};

struct CpuWeights {
  cpu::WeightType type = cpu::WeightType::kBF16;
  std::vector<float> embed_f32;      // [vocab, hidden] when type == kF32
  std::vector<uint16_t> embed_bf16;  // [vocab, hidden] when type == kBF16
  std::vector<float> final_norm;     // [hidden]
  cpu::PackedMatrix lm_head;         // [vocab, hidden]
  std::vector<CpuLayerWeights> layers;

  // Copies embedding rows for `ids` into out [n, hidden].
  void GatherEmbeddings(const int32_t* ids, int64_t n, int64_t hidden, float* out) const;
  size_t bytes() const;
};

// Loads and packs every weight of `file` (conversion and packing run on `pool`); reports progress
// (LOG(INFO)) when `progress`.
StatusOr<CpuWeights> LoadCpuWeights(const model::TensorSource& file, cpu::WeightType type,
                                    cpu::ThreadPool* pool, bool progress);

}  // namespace astr
