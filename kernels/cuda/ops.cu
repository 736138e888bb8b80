// Elementwise and row-wise ops of the forward pass (see ops.h). Every kernel is memory-bound and
// simple: one CTA per row for the row reductions (norms) and the per-token tables (RoPE), a 2-D
// grid (column blocks x tokens) for the elementwise ops. Each has a 16-byte path (8 bf16 / 4 f32
// per access) taken only when the host checked that every pointer, row length and stride is a
// multiple of the vector width, and an element-by-element path for everything else.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace astr::cuda {
namespace {

constexpr int kRowThreads = 256;  // CTA size of the per-row kernels
constexpr int kEltThreads = 256;  // CTA size of the elementwise kernels
constexpr int kMaxGridY = 65535;  // token blocks of the 2-D grids; more tokens loop

// 8 bf16 in one 16-byte access.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

bool Aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

cudaError_t LaunchError() { return cudaGetLastError(); }

// Sum over the CTA (blockDim.x == kRowThreads), result in every thread. Deterministic: fixed
// shuffle tree per warp, then warp 0 adds the warp sums in a fixed tree.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[kRowThreads / 32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();  // a previous call's readers of `total` are done
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < kRowThreads / 32 ? warp_sums[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// The CPU's InvRms (kernels/cpu/ops.cc): 1 / sqrt(ss / dim + eps) in double, rounded to f32.
__device__ float InvRms(float sum_squares, int dim, float eps) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(sum_squares) / dim + eps));
}

// ---------------------------------------------------------------------------------------------
// Embedding gather: grid (T), one CTA per token.

template <bool kVec>
__global__ void EmbeddingGatherKernel(const bf16* __restrict__ table,   // [vocab, hidden]
                                      const int32_t* __restrict__ ids,  // [T]
                                      int hidden, float scale,
                                      float* __restrict__ out) {  // [T, hidden]
  const int64_t t = blockIdx.x;
  const bf16* src = table + static_cast<int64_t>(ids[t]) * hidden;
  float* dst = out + t * hidden;
  if constexpr (kVec) {
    for (int c = threadIdx.x; c < hidden / 8; c += blockDim.x) {
      const Bf16x8 v = reinterpret_cast<const Bf16x8*>(src)[c];
      float4* d = reinterpret_cast<float4*>(dst) + 2 * c;
      const float2 a = __bfloat1622float2(v.h[0]), b = __bfloat1622float2(v.h[1]);
      const float2 e = __bfloat1622float2(v.h[2]), f = __bfloat1622float2(v.h[3]);
      d[0] = make_float4(a.x * scale, a.y * scale, b.x * scale, b.y * scale);
      d[1] = make_float4(e.x * scale, e.y * scale, f.x * scale, f.y * scale);
    }
  } else {
    for (int c = threadIdx.x; c < hidden; c += blockDim.x)
      dst[c] = __bfloat162float(src[c]) * scale;
  }
}

// ---------------------------------------------------------------------------------------------
// (Add +) RMSNorm: grid (T), one CTA of kRowThreads per row. Pass 1 adds delta into x (each thread
// owns the same elements in both passes, so it re-reads its own writes) and sums squares; pass 2
// scales.

