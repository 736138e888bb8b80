// AMX-INT8 tiles of the block-quantized GEMM (the tile itself: qgemm_amx_impl.h), for calls of
// several rows on CPUs where CpuUsesAmx(); one row stays on the VNNI tiles.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu::internal {
namespace {

// Inside this anonymous namespace: Quant6 and LoadScales of the VNNI tile,
#include "kernels/cpu/qgemm_avx512vnni_impl.h"
// then the AMX tile.
#include "kernels/cpu/qgemm_amx_impl.h"

}  // namespace

const QuantKernelSet& QuantKernelsAmx() {
  static const QuantKernelSet set = [] {
    QuantKernelSet s = MakeQuantKernelSet<QuantTileAmx, 16, 2>();
    UseAvx512ActivationLoops(&s);
    return s;
  }();
  return set;
}

}  // namespace astr::cpu::internal
