// AVX-512 VNNI tiles of the block-quantized GEMM (the tile itself: qgemm_avx512vnni_impl.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu::internal {
namespace {

#include "kernels/cpu/qgemm_avx512vnni_impl.h"  // inside this anonymous namespace

}  // namespace

const QuantKernelSet& QuantKernelsAvx512Vnni() {
  static const QuantKernelSet set = [] {
    QuantKernelSet s = MakeQuantKernelSet<QuantTileAvx512Vnni, 4, 2>();
    UseAvx2ActivationLoops(&s);
    return s;
  }();
  return set;
}

}  // namespace astr::cpu::internal