template <bool kVec>
__global__ void __launch_bounds__(kRowThreads)
    AddRmsNormKernel(float* __restrict__ x,             // [T, hidden] residual, updated in place
                     const float* __restrict__ delta,   // [T, hidden] or nullptr
                     const float* __restrict__ weight,  // [hidden]
                     float eps, int hidden, bf16* __restrict__ out) {  // [T, hidden]
  const int64_t t = blockIdx.x;
  float* xr = x + t * hidden;
  const float* dr = delta != nullptr ? delta + t * hidden : nullptr;
  bf16* yr = out + t * hidden;
  float ss = 0.0f;
  if constexpr (kVec) {
    for (int c = threadIdx.x; c < hidden / 4; c += kRowThreads) {
      float4 v = reinterpret_cast<const float4*>(xr)[c];
      if (dr != nullptr) {
        const float4 d = reinterpret_cast<const float4*>(dr)[c];
        v.x += d.x, v.y += d.y, v.z += d.z, v.w += d.w;
        reinterpret_cast<float4*>(xr)[c] = v;
      }
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int c = threadIdx.x; c < hidden; c += kRowThreads) {
      float v = xr[c];
      if (dr != nullptr) xr[c] = v = v + dr[c];
      ss += v * v;
    }
  }
  const float inv = InvRms(BlockSum(ss), hidden, eps);
  // x * inv * w, left to right as the CPU's ScaleMul (two products: nothing to contract).
  if constexpr (kVec) {
    for (int c = threadIdx.x; c < hidden / 4; c += kRowThreads) {
      const float4 v = reinterpret_cast<const float4*>(xr)[c];
      const float4 w = reinterpret_cast<const float4*>(weight)[c];
      __nv_bfloat162 lo = __floats2bfloat162_rn(v.x * inv * w.x, v.y * inv * w.y);
      __nv_bfloat162 hi = __floats2bfloat162_rn(v.z * inv * w.z, v.w * inv * w.w);
      __nv_bfloat162* d = reinterpret_cast<__nv_bfloat162*>(yr) + 2 * c;  // 8-byte aligned
      d[0] = lo;
      d[1] = hi;
    }
  } else {
    for (int c = threadIdx.x; c < hidden; c += kRowThreads) {
      yr[c] = __float2bfloat16_rn(xr[c] * inv * weight[c]);
    }
  }
}

// RMSNorm of f32 rows in place: grid (T), one CTA of kRowThreads per row.
__global__ void __launch_bounds__(kRowThreads)
    RmsNormRowsKernel(float* __restrict__ rows,          // [T, hidden], in place
                      const float* __restrict__ weight,  // [hidden]
                      float eps, int hidden) {
  float* xr = rows + static_cast<int64_t>(blockIdx.x) * hidden;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < hidden; c += kRowThreads) ss += xr[c] * xr[c];
  const float inv = InvRms(BlockSum(ss), hidden, eps);
  for (int c = threadIdx.x; c < hidden; c += kRowThreads) xr[c] = xr[c] * inv * weight[c];
}

__global__ void __launch_bounds__(kRowThreads)
    SoftcapKernel(float* __restrict__ x, int64_t n, float cap) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

// ---------------------------------------------------------------------------------------------
// Per-head RMSNorm: grid (T, ceil(heads / 4)), 4 warps per CTA, one warp per (token, head).

constexpr int kHeadNormWarps = 4;

