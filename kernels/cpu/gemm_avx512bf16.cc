// AVX512_BF16 GEMM tiles for bf16 weights: vdpbf16ps consumes one 64-byte k-pair vector of a panel
// (16 outputs x 2 k) against x's pair (x[2p], x[2p+1]) broadcast as one 32-bit lane. x is rounded
// to bf16 (round-to-nearest-even) by the caller, which is this path's only loss against the f32
// paths.
//
// Per output: acc = 0; for pairs p ascending: acc = dpbf16(acc, x pair p, w pair p); y = acc (+ y).
// f32 weights use the AVX-512F tiles.
// GCC 12 flags the intentionally undefined pass-through operand inside AVX-512 intrinsics
// (_mm512_undefined_*) as (maybe-)uninitialized; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_kernels.h"

namespace astr::cpu::internal {
namespace {

constexpr int kPanel = PackedMatrix::kPanel;
constexpr int64_t kPrefetchBytes = 1024;  // see gemm_avx512.cc

inline void StorePanel(__m512 acc, float* y, int64_t cols, bool accumulate) {
  if (cols >= kPanel) {
    if (accumulate) acc = _mm512_add_ps(acc, _mm512_loadu_ps(y));
    _mm512_storeu_ps(y, acc);
  } else if (cols > 0) {
    const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
    if (accumulate) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, y));
    _mm512_mask_storeu_ps(y, mask, acc);
  }
}

template <int MR, int NP>
struct TileBf16Dot {
  static void Run(const void* xv, int64_t ldx, const void* wv, int64_t panel_stride, int64_t k,
                  float* y, int64_t ldy, int64_t ncols, bool accumulate) {
    // x: [MR, ldx] bf16 with k padded to even, read as 32-bit pairs.
    const auto* x = static_cast<const uint16_t*>(xv);
    const auto* w = static_cast<const uint16_t*>(wv);  // NP x [k_pairs][16][2]
    const int64_t pairs = (k + 1) / 2;
    const int32_t* xr[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) xr[i] = reinterpret_cast<const int32_t*>(x + i * ldx);
    __m512 acc[MR][NP];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < pairs; ++p) {
      __m512bh wk[NP];
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        const uint16_t* wp = w + j * panel_stride + p * 2 * kPanel;
        _mm_prefetch(reinterpret_cast<const char*>(wp) + kPrefetchBytes, _MM_HINT_T0);
        wk[j] = (__m512bh)_mm512_load_si512(wp);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512bh xi = (__m512bh)_mm512_set1_epi32(xr[i][p]);
#pragma GCC unroll 4
        for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xi, wk[j]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        StorePanel(acc[i][j], y + i * ldy + j * kPanel, ncols - j * kPanel, accumulate);
      }
    }
  }
};

}  // namespace

const KernelSet& GemmKernelsAvx512Bf16(WeightType type) {
  if (type == WeightType::kF32) return GemmKernelsAvx512(type);
  // 6 rows x 4 panels = 24 accumulators + 4 weight vectors + 1 broadcast x pair.
  static const KernelSet bf16 = MakeKernelSet<TileBf16Dot, 6, 4>(/*x_bf16=*/true);
  return bf16;
}

}  // namespace astr::cpu::internal
