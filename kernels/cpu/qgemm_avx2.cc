// AVX2 tiles of the block-quantized GEMM. A panel's 16 outputs are two 8-lane halves; vpmaddubsw
// multiplies unsigned weight quants by signed activation quants into int16 pairs (no saturation:
// quants are <= 127, or offset-128 signed values multiplied as |w| x sign(x, w)) and vpmaddwd
// widens the pairs into each output's int32 lane. Integer sums equal the other paths' exactly;
// float steps as in gemm.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu::internal {
namespace {

constexpr int kPanel = PackedMatrix::kPanel;
constexpr int64_t kPrefetchBytes = 1024;

inline __m256i Group4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof(v));
  return _mm256_set1_epi32(v);
}

inline __m256 LoadF16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// isum += per-output sums of 4 products of w (8 outputs x 4 bytes) and the broadcast group x.
template <bool kSigned>
inline __m256i Dot4(__m256i isum, __m256i w, __m256i x) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i p16;
  if constexpr (kSigned) {
    const __m256i s = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));  // q - 128
    p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(s), _mm256_sign_epi8(x, s));
  } else {
    p16 = _mm256_maddubs_epi16(w, x);
  }
  return _mm256_add_epi32(isum, _mm256_madd_epi16(p16, ones));
}

template <int MR, int BITS, bool kSigned>
void Run1(const QuantActivations& x, int64_t row0, const uint8_t* w, int64_t block_bytes,
          const QuantFormat& f, float* y, int64_t ldy, int64_t ncols, bool accumulate) {
  const int nh = f.sub == 16 ? 2 : 1;
  const int64_t kp = x.k_blocks * 32;
  constexpr int64_t qbytes = QuantBlockQuantBytes(BITS);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < x.k_blocks; ++b) {
    const uint8_t* blk = w + b * block_bytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchBytes + 256, _MM_HINT_T0);
    for (int h = 0; h < nh; ++h) {
      __m256i isum[MR][2];
      for (int i = 0; i < MR; ++i) isum[i][0] = isum[i][1] = _mm256_setzero_si256();
      for (int g = h * 8 / nh; g < (h + 1) * 8 / nh; ++g) {
        for (int half = 0; half < 2; ++half) {
          __m256i wv;
          if constexpr (BITS == 8) {
            wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + g * 64 + half * 32));
          } else {
            const __m256i raw =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (g % 4) * 64 + half * 32));
            wv = g < 4 ? _mm256_and_si256(raw, low4)
                       : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
          }
          for (int i = 0; i < MR; ++i) {
            isum[i][half] =
                Dot4<kSigned>(isum[i][half], wv, Group4(x.q + (row0 + i) * kp + b * 32 + 4 * g));
          }
        }
      }
      for (int half = 0; half < 2; ++half) {
        const __m256 ws = LoadF16(blk + qbytes + h * kPanel * 2 + half * 16);
        const __m256 wm = f.has_min ? LoadF16(blk + qbytes + (nh + h) * kPanel * 2 + half * 16)
                                    : _mm256_setzero_ps();
        for (int i = 0; i < MR; ++i) {
          const __m256 d = _mm256_set1_ps(x.d[(row0 + i) * x.k_blocks + b]);
          const int32_t* s = x.s + (row0 + i) * x.k_blocks * 2 + b * 2;
          const int32_t asum = nh == 2 ? s[h] : s[0] + s[1];
          const __m256 scale = _mm256_mul_ps(ws, d);
          if (!f.has_min) {
            // The signed form's sums are already sum q_x (q_w - 128).
            const __m256i corr =
                kSigned ? isum[i][half]
                        : _mm256_sub_epi32(isum[i][half], _mm256_set1_epi32(f.offset * asum));
            acc[i][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), scale, acc[i][half]);
          } else {
            acc[i][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][half]), scale, acc[i][half]);
            const float sv = nh == 2 ? x.sum16[(row0 + i) * x.k_blocks * 2 + 2 * b + h]
                                     : x.sum32[(row0 + i) * x.k_blocks + b];
            acc[i][half] = _mm256_fmadd_ps(_mm256_set1_ps(sv), wm, acc[i][half]);
          }
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int half = 0; half < 2; ++half) {
      const int64_t cols = ncols - half * 8;
      if (cols <= 0) continue;
      float* out = y + i * ldy + half * 8;
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[i][half]);
      for (int64_t c = 0; c < cols && c < 8; ++c) out[c] = accumulate ? tmp[c] + out[c] : tmp[c];
    }
  }
}

template <int MR, int NP, int BITS>
struct Tile {
  static void Run(const QuantActivations& x, int64_t row0, const uint8_t* w, int64_t panel_stride,
                  int64_t block_bytes, const QuantFormat& f, float* y, int64_t ldy, int64_t ncols,
                  bool accumulate) {
    static_assert(NP == 1);
    (void)panel_stride;
    if (BITS == 8 && !f.has_min && f.offset == 128) {
      Run1<MR, BITS, true>(x, row0, w, block_bytes, f, y, ldy, ncols, accumulate);
    } else {
      Run1<MR, BITS, false>(x, row0, w, block_bytes, f, y, ldy, ncols, accumulate);
    }
  }
};

}  // namespace

const QuantKernelSet& QuantKernelsAvx2() {
  static const QuantKernelSet set = MakeQuantKernelSet<Tile, 2, 1>();
  return set;
}

}  // namespace astr::cpu::internal
