// Reference tiles of the block-quantized GEMM in plain C++: integer sums per sub-block, then the
// float steps of gemm.h with std::fma, exactly as the SIMD tiles do them.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu::internal {
namespace {

constexpr int kPanel = PackedMatrix::kPanel;

float F16Value(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return ::astr::F16ToF32(h);
}

// Quant u of output r, k t of group g in a block (gemm.h's layouts).
template <int BITS>
int QuantAt(const uint8_t* blk, int g, int r, int t, const QuantFormat& f) {
  if constexpr (BITS == 8) return blk[g * 64 + r * 4 + t] ^ 0x80;  // stored as q - 128
  const uint8_t byte = blk[(g % 4) * 64 + r * 4 + t];
  const int low = g < 4 ? byte & 0x0F : byte >> 4;
  if constexpr (BITS == 4) return low;
  if constexpr (BITS == kTableBits) return f.values[low];
  const uint8_t high = blk[256 + (g / 4) * 64 + r * 4 + t];
  return low | ((high >> (2 * (g % 4))) & 3) << 4;
}

template <int MR, int NP, int BITS>
struct Tile {
  static void Run(const QuantActivations& x, int64_t row0, const uint8_t* w, int64_t panel_stride,
                  int64_t block_bytes, const QuantFormat& f, float* y, int64_t ldy, int64_t ncols,
                  bool accumulate) {
    const int nh = f.sub == 16 ? 2 : 1;
    const int64_t kp = x.k_blocks * 32;
    constexpr int64_t qbytes = QuantBlockQuantBytes(BITS);
    float acc[MR][NP][kPanel] = {};
    for (int64_t b = 0; b < x.k_blocks; ++b) {
      QuantBlockAt at[NP];
      for (int j = 0; j < NP; ++j)
        at[j] = LocateQuantBlock(w + j * panel_stride, b, block_bytes, f);
      for (int h = 0; h < nh; ++h) {
        int32_t isum[MR][NP][kPanel] = {};
        for (int g = h * 8 / nh; g < (h + 1) * 8 / nh; ++g) {
          for (int j = 0; j < NP; ++j) {
            for (int i = 0; i < MR; ++i) {
              const int8_t* xq = x.q + (row0 + i) * kp + b * 32 + 4 * g;
              for (int r = 0; r < kPanel; ++r) {
                for (int t = 0; t < 4; ++t)
                  isum[i][j][r] += QuantAt<BITS>(at[j].block, g, r, t, f) * xq[t];
              }
            }
          }
        }
        for (int j = 0; j < NP; ++j) {
          // This sub-block's scale and min of output r (gemm.h).
          const uint8_t* scales = at[j].block + qbytes;
          auto scale_of = [&](int r) {
            if (!f.super) return F16Value(scales + (h * kPanel + r) * 2);
            return F16Value(at[j].header + 2 * r) *
                   static_cast<float>(static_cast<int8_t>(scales[h * kPanel + r]));
          };
          auto min_of = [&](int r) {
            if (!f.super) return F16Value(scales + ((nh + h) * kPanel + r) * 2);
            return F16Value(at[j].header + (kPanel + r) * 2) *
                   static_cast<float>(static_cast<int8_t>(scales[(nh + h) * kPanel + r]));
          };
          for (int i = 0; i < MR; ++i) {
            const float xd = x.d[(row0 + i) * x.k_blocks + b];
            const int32_t* s = x.s + (row0 + i) * x.k_blocks * 2 + b * 2;
            const int32_t asum = nh == 2 ? s[h] : s[0] + s[1];
            const float sv = nh == 2 ? x.sum16[(row0 + i) * x.k_blocks * 2 + b * 2 + h]
                                     : x.sum32[(row0 + i) * x.k_blocks + b];
            for (int r = 0; r < kPanel; ++r) {
              const float scale = scale_of(r) * xd;
              float& a = acc[i][j][r];
              if (!f.has_min) {
                a = std::fma(static_cast<float>(isum[i][j][r] - f.offset * asum), scale, a);
              } else {
                a = std::fma(static_cast<float>(isum[i][j][r]), scale, a);
                a = std::fma(sv, min_of(r), a);
              }
            }
          }
        }
      }
    }
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NP; ++j) {
        for (int r = 0; r < kPanel; ++r) {
          const int64_t c = j * kPanel + r;
          if (c >= ncols) break;
          float& out = y[i * ldy + c];
          out = accumulate ? acc[i][j][r] + out : acc[i][j][r];
        }
      }
    }
  }
};

}  // namespace

const QuantKernelSet& QuantKernelsScalar() {
  static const QuantKernelSet set = MakeQuantKernelSet<Tile, 4, 1>();
  return set;
}

}  // namespace astr::cpu::internal
