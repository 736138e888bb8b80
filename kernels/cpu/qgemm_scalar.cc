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
  return F16BitsToF32(h);
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
      for (int h = 0; h < nh; ++h) {
        int32_t isum[MR][NP][kPanel] = {};
        for (int g = h * 8 / nh; g < (h + 1) * 8 / nh; ++g) {
          for (int j = 0; j < NP; ++j) {
            const uint8_t* v =
                w + j * panel_stride + b * block_bytes + (BITS == 8 ? g : g % 4) * 64;
            for (int i = 0; i < MR; ++i) {
              const int8_t* xq = x.q + (row0 + i) * kp + b * 32 + 4 * g;
              for (int r = 0; r < kPanel; ++r) {
                for (int t = 0; t < 4; ++t) {
                  const uint8_t byte = v[r * 4 + t];
                  const int u = BITS == 8 ? byte : (g < 4 ? byte & 0x0F : byte >> 4);
                  isum[i][j][r] += u * xq[t];
                }
              }
            }
          }
        }
        for (int j = 0; j < NP; ++j) {
          const uint8_t* blk = w + j * panel_stride + b * block_bytes;
          const uint8_t* sc = blk + qbytes + h * kPanel * 2;
          const uint8_t* mn = blk + qbytes + (nh + h) * kPanel * 2;
          for (int i = 0; i < MR; ++i) {
            const float xd = x.d[(row0 + i) * x.k_blocks + b];
            const int32_t* s = x.s + (row0 + i) * x.k_blocks * 2 + b * 2;
            const int32_t asum = nh == 2 ? s[h] : s[0] + s[1];
            const float sv = nh == 2 ? x.sum16[(row0 + i) * x.k_blocks * 2 + b * 2 + h]
                                     : x.sum32[(row0 + i) * x.k_blocks + b];
            for (int r = 0; r < kPanel; ++r) {
              const float scale = F16Value(sc + 2 * r) * xd;
              float& a = acc[i][j][r];
              if (!f.has_min) {
                a = std::fma(static_cast<float>(isum[i][j][r] - f.offset * asum), scale, a);
              } else {
                a = std::fma(static_cast<float>(isum[i][j][r]), scale, a);
                a = std::fma(sv, F16Value(mn + 2 * r), a);
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