__global__ void __launch_bounds__(kHeadNormWarps * 32)
    HeadRmsNormKernel(bf16* __restrict__ rows,  // [T, stride] holding [heads, head_dim]
                      int64_t stride, int heads, int head_dim,
                      const float* __restrict__ weight,  // [head_dim]
                      float eps) {
  const int head = blockIdx.y * kHeadNormWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (head >= heads) return;  // whole warp; no block barrier below
  bf16* h =
      rows + static_cast<int64_t>(blockIdx.x) * stride + static_cast<int64_t>(head) * head_dim;
  float ss = 0.0f;
  for (int d = lane; d < head_dim; d += 32) {
    const float v = __bfloat162float(h[d]);
    ss += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float inv = InvRms(ss, head_dim, eps);
  for (int d = lane; d < head_dim; d += 32) {
    h[d] = __float2bfloat16_rn(__bfloat162float(h[d]) * inv * weight[d]);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE: grid (T), one CTA per token. The token's cos/sin table (rope_dim / 2 pairs) is computed
// once in shared memory, then every (head, pair) is rotated by exactly one thread.

constexpr int kRopeThreads = 128;

__global__ void __launch_bounds__(kRopeThreads)
    RopeKernel(bf16* __restrict__ rows,  // [T, stride] holding [heads, head_dim]
               int64_t stride, int heads, int head_dim, int rope_dim,
               const int32_t* __restrict__ positions,  // [T]
               const float* __restrict__ inv_freq,     // [rope_dim / 2]
               bool interleaved, RopeMore more) {
  __shared__ float cos_table[kMaxRopePairs];
  __shared__ float sin_table[kMaxRopePairs];
  const int half = rope_dim / 2;
  const int64_t t = blockIdx.x;
  const double pos = positions[t];
  const float* freq =
      more.use_long != nullptr && more.use_long[t] != 0 ? more.inv_freq_long : inv_freq;
  for (int i = threadIdx.x; i < half; i += kRopeThreads) {
    double s, c;
    sincos(pos * static_cast<double>(freq[i]), &s, &c);
    cos_table[i] = __fmul_rn(static_cast<float>(c), more.scale);
    sin_table[i] = __fmul_rn(static_cast<float>(s), more.scale);
  }
  __syncthreads();
  bf16* row = rows + t * stride;
  for (int idx = threadIdx.x; idx < heads * half; idx += kRopeThreads) {
    const int h = idx / half, i = idx - h * half;
    // interleaved: pair (2i, 2i + 1); else (i, i + half). Both lie inside [0, rope_dim).
    const int a = interleaved ? 2 * i : i;
    const int b = interleaved ? 2 * i + 1 : i + half;
    bf16* x = row + static_cast<int64_t>(h) * head_dim;
    const float xa = __bfloat162float(x[a]), xb = __bfloat162float(x[b]);
    const float c = cos_table[i], s = sin_table[i];
    // The CPU's xa * c - xb * s and xb * c + xa * s, rounded per operation (no FMA).
    x[a] = __float2bfloat16_rn(__fsub_rn(__fmul_rn(xa, c), __fmul_rn(xb, s)));
    x[b] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(xb, c), __fmul_rn(xa, s)));
  }
}

// ---------------------------------------------------------------------------------------------
// SiLU * mul and GELU(tanh) * mul: grid (column blocks, min(T, kMaxGridY)); tokens past
// gridDim.y loop.

// act(g) * u: silu(g) = g / (1 + exp(-g)); gelu_tanh(g) = g / (1 + exp(-2k (g + 0.044715 g^3))),
// k = sqrt(2 / pi) (cpu::GeluTanhMul's form of 0.5 g (1 + tanh(k (g + 0.044715 g^3)))).
// The gate activations: 0 SiLU, 1 GeLU (tanh), 2 gpt-oss's clamped SwiGLU (alpha, limit).
constexpr int kActSilu = 0, kActGelu = 1, kActClamped = 2;

template <int kAct>
__device__ __forceinline__ float ActTimes(float g, float u, float alpha, float limit) {
  if constexpr (kAct == kActGelu) {
    return g / (1.0f + expf(-2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
  } else if constexpr (kAct == kActClamped) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
  } else {
    return g / (1.0f + expf(-g)) * u;
  }
}

template <bool kVec, int kAct>
__global__ void __launch_bounds__(kEltThreads)
    GatedActKernel(const bf16* __restrict__ gate_up,                 // [T, 2 * ffn]
                   int num_tokens, int ffn, bf16* __restrict__ out,  // [T, ffn]
                   float alpha, float limit) {
  const int c = blockIdx.x * kEltThreads + threadIdx.x;  // 8-column group (kVec) or column
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    const bf16* g = gate_up + t * 2 * ffn;
    const bf16* u = g + ffn;
    bf16* o = out + t * ffn;
    if constexpr (kVec) {
      if (c >= ffn / 8) return;
      const Bf16x8 gv = reinterpret_cast<const Bf16x8*>(g)[c];
      const Bf16x8 uv = reinterpret_cast<const Bf16x8*>(u)[c];
      Bf16x8 ov;
      for (int j = 0; j < 4; ++j) {
        const float2 gf = __bfloat1622float2(gv.h[j]), uf = __bfloat1622float2(uv.h[j]);
        ov.h[j] = __floats2bfloat162_rn(ActTimes<kAct>(gf.x, uf.x, alpha, limit),
                                        ActTimes<kAct>(gf.y, uf.y, alpha, limit));
      }
      reinterpret_cast<Bf16x8*>(o)[c] = ov;
    } else {
      if (c >= ffn) return;
      o[c] = __float2bfloat16_rn(
          ActTimes<kAct>(__bfloat162float(g[c]), __bfloat162float(u[c]), alpha, limit));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bias add and sigmoid gate: grid (column blocks, min(T, kMaxGridY)), one element per thread.

// rows[t, c] += bias[c]: bf16 rows (the add in f32, then rounded) or f32 rows.
template <typename T>
__global__ void __launch_bounds__(kEltThreads)
    AddBiasKernel(T* __restrict__ rows,  // [T, stride], first cols used
                  int64_t stride, int num_tokens, int cols,
                  const float* __restrict__ bias) {  // [cols]
  const int c = blockIdx.x * kEltThreads + threadIdx.x;
  if (c >= cols) return;
  const float b = bias[c];
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    T* p = rows + t * stride + c;
    if constexpr (std::is_same_v<T, float>) {
      *p += b;
    } else {
      *p = __float2bfloat16_rn(__bfloat162float(*p) + b);
    }
  }
}

__global__ void __launch_bounds__(kEltThreads)
    SigmoidGateKernel(bf16* __restrict__ attn,  // [T, attn_stride], first cols used
                      int64_t attn_stride,
                      const bf16* __restrict__ gate,  // [T, gate_stride], first cols used
                      int64_t gate_stride, int num_tokens, int cols) {
  const int c = blockIdx.x * kEltThreads + threadIdx.x;
  if (c >= cols) return;
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    bf16* a = attn + t * attn_stride + c;
    const float g = __bfloat162float(gate[t * gate_stride + c]);
    *a = __float2bfloat16_rn(__bfloat162float(*a) * (1.0f / (1.0f + expf(-g))));
  }
}

// ---------------------------------------------------------------------------------------------
// Row gather: grid (num_rows), one CTA per output row.

template <bool kVec>
__global__ void GatherRowsKernel(const bf16* __restrict__ in,  // [*, in_stride]
                                 int64_t in_stride,
                                 const int32_t* __restrict__ rows,  // [num_rows], < 0 = padding
                                 int cols, bf16* __restrict__ out,  // [num_rows, out_stride]
                                 int64_t out_stride) {
  const int64_t i = blockIdx.x;
  const int32_t r = rows[i];
  bf16* dst = out + i * out_stride;
  const bf16* src = r >= 0 ? in + static_cast<int64_t>(r) * in_stride : nullptr;
  if constexpr (kVec) {
    for (int c = threadIdx.x; c < cols / 8; c += blockDim.x) {
      reinterpret_cast<uint4*>(dst)[c] =
          src != nullptr ? reinterpret_cast<const uint4*>(src)[c] : make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      dst[c] = src != nullptr ? src[c] : __float2bfloat16_rn(0.0f);
    }
  }
}

// `units`: columns (or 8-column groups) per token, one per thread.
dim3 EltGrid(int units, int num_tokens) {
  const int col_blocks = (units + kEltThreads - 1) / kEltThreads;
  return dim3(col_blocks, num_tokens < kMaxGridY ? num_tokens : kMaxGridY);
}

}  // namespace

cudaError_t LaunchEmbeddingGather(const bf16* table, const int32_t* ids, int num_tokens, int hidden,
                                  float scale, float* out, cudaStream_t stream) {
  if (num_tokens < 0 || hidden <= 0) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  const bool vec = hidden % 8 == 0 && Aligned(table, 16) && Aligned(out, 16);
  if (vec) {
    ASTR_LAUNCH_KERNEL(EmbeddingGatherKernel<true>, num_tokens, 128, 0, stream)
    (table, ids, hidden, scale, out);
  } else {
    ASTR_LAUNCH_KERNEL(EmbeddingGatherKernel<false>, num_tokens, 128, 0, stream)
    (table, ids, hidden, scale, out);
  }
  return LaunchError();
}

cudaError_t LaunchSoftcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n < 0 || !(cap > 0.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + kRowThreads - 1) / kRowThreads, 4096);
  ASTR_LAUNCH_KERNEL(SoftcapKernel, static_cast<int>(blocks), kRowThreads, 0, stream)
  (x, n, cap);
  return LaunchError();
}

