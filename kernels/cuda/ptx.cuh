// Inline-PTX wrappers shared by the tensor-core attention kernels (paged_decode, paged_prefill):
// cp.async copies, ldmatrix loads and the bf16 m16n8k16 MMA. Every wrapper that touches shared
// memory is volatile with a memory clobber, so the compiler never moves it across __syncthreads or
// the cp.async waits. Device code only (included by .cu files).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#if defined(ASTR_CUDA_EMU)
// The emulated device (kernels/cuda/emu) runs the same wrappers as lane rendezvous on the CPU.
#include "kernels/cuda/emu/ptx_emu.h"
#else
namespace astr::cuda::ptx {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes global -> shared, bypassing L1. src_bytes == 0 reads nothing and zero-fills the
// destination (out-of-range rows); `src` must still be a valid global address (callers pass the
// buffer base).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. Register i of a lane
// holds row lane/4, columns 2*(lane%4) and +1 of matrix i (the MMA fragment layout).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// The same, transposed: register i of a lane holds rows 2*(lane%4) and +1 of column lane/4.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a (16x16, row-major) * b (16x8, column-major); bf16 inputs, f32 accumulators.
// Lane l (g = l / 4, c = l % 4): a = {A[g][2c..], A[g+8][2c..], A[g][2c+8..], A[g+8][2c+8..]},
// b = {B[2c..][g], B[2c+8..][g]}, d = {D[g][2c], D[g][2c+1], D[g+8][2c], D[g+8][2c+1]}.
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace astr::cuda::ptx
#endif  // ASTR_CUDA_EMU

namespace astr::cuda::ptx {

// Two floats as bf16x2, `lo` in the low half (the lower column of an MMA fragment).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace astr::cuda::ptx

namespace astr::cuda {

// A raw score q.k into the base-2 domain of the tensor-core kernels' online softmax: times
// sm_scale, then (softcap > 0: Gemma 2) capped to softcap * tanh(s / softcap) as the generic
// kernel and the CPU backend cap it, then times log2(e).
struct ScoreToLog2 {
  float sm_scale = 0.0f;
  float softcap = 0.0f;
  float scale_log2 = 0.0f;  // sm_scale * log2(e)
  __host__ __device__ static ScoreToLog2 Of(float sm_scale, float softcap) {
    return {sm_scale, softcap, sm_scale * 1.4426950408889634f};
  }
  __device__ __forceinline__ float operator()(float qk) const {
    if (softcap > 0.0f) return softcap * tanhf(qk * sm_scale / softcap) * 1.4426950408889634f;
    return qk * scale_log2;
  }
};

}  // namespace astr::cuda
