// Reference GEMM tiles in plain C++ (baseline x86-64): one float accumulator per output, k
// ascending, the same per-output sequence as every other path's structure (though without FMA, so
// values differ from the SIMD paths in the last bits).
#include <cstdint>
#include <cstring>

#include "common/base/half.h"
#include "kernels/cpu/gemm_kernels.h"

namespace astr::cpu::internal {
namespace {

constexpr int kPanel = PackedMatrix::kPanel;

void Store(const float* acc /*[rows, np * 16]*/, int rows, int np, float* y, int64_t ldy,
           int64_t ncols, bool accumulate) {
  for (int i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < ncols; ++c) {
      const float v = acc[i * np * kPanel + c];
      y[i * ldy + c] = accumulate ? v + y[i * ldy + c] : v;
    }
  }
}

template <int MR, int NP>
struct TileF32 {
  static void Run(const void* xv, int64_t ldx, const void* wv, int64_t panel_stride, int64_t k,
                  float* y, int64_t ldy, int64_t ncols, bool accumulate) {
    const auto* x = static_cast<const float*>(xv);  // [MR, ldx]
    const auto* w = static_cast<const float*>(wv);  // NP x [k][16]
    float acc[MR * NP * kPanel] = {};
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int i = 0; i < MR; ++i) {
        const float xi = x[i * ldx + kk];
        for (int j = 0; j < NP; ++j) {
          const float* wk = w + j * panel_stride + kk * kPanel;
          for (int c = 0; c < kPanel; ++c) acc[(i * NP + j) * kPanel + c] += xi * wk[c];
        }
      }
    }
    Store(acc, MR, NP, y, ldy, ncols, accumulate);
  }
};

template <int MR, int NP>
struct TileBf16 {
  static void Run(const void* xv, int64_t ldx, const void* wv, int64_t panel_stride, int64_t k,
                  float* y, int64_t ldy, int64_t ncols, bool accumulate) {
    const auto* x = static_cast<const float*>(xv);     // [MR, ldx]
    const auto* w = static_cast<const uint16_t*>(wv);  // NP x [k_pairs][16][2]
    float acc[MR * NP * kPanel] = {};
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t pair = kk / 2, half = kk & 1;
      for (int i = 0; i < MR; ++i) {
        const float xi = x[i * ldx + kk];
        for (int j = 0; j < NP; ++j) {
          const uint16_t* wk = w + j * panel_stride + pair * 2 * kPanel + half;
          for (int c = 0; c < kPanel; ++c)
            acc[(i * NP + j) * kPanel + c] += xi * Bf16ToF32(wk[2 * c]);
        }
      }
    }
    Store(acc, MR, NP, y, ldy, ncols, accumulate);
  }
};

}  // namespace

const KernelSet& GemmKernelsScalar(WeightType type) {
  static const KernelSet f32 = MakeKernelSet<TileF32, 4, 1>(/*x_bf16=*/false);
  static const KernelSet bf16 = MakeKernelSet<TileBf16, 4, 1>(/*x_bf16=*/false);
  return type == WeightType::kF32 ? f32 : bf16;
}

}  // namespace astr::cpu::internal
