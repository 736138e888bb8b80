// Elementwise and row-wise ops of the decoder forward pass (model_config.h) on the GPU. The
// residual stream is f32; GEMM inputs and attention operands are bf16; every reduction accumulates
// in f32. Each function enqueues on `stream`, allocates nothing and returns the launch error
// (cudaErrorInvalidValue for arguments it cannot handle; num_tokens == 0 launches nothing).
// Rows are moved in 16-byte pieces where the pointers, the row lengths and the strides allow it,
// element by element otherwise: any shape works, aligned ones are faster.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kv_layout.h"

namespace astr::cuda {

// out[t, :] = table[ids[t], :] as f32, times `scale` (Gemma's sqrt(hidden); 1 for most models).
// table: [vocab, hidden] bf16; out: [T, hidden] f32. The f32 product, as the CPU backend's.
cudaError_t LaunchEmbeddingGather(const bf16* table, const int32_t* ids, int num_tokens, int hidden,
                                  float scale, float* out, cudaStream_t stream);

// Fused residual add + RMSNorm, row by row:
//   if delta: x[t] += delta[t]        (x: [T, hidden] f32 residual stream, updated in place)
//   out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight   (weight [hidden] f32; out [T, hidden] bf16)
// Mirrors cpu::AddRmsNorm / cpu::RmsNorm: x + delta is the same f32 add (bit-exact); the sum of
// squares is reduced in f32 in another order, 1 / sqrt(ss / hidden + eps) is taken in double as the
// CPU does, then out = bf16(x * inv * weight). delta == nullptr: plain RMSNorm (x unchanged).
cudaError_t LaunchAddRmsNorm(float* x, const float* delta, const float* weight, float eps,
                             int num_tokens, int hidden, bf16* out, cudaStream_t stream);

// RMSNorm of f32 rows in place (Gemma's sandwich norms on the attention / MLP outputs):
// rows[t] = rows[t] / sqrt(mean(rows[t]^2) + eps) * weight, rows [T, hidden] f32, weight [hidden]
// f32; the same arithmetic as LaunchAddRmsNorm and cpu::RmsNorm, kept in f32.
cudaError_t LaunchRmsNormRows(float* rows, const float* weight, float eps, int num_tokens,
                              int hidden, cudaStream_t stream);

// x[i] = cap * tanh(x[i] / cap) for i < n, f32 in place (Gemma 2's final logit soft-capping), with
// CUDA's accurate tanhf, as the CPU backend's std::tanh on float.
cudaError_t LaunchSoftcap(float* x, int64_t n, float cap, cudaStream_t stream);

// RMSNorm of each head_dim slice in place (Qwen3 / AstrAI q/k norm): rows [T] with row stride
// `stride` elements, `heads` slices of head_dim per row, weight [head_dim] f32. f32 math, same
// formula as cpu::RmsNorm on each slice.
cudaError_t LaunchHeadRmsNorm(bf16* rows, int64_t stride, int num_tokens, int heads, int head_dim,
                              const float* weight, float eps, cudaStream_t stream);

// Rotary embedding in place on `heads` heads of each row (row stride `stride` elements), the first
// rope_dim dims of each head rotated by positions[t] * inv_freq[i] (inv_freq [rope_dim/2] f32).
// interleaved: pairs (2i, 2i+1) (GPT-J / AstrAI); else halves (i, i + rope_dim/2) (NeoX / LLaMA
// HF). As cpu::Rope: angle = double(pos) * double(inv_freq[i]) and cos/sin in double, rounded to
// f32 (an f32 angle at pos ~1e5 would be off by ~1e-2 rad); the rotation in f32 without FMA
// contraction. Needs rope_dim even, 0 < rope_dim <= head_dim, rope_dim <= 2 * kMaxRopePairs.
// `more` (LongRoPE), as cpu::RopeMore: cos / sin times more.scale (in f32), and tokens with
// more.use_long[t] != 0 (device [num_tokens]) take more.inv_freq_long (device [rope_dim/2]).
inline constexpr int kMaxRopePairs = 256;
struct RopeMore {
  float scale = 1.0f;
  const float* inv_freq_long = nullptr;
  const int32_t* use_long = nullptr;
};
cudaError_t LaunchRope(bf16* rows, int64_t stride, int num_tokens, int heads, int head_dim,
                       int rope_dim, const int32_t* positions, const float* inv_freq,
                       bool interleaved, cudaStream_t stream, const RopeMore& more = {});

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, ffn + i]; gate_up [T, 2*ffn] bf16, out [T, ffn]
// bf16. f32 math as cpu::SiluMul: g / (1 + expf(-g)) * up (CUDA's accurate expf, not __expf).
cudaError_t LaunchSiluMul(const bf16* gate_up, int num_tokens, int ffn, bf16* out,
                          cudaStream_t stream);
// out[t, i] = gelu_tanh(gate_up[t, i]) * gate_up[t, ffn + i] (GeGLU), f32 math as
// cpu::GeluTanhMul: g / (1 + expf(-2k (g + 0.044715 g^3))) * up, k = sqrt(2 / pi).
cudaError_t LaunchGeluTanhMul(const bf16* gate_up, int num_tokens, int ffn, bf16* out,
                              cudaStream_t stream);

// gpt-oss's clamped SwiGLU, f32 math as cpu::SwigluClampedMul: g = min(gate, limit), u =
// clamp(up, -limit, limit), out = (u + 1) * g / (1 + expf(-alpha g)); limit > 0.
cudaError_t LaunchSwigluClampedMul(const bf16* gate_up, int num_tokens, int ffn, float alpha,
                                   float limit, bf16* out, cudaStream_t stream);

// rows[t, i] += bias[i] for i < cols; rows [T, cols] f32 with row stride `stride`; bias f32.
cudaError_t LaunchAddBiasF32(float* rows, int64_t stride, int num_tokens, int cols,
                             const float* bias, cudaStream_t stream);

// rows[t, i] += bias[i] for i < cols; rows [T, cols] bf16 with row stride `stride`; bias f32.
// The add is in f32 (as the CPU backend's AddInPlace on its f32 rows), then rounded to bf16.
cudaError_t LaunchAddBias(bf16* rows, int64_t stride, int num_tokens, int cols, const float* bias,
                          cudaStream_t stream);

// Gated attention: attn[t, i] *= sigmoid(gate[t, i]); attn [T, cols] (stride attn_stride), gate
// [T, cols] (stride gate_stride). attn * (1 / (1 + expf(-gate))) in f32, as the CPU backend.
cudaError_t LaunchSigmoidGate(bf16* attn, int64_t attn_stride, const bf16* gate,
                              int64_t gate_stride, int num_tokens, int cols, cudaStream_t stream);

// out[i, :] = in[rows[i], :] for i < num_rows; bf16 [*, cols] both (the final-normed sample rows
// gathered for the LM head). rows[i] < 0 writes zeros (padding).
cudaError_t LaunchGatherRows(const bf16* in, int64_t in_stride, const int32_t* rows, int num_rows,
                             int cols, bf16* out, int64_t out_stride, cudaStream_t stream);

}  // namespace astr::cuda
