// AVX2 tiles of the block-quantized GEMM. A panel's 16 outputs are two 8-lane halves; vpmaddubsw
// multiplies unsigned weight quants by signed activation quants into int16 pairs, which add up in
// int16 for as many groups as cannot overflow (4-bit quants: a whole sub-block; 6-bit quants: two
// groups; 8-bit offset-128 signed quants, multiplied as |w| x sign(x, w): one) before
// vpmaddwd widens them into each output's int32 lane. Integer sums equal the other paths' exactly;
// float steps as in gemm.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu::internal {
namespace {

constexpr int kPanel = PackedMatrix::kPanel;
constexpr int64_t kPrefetchBytes = 4096;

// A running sum kept in its register from one step to the next: without this, GCC sums a tile's
// products as a tree and spills every product to the stack (a store and a load each), which made
// the 3-row tiles ~10-20% slower.
inline void KeepInRegister(__m256i& v) { asm("" : "+x"(v)); }

inline __m256i Group4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof(v));
  return _mm256_set1_epi32(v);
}

inline __m256 LoadF16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <bool kSigned>
inline __m256i Dot4(__m256i w, __m256i x) {
  if constexpr (kSigned) {
    // w: the stored q - 128
    return _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
  } else {
    return _mm256_maddubs_epi16(w, x);
  }
}

// A sub-block's 8 scales (or mins) of one 8-output half: f16 values, or with kSuper int8 values
// times the unit's f16 factors.
template <bool kSuper>
inline __m256 LoadScales(const uint8_t* header, const uint8_t* at) {
  if constexpr (!kSuper) return LoadF16(at);
  const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at)));
  return _mm256_mul_ps(LoadF16(header), _mm256_cvtepi32_ps(sc));
}

// Group g's quants of one 8-output half (hf) of a 6-bit block: the low 4 bits from vector g % 4
// (low or high nibbles), the high 2 from vector g / 4 of the high plane, bits 2 * (g % 4).
inline __m256i Quant6(const uint8_t* blk, int g, int hf) {
  const __m256i raw =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (g % 4) * 64 + hf * 32));
  const __m256i hp =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 256 + (g / 4) * 64 + hf * 32));
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const __m256i lo =
      g < 4 ? _mm256_and_si256(raw, low4) : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
  __m256i hi;  // bits 2 * (g % 4) moved to bits 4 and 5 (16-bit shifts; the mask drops the rest)
  switch (g % 4) {
    case 0:
      hi = _mm256_slli_epi16(hp, 4);
      break;
    case 1:
      hi = _mm256_slli_epi16(hp, 2);
      break;
    case 2:
      hi = hp;
      break;
    default:
      hi = _mm256_srli_epi16(hp, 2);
      break;
  }
  return _mm256_or_si256(lo, _mm256_and_si256(hi, bits45));
}

