// AVX-512F GEMM tiles (f32 FMAs, x kept in f32). bf16 weights are widened in registers: within a
// k-pair vector, the low 16 bits of each lane hold k even (<< 16 makes the f32) and the high 16
// bits hold k odd (masking the low half off makes the f32).
//
// Per output: acc = 0; for k ascending: acc = fma(x[k], w[k], acc); y = acc (+ y). The tile shape
// only changes how many outputs share a loop, never this sequence. GCC 12 flags the intentionally
// undefined pass-through operand inside AVX-512 intrinsics
// (_mm512_undefined_*) as (maybe-)uninitialized; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_kernels.h"

namespace astr::cpu::internal {
namespace {

constexpr int kPanel = PackedMatrix::kPanel;
// Software prefetch distance in bytes along each panel's stream. Decode reads every weight from
// DRAM exactly once; prefetching ~1 KiB ahead per stream keeps enough lines in flight to approach
// the memory bandwidth with a few concurrent streams per core.
constexpr int64_t kPrefetchBytes = 1024;

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
inline void StoreTile(__m512 (&acc)[MR][NP], float* y, int64_t ldy, int64_t ncols,
                      bool accumulate) {
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NP; ++j) {
      StorePanel(acc[i][j], y + i * ldy + j * kPanel, ncols - j * kPanel, accumulate);
    }
  }
}

template <int MR, int NP>
struct TileF32 {
  static void Run(const void* xv, int64_t ldx, const void* wv, int64_t panel_stride, int64_t k,
                  float* y, int64_t ldy, int64_t ncols, bool accumulate) {
    const auto* x = static_cast<const float*>(xv);  // [MR, ldx]
    const auto* w = static_cast<const float*>(wv);  // NP x [k][16]
    __m512 acc[MR][NP];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      __m512 wk[NP];
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        const float* wp = w + j * panel_stride + kk * kPanel;
        _mm_prefetch(reinterpret_cast<const char*>(wp) + kPrefetchBytes, _MM_HINT_T0);
        wk[j] = _mm512_load_ps(wp);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 xi = _mm512_set1_ps(x[i * ldx + kk]);
#pragma GCC unroll 4
        for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_fmadd_ps(xi, wk[j], acc[i][j]);
      }
    }
    StoreTile<MR, NP>(acc, y, ldy, ncols, accumulate);
  }
};

template <int MR, int NP, bool kPrefetchNext>
struct TileBf16Impl {
  static void Run(const void* xv, int64_t ldx, const void* wv, int64_t panel_stride, int64_t k,
                  float* y, int64_t ldy, int64_t ncols, bool accumulate) {
    const auto* x = static_cast<const float*>(xv);     // [MR, ldx]
    const auto* w = static_cast<const uint16_t*>(wv);  // NP x [k_pairs][16][2]
    const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m512 acc[MR][NP];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    const int64_t full_pairs = k / 2;
    for (int64_t p = 0; p < full_pairs; ++p) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        const uint16_t* wp = w + j * panel_stride + p * 2 * kPanel;
        _mm_prefetch(reinterpret_cast<const char*>(wp) + kPrefetchBytes, _MM_HINT_T0);
        // Same spot in the strip of panels the next tile call (next panel group) reads.
        if constexpr (kPrefetchNext)
          _mm_prefetch(reinterpret_cast<const char*>(wp + NP * panel_stride), _MM_HINT_T1);
        const __m512i v = _mm512_load_si512(wp);
        const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + 2 * p]), lo, acc[i][j]);
          acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + 2 * p + 1]), hi, acc[i][j]);
        }
      }
    }
    if (k & 1) {  // last k alone: its pair's high half is zero padding and x has no element there
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        const __m512i v = _mm512_load_si512(w + j * panel_stride + full_pairs * 2 * kPanel);
        const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k - 1]), lo, acc[i][j]);
        }
      }
    }
    StoreTile<MR, NP>(acc, y, ldy, ncols, accumulate);
  }
};

template <int MR, int NP>
using TileBf16 = TileBf16Impl<MR, NP, false>;
template <int MR, int NP>
using TileBf16Pf = TileBf16Impl<MR, NP, true>;

}  // namespace

const KernelSet& GemmKernelsAvx512(WeightType type, int64_t m) {
  // 6 rows x 4 panels = 24 accumulators + 2 widened weights; x comes as embedded broadcasts.
  static const KernelSet f32 = MakeKernelSet<TileF32, 6, 4>(/*x_bf16=*/false);
  static const KernelSet bf16 = MakeKernelSet<TileBf16, 6, 4>(/*x_bf16=*/false);
  // From 8 rows on (batched decode, prefill): widening costs 2 uops on the FMA ports per panel and
  // k-pair for every row block, so 8-row tiles halve it against 4-row remainders; 2 panels per
  // tile split n finely between threads. The tile also pulls the next strip of panels into L2 while
  // its row blocks run, so only prefetches (not the first row block) wait on DRAM. Measured on the
  // target (2 threads, tools/bench_gemm.cc shapes) against 6x4 tiles: m=8 ~170 -> ~198 GFLOP/s,
  // m=16 ~219 -> ~236, m=128 ~268 -> ~276.
  static const KernelSet bf16_rows8 = MakeKernelSet<TileBf16Pf, 8, 2>(/*x_bf16=*/false);
  if (type == WeightType::kF32) return f32;
  return m >= 8 ? bf16_rows8 : bf16;
}

}  // namespace astr::cpu::internal
