// AVX2 GEMM tiles (f32 FMAs, x kept in f32). A 16-output panel is two 8-lane halves; bf16 weights
// are widened as in gemm_avx512.cc (low 16 bits = k even, high 16 bits = k odd).
//
// Per output: acc = 0; for k ascending: acc = fma(x[k], w[k], acc); y = acc (+ y).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_kernels.h"

namespace astr::cpu::internal {
namespace {

constexpr int kPanel = PackedMatrix::kPanel;
constexpr int64_t kPrefetchBytes = 1024;  // see gemm_avx512.cc

inline void StoreHalf(__m256 acc, float* y, int64_t cols, bool accumulate) {
  if (cols >= 8) {
    if (accumulate) acc = _mm256_add_ps(acc, _mm256_loadu_ps(y));
    _mm256_storeu_ps(y, acc);
  } else if (cols > 0) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, acc);
    for (int64_t c = 0; c < cols; ++c) y[c] = accumulate ? tmp[c] + y[c] : tmp[c];
  }
}

template <int MR, int NH>
inline void StoreTile(__m256 (&acc)[MR][NH], float* y, int64_t ldy, int64_t ncols,
                      bool accumulate) {
  for (int i = 0; i < MR; ++i) {
    for (int h = 0; h < NH; ++h)
      StoreHalf(acc[i][h], y + i * ldy + h * 8, ncols - h * 8, accumulate);
  }
}

template <int MR, int NP>
struct TileF32 {
  static void Run(const void* xv, int64_t ldx, const void* wv, int64_t panel_stride, int64_t k,
                  float* y, int64_t ldy, int64_t ncols, bool accumulate) {
    const auto* x = static_cast<const float*>(xv);  // [MR, ldx]
    const auto* w = static_cast<const float*>(wv);  // NP x [k][16]
    constexpr int NH = 2 * NP;
    __m256 acc[MR][NH];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) acc[i][h] = _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      __m256 xi[MR];
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) xi[i] = _mm256_broadcast_ss(x + i * ldx + kk);
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        const float* wp = w + (h / 2) * panel_stride + kk * kPanel + (h % 2) * 8;
        if (h % 2 == 0)
          _mm_prefetch(reinterpret_cast<const char*>(wp) + kPrefetchBytes, _MM_HINT_T0);
        const __m256 wk = _mm256_load_ps(wp);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) acc[i][h] = _mm256_fmadd_ps(xi[i], wk, acc[i][h]);
      }
    }
    StoreTile<MR, NH>(acc, y, ldy, ncols, accumulate);
  }
};

template <int MR, int NP>
struct TileBf16 {
  static void Run(const void* xv, int64_t ldx, const void* wv, int64_t panel_stride, int64_t k,
                  float* y, int64_t ldy, int64_t ncols, bool accumulate) {
    const auto* x = static_cast<const float*>(xv);     // [MR, ldx]
    const auto* w = static_cast<const uint16_t*>(wv);  // NP x [k_pairs][16][2]
    constexpr int NH = 2 * NP;
    const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m256 acc[MR][NH];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) acc[i][h] = _mm256_setzero_ps();
    }
    const int64_t full_pairs = k / 2;
    for (int64_t p = 0; p < full_pairs; ++p) {
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        const uint16_t* wp = w + (h / 2) * panel_stride + p * 2 * kPanel + (h % 2) * 16;
        if (h % 2 == 0)
          _mm_prefetch(reinterpret_cast<const char*>(wp) + kPrefetchBytes, _MM_HINT_T0);
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(wp));
        const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          acc[i][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + i * ldx + 2 * p), lo, acc[i][h]);
          acc[i][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + i * ldx + 2 * p + 1), hi, acc[i][h]);
        }
      }
    }
    if (k & 1) {  // last k alone: its pair's high half is zero padding and x has no element there
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        const uint16_t* wp = w + (h / 2) * panel_stride + full_pairs * 2 * kPanel + (h % 2) * 16;
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(wp));
        const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          acc[i][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + i * ldx + k - 1), lo, acc[i][h]);
        }
      }
    }
    StoreTile<MR, NH>(acc, y, ldy, ncols, accumulate);
  }
};

}  // namespace

const KernelSet& GemmKernelsAvx2(WeightType type) {
  // 3 rows x 2 panels (4 halves) = 12 accumulators of the 16 ymm registers.
  static const KernelSet f32 = MakeKernelSet<TileF32, 3, 2>(/*x_bf16=*/false);
  static const KernelSet bf16 = MakeKernelSet<TileBf16, 3, 2>(/*x_bf16=*/false);
  return type == WeightType::kF32 ? f32 : bf16;
}

}  // namespace astr::cpu::internal