template <int MR, int NP, int BITS, int SUB, bool kMin, bool kSuper>
void Run1(const QuantActivations& x, int64_t row0, const uint8_t* w, int64_t panel_stride,
          int64_t block_bytes, const QuantFormat& f, float* y, int64_t ldy, int64_t ncols,
          bool accumulate) {
  // 8-bit quants are stored as signed q - 128; table quants are looked up as that signed value.
  constexpr bool kSigned = BITS == 8 || BITS == kTableBits;
  constexpr int NH = SUB == 16 ? 2 : 1;  // sub-blocks per 32-element block
  constexpr int GPS = 8 / NH;            // groups of 4 k per sub-block
  constexpr int FLUSH = BITS == 4 ? GPS : (kSigned ? 1 : 2);  // groups summed in int16
  constexpr int64_t qbytes = QuantBlockQuantBytes(BITS);
  constexpr int64_t kScaleBytes = kSuper ? 1 : 2;
  // Each panel's stream is prefetched line by line kPrefetchBytes ahead of its block, each line
  // once (pf: the next line to ask for).
  const char* pf[NP];
  for (int j = 0; j < NP; ++j) pf[j] = reinterpret_cast<const char*>(w + j * panel_stride);
  const int64_t kp = x.k_blocks * 32;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  // Table quants: the 16 values as signed q - 128 (f.offset is 128), in both 128-bit lanes.
  __m128i table128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(f.values.data()));
  table128 = _mm_xor_si128(table128, _mm_set1_epi8(static_cast<char>(0x80)));
  const __m256i table = _mm256_broadcastsi128_si256(table128);
  const int8_t* xq[MR];
  for (int i = 0; i < MR; ++i) xq[i] = x.q + (row0 + i) * kp;
  constexpr int NV = 2 * NP;  // 8-output halves of the tile's panels
  __m256 acc[MR][NV];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < x.k_blocks; ++b) {
    const uint8_t* blks[NP];
    const uint8_t* hdrs[NP];
    for (int j = 0; j < NP; ++j) {
      const QuantBlockAt at = LocateQuantBlock(w + j * panel_stride, b, block_bytes, f);
      blks[j] = at.block;
      hdrs[j] = at.header;
      // Into L2 (the hardware prefetcher alone falls behind a single stream from DRAM, and L1's
      // fill buffers cap a thread's stream at ~10 GB/s).
      const char* until = reinterpret_cast<const char*>(blks[j]) + block_bytes + kPrefetchBytes;
      for (; pf[j] < until; pf[j] += 64) _mm_prefetch(pf[j], _MM_HINT_T1);
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; ++h) {
      __m256i isum[MR][NV];
#pragma GCC unroll 8
      for (int f0 = 0; f0 < GPS; f0 += FLUSH) {
        __m256i s16[MR][NV];
        for (int i = 0; i < MR; ++i) {
          for (int v = 0; v < NV; ++v) s16[i][v] = _mm256_setzero_si256();
        }
        if constexpr (BITS == 4 && SUB == 32) {
          // Vector v: group v in the low nibbles, group v + 4 in the high ones.
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) {
            __m256i xlo[MR], xhi[MR];
            for (int i = 0; i < MR; ++i) {
              xlo[i] = Group4(xq[i] + b * 32 + 4 * v);
              xhi[i] = Group4(xq[i] + b * 32 + 4 * (v + 4));
            }
#pragma GCC unroll 4
            for (int hf = 0; hf < NV; ++hf) {
              const __m256i raw = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(blks[hf / 2] + v * 64 + (hf % 2) * 32));
              const __m256i lo = _mm256_and_si256(raw, low4);
              const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
              for (int i = 0; i < MR; ++i) {
                s16[i][hf] = _mm256_add_epi16(s16[i][hf], _mm256_maddubs_epi16(lo, xlo[i]));
                s16[i][hf] = _mm256_add_epi16(s16[i][hf], _mm256_maddubs_epi16(hi, xhi[i]));
                KeepInRegister(s16[i][hf]);
              }
            }
          }
        } else {
#pragma GCC unroll 8
          for (int g = f0; g < f0 + FLUSH; ++g) {
            const int gg = h * GPS + g;  // group within the 32-element block
            __m256i xg[MR];
            for (int i = 0; i < MR; ++i) xg[i] = Group4(xq[i] + b * 32 + 4 * gg);
#pragma GCC unroll 4
            for (int hf = 0; hf < NV; ++hf) {
              const uint8_t* blk = blks[hf / 2];
              __m256i wv;
              if constexpr (BITS == 8) {
                wv = _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(blk + gg * 64 + (hf % 2) * 32));
              } else if constexpr (BITS == 6) {
                wv = Quant6(blk, gg, hf % 2);
              } else if constexpr (BITS == kTableBits) {
                const __m256i raw = _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(blk + (gg % 4) * 64 + (hf % 2) * 32));
                wv = _mm256_shuffle_epi8(
                    table, gg < 4 ? _mm256_and_si256(raw, low4)
                                  : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
              } else {
                const __m256i raw = _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(blk + (gg % 4) * 64 + (hf % 2) * 32));
                wv = gg < 4 ? _mm256_and_si256(raw, low4)
                            : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
              }
              for (int i = 0; i < MR; ++i) {
                const __m256i p = Dot4<kSigned>(wv, xg[i]);
                s16[i][hf] = FLUSH == 1 ? p : _mm256_add_epi16(s16[i][hf], p);
                if constexpr (FLUSH > 1) KeepInRegister(s16[i][hf]);
              }
            }
          }
        }
        for (int i = 0; i < MR; ++i) {
          for (int hf = 0; hf < NV; ++hf) {
            const __m256i s32 = _mm256_madd_epi16(s16[i][hf], ones);
            isum[i][hf] = f0 == 0 ? s32 : _mm256_add_epi32(isum[i][hf], s32);
            KeepInRegister(isum[i][hf]);
          }
        }
      }
#pragma GCC unroll 4
      for (int hf = 0; hf < NV; ++hf) {
        const uint8_t* scales = blks[hf / 2] + qbytes;
        const uint8_t* hdr = hdrs[hf / 2];
        const __m256 ws = LoadScales<kSuper>(hdr + (hf % 2) * 16,
                                             scales + (h * kPanel + (hf % 2) * 8) * kScaleBytes);
        __m256 wm = _mm256_setzero_ps();
        if constexpr (kMin) {
          wm = LoadScales<kSuper>(hdr + (kPanel + (hf % 2) * 8) * 2,
                                  scales + ((NH + h) * kPanel + (hf % 2) * 8) * kScaleBytes);
        }
        for (int i = 0; i < MR; ++i) {
          const int64_t r = row0 + i;
          const __m256 scale = _mm256_mul_ps(ws, _mm256_set1_ps(x.d[r * x.k_blocks + b]));
          if constexpr (!kMin) {
            __m256i corr = isum[i][hf];
            if constexpr (!kSigned) {  // the signed form's sums are already sum q_x (q_w - 128)
              const int32_t* s = x.s + r * x.k_blocks * 2 + b * 2;
              const int32_t asum = NH == 2 ? s[h] : s[0] + s[1];
              corr = _mm256_sub_epi32(corr, _mm256_set1_epi32(f.offset * asum));
            }
            acc[i][hf] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), scale, acc[i][hf]);
          } else {
            const float sv =
                NH == 2 ? x.sum16[r * x.k_blocks * 2 + 2 * b + h] : x.sum32[r * x.k_blocks + b];
            acc[i][hf] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][hf]), scale, acc[i][hf]);
            acc[i][hf] = _mm256_fmadd_ps(_mm256_set1_ps(sv), wm, acc[i][hf]);
          }
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int hf = 0; hf < NV; ++hf) {
      const int64_t cols = ncols - hf * 8;
      if (cols <= 0) continue;
      float* out = y + i * ldy + hf * 8;
      if (cols >= 8) {
        __m256 v = acc[i][hf];
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(out));
        _mm256_storeu_ps(out, v);
        continue;
      }
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[i][hf]);
      for (int64_t c = 0; c < cols; ++c) out[c] = accumulate ? tmp[c] + out[c] : tmp[c];
    }
  }
}

