// The CUDA backend's weights on the device: projections as bf16 [n, k] row-major (the GEMM's w),
// with q/k/v(/gate) and gate/up stacked along n so each is one GEMM; norms and biases f32.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"
#include "kernels/cuda/kv_layout.h"
#include "worker/backends/cuda/device_memory.h"
#include "worker/backends/cuda/releasable_memory.h"

namespace astr {
namespace model {
class TensorSource;
}  // namespace model
}  // namespace astr

namespace astr::cuda {

struct CudaLayerWeights {
  DeviceMemory attn_norm;  // [hidden] f32
  DeviceMemory mlp_norm;   // [hidden] f32
  DeviceMemory post_attn_norm;  // [hidden] f32 (sandwich_norms only)
  DeviceMemory post_mlp_norm;   // [hidden] f32 (sandwich_norms only)
  DeviceMemory q_norm;     // [head_dim] f32 (qk_norm only)
  DeviceMemory k_norm;     // [head_dim] f32 (qk_norm only)
  DeviceMemory qkv_bias;   // [qkv_rows] f32 (qkv_bias only; zero over the gate rows)
  DeviceMemory o_bias;     // [hidden] f32 (o_bias only)
  DeviceMemory attn_sinks;  // [heads] f32 (attn_sinks only)
  DeviceMemory qkv;        // [qkv_rows, hidden] bf16: q, k, v (, gate)
  DeviceMemory o;          // [hidden, heads*hd] bf16
  DeviceMemory gate_up;    // [2*ffn, hidden] bf16: gate, up
  DeviceMemory down;       // [hidden, ffn] bf16
  // A MoE layer's (ModelConfig::LayerIsMoe) instead of gate_up / down: the router and every
  // expert's weights, expert e at e * its size.
  DeviceMemory router;           // [experts, hidden] bf16
  DeviceMemory experts_gate_up;  // [experts][2 * moe_ffn, hidden] bf16: each expert's gate, up
  DeviceMemory experts_down;     // [experts][hidden, moe_ffn] bf16
  // gpt-oss: the router's bias [experts] and the experts' biases [experts][2 * moe_ffn] (gate,
  // up) and [experts][hidden], f32 (router_bias, expert_bias).
  DeviceMemory router_bias;
  DeviceMemory router_choice_bias;  // [experts] f32 (router_choice_bias: GLM-4.5)
  DeviceMemory experts_gate_up_bias;
  DeviceMemory experts_down_bias;
  // Qwen2-MoE's shared expert: gate/up [2 * shared, hidden], down [hidden, shared], gate [hidden].
  DeviceMemory shared_gate_up;
  DeviceMemory shared_down;
  DeviceMemory shared_gate;
};

struct CudaWeights;

// Which device buffer of a CudaWeights a converted tensor belongs in: a model-wide member, or a
// member of one layer.
struct WeightSlot {
  DeviceMemory CudaWeights::*model = nullptr;       // set for a model-wide buffer
  int64_t layer = -1;                               // set with `field`
  DeviceMemory CudaLayerWeights::*field = nullptr;  // set for a layer's buffer
};

struct CudaWeights {
  DeviceMemory embed;       // [vocab, hidden] bf16
  DeviceMemory lm_head;     // [vocab, hidden] bf16 (empty when tied: use embed)
  DeviceMemory final_norm;  // [hidden] f32
  DeviceMemory inv_freq;    // [rope_dim / 2] f32 RoPE inverse frequencies (from the config)
  DeviceMemory inv_freq_local;  // the sliding-window layers' (LayerUsesLocalRope), or empty
  DeviceMemory inv_freq_long;   // LongRoPE's long factors (RopeInvFreqLong), or empty
  std::vector<CudaLayerWeights> layers;
  int64_t qkv_rows = 0;

  const bf16* lm_head_ptr() const {
    return lm_head.get() != nullptr ? lm_head.as<bf16>() : embed.as<bf16>();
  }
  size_t bytes() const;
  DeviceMemory& at(const WeightSlot& slot);
  const DeviceMemory& at(const WeightSlot& slot) const;
};

// One converted device buffer: its bytes on the host, exactly as the device holds them; `what`
// names it in messages.
using ConvertedBuffer = std::function<Status(const WeightSlot& slot, const std::string& what,
                                             std::span<const uint8_t> host)>;

// The one conversion path of the CUDA weights. Reads every tensor of `source` with the shapes
// `config` gives (the served model's, for a weight update), converts it on the host into its
// buffer's device layout (bf16 projections, q/k/v(/gate) and gate/up stacked, f32 norms and qkv
// bias) and hands each buffer to `put`, once per buffer of the weights. Everything but inv_freq
// (which the config determines). Logs progress (INFO) under `progress` unless it is empty.
Status ConvertCudaWeights(const model::TensorSource& source, const model::ModelConfig& config,
                          const std::string& progress, const ConvertedBuffer& put);

// Converts (ConvertCudaWeights) and uploads every weight; logs progress (INFO) when asked. With an
// arena the buffers are pieces of it (releasable), else cudaMalloc'ed one by one.
StatusOr<CudaWeights> LoadCudaWeights(const model::TensorSource& file, bool progress,
                                      ReleasableArena* arena = nullptr);

}  // namespace astr::cuda
