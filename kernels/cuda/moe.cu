// The mixture-of-experts kernels (moe.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe.h"

namespace astr::cuda {
namespace {

constexpr int kRouteThreads = 128;
constexpr int kSortThreads = 256;
// Grouped GEMM: a block computes kMoeTileRows rows x kGemmCols columns, stepping k by kGemmK.
constexpr int kGemmCols = 64;
constexpr int kGemmK = 32;
constexpr int kGemmThreads = 256;  // 16 rows x 16 column groups of 4
constexpr int kCombineThreads = 256;

cudaError_t LaunchError() { return cudaGetLastError(); }

// One thread per row: the same sequence of f32 operations as cpu::RouteTopK (moe_route.h).
__global__ void MoeRouteKernel(const float* __restrict__ logits, int num_tokens,
                               const moe::RouteParams p, int32_t* __restrict__ experts,
                               float* __restrict__ weights) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  moe::RouteRow(
      logits + static_cast<int64_t>(t) * p.num_experts, p, [](float x) { return expf(x); },
      experts + static_cast<int64_t>(t) * p.top_k, weights + static_cast<int64_t>(t) * p.top_k);
}

// One block: each thread counts (then places) the pairs of its experts, scanning the pairs in
// order, so the result does not depend on timing.
__global__ void MoeSortKernel(const int32_t* __restrict__ experts, int pairs, int top_k,
                              int num_experts, int32_t* __restrict__ pair_row,
                              int32_t* __restrict__ slot, int32_t* __restrict__ tiles,
                              int max_tiles) {
  __shared__ int32_t begin[kMaxMoeExperts + 1];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int32_t n = 0;
    for (int p = 0; p < pairs; ++p) n += experts[p] == e;
    begin[e + 1] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    begin[0] = 0;
    for (int e = 0; e < num_experts; ++e) begin[e + 1] += begin[e];
    int tile = 0;
    for (int e = 0; e < num_experts; ++e) {
      for (int first = begin[e]; first < begin[e + 1]; first += kMoeTileRows, ++tile) {
        const int end = first + kMoeTileRows < begin[e + 1] ? first + kMoeTileRows : begin[e + 1];
        tiles[3 * tile] = e, tiles[3 * tile + 1] = first, tiles[3 * tile + 2] = end;
      }
    }
    for (; tile < max_tiles; ++tile) tiles[3 * tile] = -1;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int32_t next = begin[e];
    for (int p = 0; p < pairs; ++p) {
      if (experts[p] != e) continue;
      pair_row[next] = p / top_k;
      slot[p] = next++;
    }
  }
}

// One block per (column block, tile). Thread (r, g) computes rows first + r, columns c0 + 4g ..
// + 3, with x and w staged through shared memory kGemmK columns of k at a time.
template <bool kOutF32>
__global__ void GroupedMatmulKernel(const bf16* __restrict__ x, int64_t ldx,
                                    const bf16* __restrict__ w, const int32_t* __restrict__ tiles,
                                    int n, int k, const float* __restrict__ bias,
                                    void* __restrict__ y, int64_t ldy) {
  const int tile = blockIdx.y;
  const int expert = tiles[3 * tile];
  if (expert < 0) return;
  const int first = tiles[3 * tile + 1], rows = tiles[3 * tile + 2] - first;
  const int c0 = blockIdx.x * kGemmCols;
  const bf16* we = w + static_cast<int64_t>(expert) * n * k;
  __shared__ float xs[kMoeTileRows][kGemmK];
  __shared__ float ws[kGemmCols][kGemmK + 1];
  const int r = threadIdx.x / 16, g = threadIdx.x % 16;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < k; k0 += kGemmK) {
    for (int i = threadIdx.x; i < kMoeTileRows * kGemmK; i += blockDim.x) {
      const int rr = i / kGemmK, kk = i % kGemmK;
      xs[rr][kk] = rr < rows && k0 + kk < k
                       ? __bfloat162float(x[static_cast<int64_t>(first + rr) * ldx + k0 + kk])
                       : 0.0f;
    }
    for (int i = threadIdx.x; i < kGemmCols * kGemmK; i += blockDim.x) {
      const int cc = i / kGemmK, kk = i % kGemmK;
      ws[cc][kk] = c0 + cc < n && k0 + kk < k
                       ? __bfloat162float(we[static_cast<int64_t>(c0 + cc) * k + k0 + kk])
                       : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kGemmK; ++kk) {
      const float xv = xs[r][kk];
      for (int q = 0; q < 4; ++q) acc[q] = fmaf(xv, ws[4 * g + q][kk], acc[q]);
    }
    __syncthreads();
  }
  if (r >= rows) return;
  for (int q = 0; q < 4; ++q) {
    const int c = c0 + 4 * g + q;
    if (c >= n) break;
    const int64_t at = static_cast<int64_t>(first + r) * ldy + c;
    const float v = bias != nullptr ? acc[q] + bias[static_cast<int64_t>(expert) * n + c] : acc[q];
    if constexpr (kOutF32) {
      static_cast<float*>(y)[at] = v;
    } else {
      static_cast<bf16*>(y)[at] = __float2bfloat16_rn(v);
    }
  }
}