template <int MR, int NP, int BITS>
struct Tile {
  static void Run(const QuantActivations& x, int64_t row0, const uint8_t* w, int64_t panel_stride,
                  int64_t block_bytes, const QuantFormat& f, float* y, int64_t ldy, int64_t ncols,
                  bool accumulate) {
#define ASTR_QRUN(SUB, MIN, SUPER)                                                             \
  return Run1<MR, NP, BITS, SUB, MIN, SUPER>(x, row0, w, panel_stride, block_bytes, f, y, ldy, \
                                             ncols, accumulate)
#define ASTR_QRUN_SUPER(SUB, MIN)           \
  do {                                      \
    if (f.super) ASTR_QRUN(SUB, MIN, true); \
    ASTR_QRUN(SUB, MIN, false);             \
  } while (false)
    if constexpr (BITS == 8) {  // offset-128 signed, no min
      if (f.sub == 16) ASTR_QRUN_SUPER(16, false);
      ASTR_QRUN_SUPER(32, false);
    } else if constexpr (BITS == kTableBits) {  // offset-128 signed, no min
      ASTR_QRUN_SUPER(32, false);
    } else {
      if (f.sub == 16) {
        if (f.has_min) ASTR_QRUN_SUPER(16, true);
        ASTR_QRUN_SUPER(16, false);
      }
      if (f.has_min) ASTR_QRUN_SUPER(32, true);
      ASTR_QRUN_SUPER(32, false);
    }
#undef ASTR_QRUN_SUPER
#undef ASTR_QRUN
  }
};

float AbsMaxAvx2(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  int64_t j = 0;
  // max(|x|, m) keeps m where |x| is NaN, as the scalar loop's std::max ignores NaN.
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float amax = 0.0f;
  for (float v : lanes) amax = std::max(amax, v);
  for (; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

void HalfSumsAvx2(const int8_t* q, int64_t blocks, int32_t* s) {
  // q ^ 0x80 = q + 128 as unsigned bytes; vpsadbw sums each 8 of them, so each 16-element half
  // sums to two lanes, less 16 * 128.
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i v =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 32)), bias);
    const __m256i sad = _mm256_sad_epu8(v, _mm256_setzero_si256());
    s[2 * b] = static_cast<int32_t>(_mm256_extract_epi64(sad, 0) + _mm256_extract_epi64(sad, 1)) -
               16 * 128;
    s[2 * b + 1] =
        static_cast<int32_t>(_mm256_extract_epi64(sad, 2) + _mm256_extract_epi64(sad, 3)) -
        16 * 128;
  }
}

void QuantizeSpanAvx2(const float* x, int64_t n, float mul, int8_t* q) {
  const __m256 vm = _mm256_set1_ps(mul);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  // Byte 0 of each int32 lane, per 128-bit half.
  const __m256i bytes =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), vm),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // v is integral, so the conversion is exact (NaN gives INT_MIN, as the scalar cast does here).
    const __m256i i = _mm256_shuffle_epi8(
        _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), lo), hi), bytes);
    const int32_t low = _mm256_cvtsi256_si32(i), high = _mm256_extract_epi32(i, 4);
    std::memcpy(q + j, &low, 4);
    std::memcpy(q + j + 4, &high, 4);
  }
  for (; j < n; ++j) {
    q[j] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[j] * mul)), -127, 127));
  }
}

}  // namespace

void UseAvx2ActivationLoops(QuantKernelSet* set) {
  set->abs_max = AbsMaxAvx2;
  set->quantize_span = QuantizeSpanAvx2;
  set->half_sums = HalfSumsAvx2;
}

const QuantKernelSet& QuantKernelsAvx2() {
  // One row: 2 panels (two weight streams, 4 accumulators); more rows: 3 rows x 1 panel.
  static const QuantKernelSet set = [] {
    QuantKernelSet s = MakeQuantKernelSet<Tile, 3, 2>();
    s.single_row_panels = 2;
    s.panels_per_tile = 1;
    UseAvx2ActivationLoops(&s);
    return s;
  }();
  return set;
}

}  // namespace astr::cpu::internal