cudaError_t LaunchRmsNormRows(float* rows, const float* weight, float eps, int num_tokens,
                              int hidden, cudaStream_t stream) {
  if (num_tokens < 0 || hidden <= 0) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(RmsNormRowsKernel, num_tokens, kRowThreads, 0, stream)
  (rows, weight, eps, hidden);
  return LaunchError();
}

cudaError_t LaunchAddRmsNorm(float* x, const float* delta, const float* weight, float eps,
                             int num_tokens, int hidden, bf16* out, cudaStream_t stream) {
  if (num_tokens < 0 || hidden <= 0) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  const bool vec = hidden % 4 == 0 && Aligned(x, 16) && Aligned(weight, 16) && Aligned(out, 8) &&
                   (delta == nullptr || Aligned(delta, 16));
  if (vec) {
    ASTR_LAUNCH_KERNEL(AddRmsNormKernel<true>, num_tokens, kRowThreads, 0, stream)
    (x, delta, weight, eps, hidden, out);
  } else {
    ASTR_LAUNCH_KERNEL(AddRmsNormKernel<false>, num_tokens, kRowThreads, 0, stream)
    (x, delta, weight, eps, hidden, out);
  }
  return LaunchError();
}

cudaError_t LaunchHeadRmsNorm(bf16* rows, int64_t stride, int num_tokens, int heads, int head_dim,
                              const float* weight, float eps, cudaStream_t stream) {
  if (num_tokens < 0 || heads <= 0 || head_dim <= 0 ||
      stride < static_cast<int64_t>(heads) * head_dim) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  const int head_blocks = (heads + kHeadNormWarps - 1) / kHeadNormWarps;
  if (head_blocks > kMaxGridY) return cudaErrorInvalidValue;
  ASTR_LAUNCH_KERNEL(HeadRmsNormKernel, dim3(num_tokens, head_blocks), kHeadNormWarps * 32, 0,
                     stream)
  (rows, stride, heads, head_dim, weight, eps);
  return LaunchError();
}

