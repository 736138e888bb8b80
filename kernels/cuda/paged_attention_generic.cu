#include <cfloat>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/paged_attention_generic.h"

namespace astr::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kDimsPerLane = kGenericAttentionMaxHeadDim / kWarp;  // 8

__device__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Grid (num_rows, num_heads), one warp each. Lane l owns dims l, l + 32, ... of the head.
__global__ void GenericPagedAttentionKernel(GenericAttentionArgs a) {
  const int row = blockIdx.x, head = blockIdx.y, lane = threadIdx.x;
  const AttentionDims& d = a.dims;
  bf16* out = a.out + row * a.out_stride + int64_t{head} * d.head_dim;
  // The row's entry: the last b with qo_indptr[b] <= row (entries are few; a linear scan is fine).
  int entry = -1;
  for (int b = 0; b < a.batch; ++b) {
    if (a.qo_indptr[b] <= row && row < a.qo_indptr[b + 1]) entry = b;
  }
  const int pages = entry < 0 ? 0 : a.index.kv_indptr[entry + 1] - a.index.kv_indptr[entry];
  if (pages <= 0) {
    for (int i = lane; i < d.head_dim; i += kWarp) out[i] = __float2bfloat16(0.0f);
    return;
  }
  const int kv_len = (pages - 1) * a.kv.page_size + a.index.kv_last_page_len[entry];
  const int pos = kv_len - (a.qo_indptr[entry + 1] - row);  // this row's absolute position
  const int lo = d.sliding_window > 0 ? max(0, pos - d.sliding_window + 1) : 0;
  const int kv_head = head / (d.num_heads / d.num_kv_heads);
  const int32_t* page_ids = a.index.kv_page_indices + a.index.kv_indptr[entry];
  const bf16* q = a.q + row * a.q_stride + int64_t{head} * d.head_dim;

  float qr[kDimsPerLane], acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int dim = lane + i * kWarp;
    qr[i] = dim < d.head_dim ? __bfloat162float(q[dim]) * d.sm_scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  const int64_t slot_stride = int64_t{d.num_kv_heads} * d.head_dim;
  for (int j = lo; j <= pos; ++j) {
    const int64_t slot =
        int64_t{page_ids[j / a.kv.page_size]} * a.kv.page_size + j % a.kv.page_size;
    const bf16* k = a.kv.k + slot * slot_stride + int64_t{kv_head} * d.head_dim;
    const bf16* v = a.kv.v + slot * slot_stride + int64_t{kv_head} * d.head_dim;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int dim = lane + i * kWarp;
      if (dim < d.head_dim) s += qr[i] * __bfloat162float(k[dim]);
    }
    s = WarpSum(s);
    if (d.softcap > 0.0f) s = d.softcap * tanhf(s / d.softcap);
    const float m_new = fmaxf(m, s);
    const float scale = expf(m - m_new), p = expf(s - m_new);
    l = l * scale + p;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int dim = lane + i * kWarp;
      const float vv = dim < d.head_dim ? __bfloat162float(v[dim]) : 0.0f;
      acc[i] = acc[i] * scale + p * vv;
    }
    m = m_new;
  }
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  if (d.sinks != nullptr && l > 0.0f) {
    const float sink = d.sinks[head], mx = fmaxf(m, sink), keep = expf(m - mx);
    inv = keep / (l * keep + expf(sink - mx));
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int dim = lane + i * kWarp;
    if (dim < d.head_dim) out[dim] = __float2bfloat16(acc[i] * inv);
  }
}

}  // namespace

cudaError_t LaunchGenericPagedAttention(const GenericAttentionArgs& args, cudaStream_t stream) {
  const AttentionDims& d = args.dims;
  if (d.head_dim < 1 || d.head_dim > kGenericAttentionMaxHeadDim || d.num_kv_heads < 1 ||
      d.num_heads % d.num_kv_heads != 0 || args.kv.page_size < 1 || args.num_rows < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.num_rows == 0) return cudaSuccess;
  ASTR_LAUNCH_KERNEL(GenericPagedAttentionKernel, dim3(args.num_rows, d.num_heads), kWarp, 0,
                     stream)
  (args);
  return cudaGetLastError();
}

}  // namespace astr::cuda
