// Element-wise and row ops of the forward pass. Each op dispatches on ActiveIsa(); the ...Isa
// variants force one path (tests, benchmarks) and take any of AvailableIsas() (kAvx512Bf16 runs the
// kAvx512 code). Every op is deterministic per row: a row's result never depends on the other rows.
#pragma once

#include <cstdint>

#include "kernels/common/moe_route.h"
#include "kernels/cpu/cpu_features.h"

namespace astr::cpu {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for r < rows. y may alias x.
void RmsNorm(const float* x /*[rows, ldx]*/, int64_t ldx, const float* w /*[dim]*/, float eps,
             int64_t rows, int64_t dim, float* y /*[rows, ldy]*/, int64_t ldy);
// x[r] += d[r], then y[r] = RmsNorm(x[r]): the residual add fused with the next norm. y may alias
// x.
void AddRmsNorm(float* x /*[rows, ldx]*/, int64_t ldx, const float* d /*[rows, ldd]*/, int64_t ldd,
                const float* w /*[dim]*/, float eps, int64_t rows, int64_t dim,
                float* y /*[rows, ldy]*/, int64_t ldy);
// Rotary embedding in place on the first rot_dim dims of each head. angle = positions[t] *
// inv_freq[i] (inv_freq already includes any scaling); cos/sin are computed in double, so results
// match a double reference to ~1e-6 relative even for positions ~1e5. interleaved=false rotates
// pairs (i, i + rot_dim/2) (HF rotate_half); true rotates (2i, 2i + 1) (GGUF / GPT-J). rot_dim
// even. `more` (LongRoPE): cos and sin are multiplied by more.scale, and tokens t with
// more.use_long[t] != 0 take more.inv_freq_long instead of inv_freq.
struct RopeMore {
  float scale = 1.0f;
  const float* inv_freq_long = nullptr;  // [rot_dim / 2]
  const uint8_t* use_long = nullptr;     // [tokens]; null: no token does
};
void Rope(float* x /*[tokens, ldx] holding [heads, head_dim]*/, int64_t ldx, int64_t tokens,
          int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions /*[tokens]*/,
          const float* inv_freq /*[rot_dim / 2]*/, bool interleaved, const RopeMore& more = {});
// out[t, i] = silu(gate_up[t, i]) * gate_up[t, f + i]; silu(g) = g / (1 + exp(-g)).
void SiluMul(const float* gate_up /*[tokens, 2f]*/, int64_t tokens, int64_t f,
             float* out /*[tokens, ldo]*/, int64_t ldo);
// out[t, i] = gelu_tanh(gate_up[t, i]) * gate_up[t, f + i] (GeGLU, transformers'
// gelu_pytorch_tanh): gelu_tanh(g) = 0.5 g (1 + tanh(k (g + 0.044715 g^3))), k = sqrt(2 / pi),
// computed as g / (1 + exp(-2 k (g + 0.044715 g^3))), the same function.
void GeluTanhMul(const float* gate_up /*[tokens, 2f]*/, int64_t tokens, int64_t f,
                 float* out /*[tokens, ldo]*/, int64_t ldo);
// gpt-oss's clamped SwiGLU: g = min(gate_up[t, i], limit), u = clamp(gate_up[t, f + i], -limit,
// limit), out[t, i] = (u + 1) * g * sigmoid(alpha * g). Scalar (the expert GEMMs dominate).
void SwigluClampedMul(const float* gate_up /*[tokens, 2f]*/, int64_t tokens, int64_t f, float alpha,
                      float limit, float* out /*[tokens, ldo]*/, int64_t ldo);
float Dot(const float* a /*[n]*/, const float* b /*[n]*/, int64_t n);
void Axpy(float alpha, const float* x /*[n]*/, float* y /*[n]*/, int64_t n);  // y += alpha * x
void Scale(float* y /*[n]*/, float alpha, int64_t n);                         // y *= alpha
void AddInPlace(float* y /*[n]*/, const float* x /*[n]*/, int64_t n);         // y += x
// Mixture-of-experts routing of one token (transformers' Qwen3-MoE and Mixtral routers): p =
// softmax(logits[0, n)) in f32, the k largest p in decreasing order (ties: the lower expert) into
// experts[0, k) and their p into weights[0, k), divided by their sum when `normalize`. Scalar: a
// row's n is small next to the expert GEMMs it picks.
// The general form (softmax or sigmoid scoring, a choice bias, expert groups, a scale:
// kernels/common/moe_route.h, shared with the CUDA kernel).
void RouteTopK(const float* logits /*[p.num_experts]*/, const moe::RouteParams& p,
               int32_t* experts /*[p.top_k]*/, float* weights /*[p.top_k]*/);
void RouteTopK(const float* logits /*[n]*/, int64_t n, int64_t k, bool normalize,
               int32_t* experts /*[k]*/, float* weights /*[k]*/);
// The lowest i of the maximum of x[0, n), n >= 1: the first entry greater than every one before it,
// so NaNs are never taken (a NaN x[0] is returned as 0, as one loop from it would return it).
int32_t Argmax(const float* x /*[n]*/, int64_t n);
// Round-to-nearest-even; NaN stays a (quiet) NaN.
void F32ToBf16(const float* x /*[n]*/, uint16_t* y /*[n]*/, int64_t n);
void Bf16ToF32(const uint16_t* x /*[n]*/, float* y /*[n]*/, int64_t n);
void F16ToF32(const uint16_t* x /*[n]*/, float* y /*[n]*/, int64_t n);

void RmsNormIsa(Isa isa, const float* x, int64_t ldx, const float* w, float eps, int64_t rows,
                int64_t dim, float* y, int64_t ldy);
void AddRmsNormIsa(Isa isa, float* x, int64_t ldx, const float* d, int64_t ldd, const float* w,
                   float eps, int64_t rows, int64_t dim, float* y, int64_t ldy);
void RopeIsa(Isa isa, float* x, int64_t ldx, int64_t tokens, int64_t heads, int64_t head_dim,
             int64_t rot_dim, const int32_t* positions, const float* inv_freq, bool interleaved,
             const RopeMore& more = {});
void SiluMulIsa(Isa isa, const float* gate_up, int64_t tokens, int64_t f, float* out, int64_t ldo);
void GeluTanhMulIsa(Isa isa, const float* gate_up, int64_t tokens, int64_t f, float* out,
                    int64_t ldo);
float DotIsa(Isa isa, const float* a, const float* b, int64_t n);
void AxpyIsa(Isa isa, float alpha, const float* x, float* y, int64_t n);
void ScaleIsa(Isa isa, float* y, float alpha, int64_t n);
void AddInPlaceIsa(Isa isa, float* y, const float* x, int64_t n);
void F32ToBf16Isa(Isa isa, const float* x, uint16_t* y, int64_t n);
void Bf16ToF32Isa(Isa isa, const uint16_t* x, float* y, int64_t n);
void F16ToF32Isa(Isa isa, const uint16_t* x, float* y, int64_t n);
int32_t ArgmaxIsa(Isa isa, const float* x, int64_t n);

}  // namespace astr::cpu
