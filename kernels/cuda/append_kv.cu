// LaunchAppendKv (see paged_prefill.h): copies this step's K/V rows into their pool slots before
// the prefill attention reads them. One CTA per row; its threads stride over the row's
// num_kv_heads * head_dim elements, 8 at a time (16-byte vectors) where alignment allows.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/paged_prefill.h"

namespace astr::cuda {
namespace {

constexpr int kAppendThreads = 128;

// grid (num_rows), block kAppendThreads. kVec: every row start (source and pool) is 16-byte
// aligned and row_elems % 8 == 0, so the row is copied as uint4.
template <bool kVec>
__global__ void __launch_bounds__(kAppendThreads)
    AppendKvKernel(const bf16* __restrict__ k_new,  // [num_rows, row_elems], row stride `stride`
                   const bf16* __restrict__ v_new,  // [num_rows, row_elems], row stride `stride`
                   int64_t stride,                  // elements
                   const int64_t* __restrict__ out_slots,  // [num_rows]
                   int row_elems,                          // num_kv_heads * head_dim
                   int64_t pool_slots,                     // num_pages * page_size
                   bf16* __restrict__ k_pool,              // [pool_slots, row_elems]
                   bf16* __restrict__ v_pool) {            // [pool_slots, row_elems]
  const int64_t t = blockIdx.x;
  const int64_t slot = out_slots[t];
  // slot < 0: a row that appends nothing. slot >= pool_slots cannot come from a validated batch;
  // skipping it keeps every write inside the pool.
  if (slot < 0 || slot >= pool_slots) return;
  const bf16* ks = k_new + t * stride;
  const bf16* vs = v_new + t * stride;
  bf16* kd = k_pool + slot * row_elems;
  bf16* vd = v_pool + slot * row_elems;
  if constexpr (kVec) {
    for (int i = threadIdx.x; i < row_elems / 8; i += kAppendThreads) {
      reinterpret_cast<uint4*>(kd)[i] = reinterpret_cast<const uint4*>(ks)[i];
      reinterpret_cast<uint4*>(vd)[i] = reinterpret_cast<const uint4*>(vs)[i];
    }
  } else {
    for (int i = threadIdx.x; i < row_elems; i += kAppendThreads) {
      kd[i] = ks[i];
      vd[i] = vs[i];
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t LaunchAppendKv(const bf16* k_new, const bf16* v_new, int64_t kv_new_stride,
                           const int64_t* out_slots, int num_rows, int num_kv_heads, int head_dim,
                           PagedKv kv, cudaStream_t stream) {
  if (num_rows < 0 || num_kv_heads < 1 || head_dim < 1) return cudaErrorInvalidValue;
  if (num_rows == 0) return cudaSuccess;
  const int64_t row_elems = static_cast<int64_t>(num_kv_heads) * head_dim;
  if (k_new == nullptr || v_new == nullptr || out_slots == nullptr || kv.k == nullptr ||
      kv.v == nullptr || kv.page_size < 1 || kv.num_pages < 0 || kv_new_stride < row_elems ||
      row_elems > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  const int64_t pool_slots = static_cast<int64_t>(kv.num_pages) * kv.page_size;
  // Row t starts at k_new + t * stride and the slot at kv.k + slot * row_elems: both stay 16-byte
  // aligned when the bases are and stride, row_elems are multiples of 8 elements.
  const bool vec = row_elems % 8 == 0 && kv_new_stride % 8 == 0 && Aligned16(k_new) &&
                   Aligned16(v_new) && Aligned16(kv.k) && Aligned16(kv.v);
  const int re = static_cast<int>(row_elems);
  if (vec) {
    ASTR_LAUNCH_KERNEL(AppendKvKernel<true>, num_rows, kAppendThreads, 0, stream)
    (k_new, v_new, kv_new_stride, out_slots, re, pool_slots, kv.k, kv.v);
  } else {
    ASTR_LAUNCH_KERNEL(AppendKvKernel<false>, num_rows, kAppendThreads, 0, stream)
    (k_new, v_new, kv_new_stride, out_slots, re, pool_slots, kv.k, kv.v);
  }
  return cudaGetLastError();
}

}  // namespace astr::cuda