cudaError_t LaunchRope(bf16* rows, int64_t stride, int num_tokens, int heads, int head_dim,
                       int rope_dim, const int32_t* positions, const float* inv_freq,
                       bool interleaved, cudaStream_t stream, const RopeMore& more) {
  if (num_tokens < 0 || heads <= 0 || head_dim <= 0 || rope_dim <= 0 || rope_dim % 2 != 0 ||
      rope_dim > head_dim || rope_dim / 2 > kMaxRopePairs ||
      stride < static_cast<int64_t>(heads) * head_dim ||
      (more.use_long != nullptr && more.inv_freq_long == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(RopeKernel, num_tokens, kRopeThreads, 0, stream)
  (rows, stride, heads, head_dim, rope_dim, positions, inv_freq, interleaved, more);
  return LaunchError();
}

template <int kAct>
cudaError_t LaunchGatedAct(const bf16* gate_up, int num_tokens, int ffn, bf16* out,
                           cudaStream_t stream, float alpha = 0.0f, float limit = 0.0f) {
  if (num_tokens < 0 || ffn <= 0) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  const bool vec = ffn % 8 == 0 && Aligned(gate_up, 16) && Aligned(out, 16);
  // Named, so that the launch macro does not split the template's arguments.
  constexpr auto gated_act_vec = GatedActKernel<true, kAct>;
  constexpr auto gated_act = GatedActKernel<false, kAct>;
  if (vec) {
    ASTR_LAUNCH_KERNEL(gated_act_vec, EltGrid(ffn / 8, num_tokens), kEltThreads, 0, stream)
    (gate_up, num_tokens, ffn, out, alpha, limit);
  } else {
    ASTR_LAUNCH_KERNEL(gated_act, EltGrid(ffn, num_tokens), kEltThreads, 0, stream)
    (gate_up, num_tokens, ffn, out, alpha, limit);
  }
  return LaunchError();
}

cudaError_t LaunchSiluMul(const bf16* gate_up, int num_tokens, int ffn, bf16* out,
                          cudaStream_t stream) {
  return LaunchGatedAct<kActSilu>(gate_up, num_tokens, ffn, out, stream);
}

cudaError_t LaunchGeluTanhMul(const bf16* gate_up, int num_tokens, int ffn, bf16* out,
                              cudaStream_t stream) {
  return LaunchGatedAct<kActGelu>(gate_up, num_tokens, ffn, out, stream);
}

cudaError_t LaunchSwigluClampedMul(const bf16* gate_up, int num_tokens, int ffn, float alpha,
                                   float limit, bf16* out, cudaStream_t stream) {
  if (!(limit > 0.0f)) return cudaErrorInvalidValue;
  return LaunchGatedAct<kActClamped>(gate_up, num_tokens, ffn, out, stream, alpha, limit);
}

cudaError_t LaunchAddBiasF32(float* rows, int64_t stride, int num_tokens, int cols,
                             const float* bias, cudaStream_t stream) {
  if (num_tokens < 0 || cols <= 0 || stride < cols) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(AddBiasKernel<float>, EltGrid(cols, num_tokens), kEltThreads, 0, stream)
  (rows, stride, num_tokens, cols, bias);
  return LaunchError();
}

cudaError_t LaunchAddBias(bf16* rows, int64_t stride, int num_tokens, int cols, const float* bias,
                          cudaStream_t stream) {
  if (num_tokens < 0 || cols <= 0 || stride < cols) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(AddBiasKernel<bf16>, EltGrid(cols, num_tokens), kEltThreads, 0, stream)
  (rows, stride, num_tokens, cols, bias);
  return LaunchError();
}

cudaError_t LaunchSigmoidGate(bf16* attn, int64_t attn_stride, const bf16* gate,
                              int64_t gate_stride, int num_tokens, int cols, cudaStream_t stream) {
  if (num_tokens < 0 || cols <= 0 || attn_stride < cols || gate_stride < cols) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(SigmoidGateKernel, EltGrid(cols, num_tokens), kEltThreads, 0, stream)
  (attn, attn_stride, gate, gate_stride, num_tokens, cols);
  return LaunchError();
}

cudaError_t LaunchGatherRows(const bf16* in, int64_t in_stride, const int32_t* rows, int num_rows,
                             int cols, bf16* out, int64_t out_stride, cudaStream_t stream) {
  if (num_rows < 0 || cols <= 0 || in_stride < cols || out_stride < cols) {
    return cudaErrorInvalidValue;
  }
  if (num_rows == 0) return cudaSuccess;
  const bool vec = cols % 8 == 0 && in_stride % 8 == 0 && out_stride % 8 == 0 && Aligned(in, 16) &&
                   Aligned(out, 16);
  if (vec) {
    ASTR_LAUNCH_KERNEL(GatherRowsKernel<true>, num_rows, 128, 0, stream)
    (in, in_stride, rows, cols, out, out_stride);
  } else {
    ASTR_LAUNCH_KERNEL(GatherRowsKernel<false>, num_rows, 128, 0, stream)
    (in, in_stride, rows, cols, out, out_stride);
  }
  return LaunchError();
}

}  // namespace astr::cuda
