// The device side of the emulated CUDA device: force-included (g++ -include) into every kernel
// source (kernels/cuda/*.cu) when it is compiled by the host compiler for the emulator
// (ASTR_CUDA_EMU). The toolkit's headers give the types (dim3, uint4, __nv_bfloat16 and its host
// conversions); this file adds what nvcc would: the built-in variables, barriers, warp shuffles,
// atomics and intrinsics, and the launch helper behind ASTR_LAUNCH_KERNEL
// (kernels/cuda/launch.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>

#include "kernels/cuda/emu/emu.h"

// Kernel attributes nvcc understands and g++ need not.
#undef __launch_bounds__
#define __launch_bounds__(...)
// A block's fibers all run on one OS thread, one block at a time: a thread_local is the block's
// shared variable. (Static __shared__ variables are not poisoned; dynamic shared memory is.)
#undef __shared__
#define __shared__ static thread_local

// Built-in variables.
#define threadIdx (::astr::emu::ThreadIdx())
#define blockIdx (::astr::emu::BlockIdx())
#define blockDim (::astr::emu::BlockDim())
#define gridDim (::astr::emu::GridDim())

using std::isinf;
using std::isnan;

inline void __syncthreads() { ::astr::emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::astr::emu::SyncWarp(mask); }

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move up to 64 bits");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = ::astr::emu::ShflXor(mask, bits, lane_mask, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// Atomics: blocks run on several OS threads, so these are real atomics.
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* p, float v) {
  float old = __atomic_load_n(reinterpret_cast<uint32_t*>(p), __ATOMIC_RELAXED);
  uint32_t expected;
  std::memcpy(&expected, &old, 4);
  for (;;) {
    float cur;
    std::memcpy(&cur, &expected, 4);
    const float next = cur + v;
    uint32_t desired;
    std::memcpy(&desired, &next, 4);
    if (__atomic_compare_exchange_n(reinterpret_cast<uint32_t*>(p), &expected, desired, false,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      return cur;
    }
  }
}

// Intrinsics. The _rn arithmetic is IEEE round-to-nearest without contraction (the emulated
// kernels are compiled with -ffp-contract=off, so a * b + c is never fused either).
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline int __float_as_int(float x) { return static_cast<int>(__float_as_uint(x)); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }

// nvcc's runtime header has this overload for kernels; the C function takes `const void*`.
template <typename... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

namespace astr::emu {

// The emulated <<<grid, block, smem, stream>>>: Launch(kernel, ...)(args...) copies the arguments
// into the kernel's parameter types (by value, as a launch does) and enqueues the grid.
template <typename... P>
struct KernelLauncher {
  void (*kernel)(P...);
  LaunchConfig config;
  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong argument count");
    auto params =
        std::make_shared<const std::tuple<std::remove_cvref_t<P>...>>(std::forward<A>(args)...);
    EnqueueKernel(config, [k = kernel, params] { std::apply(k, *params); });
  }
};

template <typename... P>
KernelLauncher<P...> Launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block,
                            size_t smem = 0, cudaStream_t stream = nullptr) {
  LaunchConfig c;
  c.func = reinterpret_cast<const void*>(kernel);
  c.name = name;
  c.grid = grid;
  c.block = block;
  c.smem = smem;
  c.stream = stream;
  return KernelLauncher<P...>{kernel, c};
}

}  // namespace astr::emu
