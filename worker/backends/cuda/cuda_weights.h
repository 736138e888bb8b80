// The CUDA backend's weights on the device: projections as bf16 [n, k] row-major (the GEMM's w),
// with q/k/v(/gate) and gate/up stacked along n so each is one GEMM; norms and biases f32.
#pragma once

#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"
#include "kernels/cuda/kv_layout.h"
#include "worker/backends/cuda/device_memory.h"

namespace astr {
namespace model {
class TensorSource;
}  // namespace model
}  // namespace astr

namespace astr::cuda {

struct CudaLayerWeights {
  DeviceMemory attn_norm;  // [hidden] f32
  DeviceMemory mlp_norm;   // [hidden] f32
  DeviceMemory q_norm;     // [head_dim] f32 (qk_norm only)
  DeviceMemory k_norm;     // [head_dim] f32 (qk_norm only)
  DeviceMemory qkv_bias;   // [qkv_rows] f32 (qkv_bias only; zero over the gate rows)
  DeviceMemory qkv;        // [qkv_rows, hidden] bf16: q, k, v (, gate)
  DeviceMemory o;          // [hidden, heads*hd] bf16
  DeviceMemory gate_up;    // [2*ffn, hidden] bf16: gate, up
  DeviceMemory down;       // [hidden, ffn] bf16
};

struct CudaWeights {
  DeviceMemory embed;       // [vocab, hidden] bf16
  DeviceMemory lm_head;     // [vocab, hidden] bf16 (empty when tied: use embed)
  DeviceMemory final_norm;  // [hidden] f32
  DeviceMemory inv_freq;    // [rope_dim / 2] f32 RoPE inverse frequencies
  std::vector<CudaLayerWeights> layers;
  int64_t qkv_rows = 0;

  const bf16* lm_head_ptr() const {
    return lm_head.get() != nullptr ? lm_head.as<bf16>() : embed.as<bf16>();
  }
  size_t bytes() const;
};

// Reads, converts (to bf16 on the host) and uploads every weight; logs progress (INFO) when asked.
StatusOr<CudaWeights> LoadCudaWeights(const model::TensorSource& file, bool progress);

}  // namespace astr::cuda