// One block per row: its choices ordered by expert, then each column's sum of fma's.
__global__ void MoeCombineKernel(const float* __restrict__ y, int64_t ldy,
                                 const int32_t* __restrict__ experts,
                                 const float* __restrict__ weights,
                                 const int32_t* __restrict__ slot, int top_k, int cols,
                                 float* __restrict__ out) {
  const int t = blockIdx.x;
  __shared__ int32_t order[kMaxMoeTopK];
  if (threadIdx.x == 0) {
    for (int j = 0; j < top_k; ++j) order[j] = j;
    for (int a = 1; a < top_k; ++a) {  // insertion sort by expert
      const int32_t v = order[a];
      int b = a - 1;
      for (; b >= 0 && experts[t * top_k + order[b]] > experts[t * top_k + v]; --b) {
        order[b + 1] = order[b];
      }
      order[b + 1] = v;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int p = t * top_k + order[j];
      acc = fmaf(weights[p], y[static_cast<int64_t>(slot[p]) * ldy + c], acc);
    }
    out[static_cast<int64_t>(t) * cols + c] = acc;
  }
}

// One block per row: the gate's dot product reduced in f32 across the block, then the scaled add.
__global__ void AddSharedExpertKernel(const bf16* __restrict__ x, int64_t ldx,
                                      const bf16* __restrict__ gate, const float* __restrict__ y,
                                      int cols, float* __restrict__ out) {
  const int t = blockIdx.x;
  float scale = 1.0f;  // an ungated shared expert (GLM-4.5's)
  if (gate != nullptr) {
    __shared__ float partial[kCombineThreads];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      dot = fmaf(__bfloat162float(x[static_cast<int64_t>(t) * ldx + c]), __bfloat162float(gate[c]),
                 dot);
    }
    partial[threadIdx.x] = dot;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    scale = 1.0f / (1.0f + expf(-partial[0]));
  }
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const int64_t at = static_cast<int64_t>(t) * cols + c;
    out[at] = fmaf(scale, y[at], out[at]);
  }
}

}  // namespace

cudaError_t LaunchAddSharedExpert(const bf16* x, int64_t ldx, const bf16* gate, const float* y,
                                  int num_tokens, int cols, float* out, cudaStream_t stream) {
  if (num_tokens < 0 || cols < 1 || ldx < cols) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(AddSharedExpertKernel, num_tokens, kCombineThreads, 0, stream)
  (x, ldx, gate, y, cols, out);
  return LaunchError();
}

cudaError_t LaunchMoeRoute(const float* logits, int num_tokens, const moe::RouteParams& p,
                           int32_t* experts, float* weights, cudaStream_t stream) {
  const int n = p.num_experts, top_k = p.top_k;
  if (num_tokens < 0 || n < 1 || n > kMaxMoeExperts || top_k < 1 || top_k > n ||
      top_k > kMaxMoeTopK || p.groups < 1 || p.groups > 64 || n % p.groups != 0 ||
      (p.groups > 1 && n / p.groups < 2) || p.topk_groups < 1 || p.topk_groups > p.groups ||
      top_k > p.topk_groups * (n / p.groups)) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(MoeRouteKernel, (num_tokens + kRouteThreads - 1) / kRouteThreads,
                     kRouteThreads, 0, stream)
  (logits, num_tokens, p, experts, weights);
  return LaunchError();
}

cudaError_t LaunchMoeRoute(const float* logits, int num_tokens, int num_experts, int top_k,
                           bool normalize, int32_t* experts, float* weights, cudaStream_t stream) {
  moe::RouteParams p;
  p.num_experts = num_experts;
  p.top_k = top_k;
  p.normalize = normalize;
  return LaunchMoeRoute(logits, num_tokens, p, experts, weights, stream);
}

cudaError_t LaunchMoeSort(const int32_t* experts, int pairs, int top_k, int num_experts,
                          int32_t* pair_row, int32_t* slot, int32_t* tiles, int max_tiles,
                          cudaStream_t stream) {
  if (pairs < 0 || top_k < 1 || num_experts < 1 || num_experts > kMaxMoeExperts ||
      max_tiles < MoeMaxTiles(pairs, num_experts)) {
    return cudaErrorInvalidValue;
  }
  if (pairs == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(MoeSortKernel, 1, kSortThreads, 0, stream)
  (experts, pairs, top_k, num_experts, pair_row, slot, tiles, max_tiles);
  return LaunchError();
}

cudaError_t LaunchGroupedMatmul(const bf16* x, int64_t ldx, const bf16* w, const int32_t* tiles,
                                int max_tiles, int n, int k, void* y, int64_t ldy, bool out_f32,
                                cudaStream_t stream, const float* bias) {
  if (max_tiles < 0 || n < 1 || k < 1 || ldx < k || ldy < n || max_tiles > 65535) {
    return cudaErrorInvalidValue;
  }
  if (max_tiles == 0) return cudaSuccess;
  const dim3 grid((n + kGemmCols - 1) / kGemmCols, max_tiles);
  if (out_f32) {
    ASTR_LAUNCH_KERNEL(GroupedMatmulKernel<true>, grid, kGemmThreads, 0, stream)
    (x, ldx, w, tiles, n, k, bias, y, ldy);
  } else {
    ASTR_LAUNCH_KERNEL(GroupedMatmulKernel<false>, grid, kGemmThreads, 0, stream)
    (x, ldx, w, tiles, n, k, bias, y, ldy);
  }
  return LaunchError();
}

cudaError_t LaunchMoeCombine(const float* y, int64_t ldy, const int32_t* experts,
                             const float* weights, const int32_t* slot, int num_tokens, int top_k,
                             int cols, float* out, cudaStream_t stream) {
  if (num_tokens < 0 || top_k < 1 || top_k > kMaxMoeTopK || cols < 1 || ldy < cols) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(MoeCombineKernel, num_tokens, kCombineThreads, 0, stream)
  (y, ldy, experts, weights, slot, top_k, cols, out);
  return LaunchError();
}

}  // namespace astr::cuda
