// Internal: the AVX-512 VNNI tile of the block-quantized GEMM, as a header so that a test can
// also compile it against scalar stand-ins of the intrinsics (tests/kernels/
// cpu_qgemm_emulated_test.cc) on CPUs without AVX-512. The includer provides the intrinsics
// (immintrin.h, or the stand-ins), qgemm_kernels.h's names and a namespace to put it in.
//
// vpdpbusd multiplies 64 unsigned weight quants (16 outputs x 4 k) by one broadcast group of 4
// signed activation quants and adds each output's 4 products into its int32 lane. Float steps as
// in gemm.h.
#pragma once

constexpr int kPanel = PackedMatrix::kPanel;
// How far ahead (bytes) each panel's stream is prefetched into L2. One to four rows read the
// weights about as fast as memory delivers them, and a short distance keeps fewer lines in flight
// per stream (astr-bench-gemm q8_0 5632 x 2048, 1 row, Xeon with AMX: 2048 bytes 32-34 GB/s,
// 4096 bytes 30-31, 8192 bytes 28; q4_k and q6_k also gain; 4 rows 390 us against 430).
constexpr int64_t kPrefetchBytes = 2048;

inline __m512i Group4(const uint8_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof(v));
  return _mm512_set1_epi32(v);
}

inline __m512 LoadF16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// A sub-block's 16 scales (or mins): f16 values, or with `super` int8 values times the unit's
// f16 factors.
inline __m512 LoadScales(bool super, const uint8_t* header, const uint8_t* at) {
  if (!super) return LoadF16(at);
  const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  return _mm512_mul_ps(LoadF16(header), _mm512_cvtepi32_ps(sc));
}

// Group g's 6-bit quants: the low 4 bits from vector g % 4 (low or high nibbles), the high 2 from
// vector g / 4 of the high plane, bits 2 * (g % 4) (16-bit shifts; the masks drop the rest).
inline __m512i Quant6(const uint8_t* blk, int g) {
  const __m512i raw = _mm512_loadu_si512(blk + (g % 4) * 64);
  const __m512i hp = _mm512_loadu_si512(blk + 256 + (g / 4) * 64);
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  const __m512i lo =
      g < 4 ? _mm512_and_si512(raw, low4) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
  const int shift = 4 - 2 * (g % 4);
  const __m512i hi = shift > 0   ? _mm512_slli_epi16(hp, static_cast<unsigned>(shift))
                     : shift < 0 ? _mm512_srli_epi16(hp, static_cast<unsigned>(-shift))
                                 : hp;
  return _mm512_or_si512(lo, _mm512_and_si512(hi, bits45));
}

template <int MR, int NP, int BITS>
struct QuantTileAvx512Vnni {
  static void Run(const QuantActivations& x, int64_t row0, const uint8_t* w, int64_t panel_stride,
                  int64_t block_bytes, const QuantFormat& f, float* y, int64_t ldy, int64_t ncols,
                  bool accumulate) {
    const int nh = f.sub == 16 ? 2 : 1;
    const int64_t kp = x.k_blocks * 32;
    constexpr int64_t qbytes = QuantBlockQuantBytes(BITS);
    const int64_t scale_bytes = f.super ? 1 : 2;
    // Each panel's stream is prefetched line by line kPrefetchBytes ahead of its block, each line
    // once (pf: the next line to ask for).
    const char* pf[NP];
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) pf[j] = reinterpret_cast<const char*>(w + j * panel_stride);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // Table quants (kTableBits): each 128-bit lane looks its nibbles up in the 16 values.
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f.values.data())));
    const int8_t* xq[MR];
    const float* xd[MR];
    const int32_t* xs[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      xq[i] = x.q + (row0 + i) * kp;
      xd[i] = x.d + (row0 + i) * x.k_blocks;
      xs[i] = x.s + (row0 + i) * x.k_blocks * 2;
    }
    __m512 acc[MR][NP];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < x.k_blocks; ++b) {
      const uint8_t* blk[NP];
      const uint8_t* hdr[NP];
#pragma GCC unroll 2
      for (int j = 0; j < NP; ++j) {
        const QuantBlockAt at = LocateQuantBlock(w + j * panel_stride, b, block_bytes, f);
        blk[j] = at.block;
        hdr[j] = at.header;
        const char* until = reinterpret_cast<const char*>(blk[j]) + block_bytes + kPrefetchBytes;
        for (; pf[j] < until; pf[j] += 64) _mm_prefetch(pf[j], _MM_HINT_T1);
      }
      for (int h = 0; h < nh; ++h) {
        __m512i isum[MR][NP];
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
          for (int j = 0; j < NP; ++j) isum[i][j] = _mm512_setzero_si512();
        }
        if constexpr (BITS != 4 && BITS != kTableBits) {
          const int g0 = h * 8 / nh, g1 = (h + 1) * 8 / nh;
          for (int g = g0; g < g1; ++g) {
#pragma GCC unroll 2
            for (int j = 0; j < NP; ++j) {
              // 8-bit: the stored q - 128, back to the unsigned q for vpdpbusd.
              const __m512i wv = BITS == 8 ? _mm512_xor_si512(_mm512_loadu_si512(blk[j] + g * 64),
                                                              _mm512_set1_epi8(-128))
                                           : Quant6(blk[j], g);
#pragma GCC unroll 4
              for (int i = 0; i < MR; ++i) {
                isum[i][j] = _mm512_dpbusd_epi32(
                    isum[i][j], wv,
                    Group4(reinterpret_cast<const uint8_t*>(xq[i] + b * 32 + 4 * g)));
              }
            }
          }
        } else {
          // Vector v holds group v (low nibbles) and group v + 4 (high nibbles).
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) {
#pragma GCC unroll 2
            for (int j = 0; j < NP; ++j) {
              const __m512i raw = _mm512_loadu_si512(blk[j] + v * 64);
              __m512i lo = _mm512_and_si512(raw, low4);
              __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
              if constexpr (BITS == kTableBits) {
                lo = _mm512_shuffle_epi8(table, lo);
                hi = _mm512_shuffle_epi8(table, hi);
              }
#pragma GCC unroll 4
              for (int i = 0; i < MR; ++i) {
                const auto* xg = reinterpret_cast<const uint8_t*>(xq[i] + b * 32);
                if (nh == 1) {
                  isum[i][j] = _mm512_dpbusd_epi32(isum[i][j], lo, Group4(xg + 4 * v));
                  isum[i][j] = _mm512_dpbusd_epi32(isum[i][j], hi, Group4(xg + 4 * (v + 4)));
                } else if (h == 0) {
                  isum[i][j] = _mm512_dpbusd_epi32(isum[i][j], lo, Group4(xg + 4 * v));
                } else {
                  isum[i][j] = _mm512_dpbusd_epi32(isum[i][j], hi, Group4(xg + 4 * (v + 4)));
                }
              }
            }
          }
        }
#pragma GCC unroll 2
        for (int j = 0; j < NP; ++j) {
          const __m512 ws = LoadScales(f.super, hdr[j], blk[j] + qbytes + h * kPanel * scale_bytes);
          const __m512 wm = f.has_min
                                ? LoadScales(f.super, hdr[j] + kPanel * 2,
                                             blk[j] + qbytes + (nh + h) * kPanel * scale_bytes)
                                : _mm512_setzero_ps();
#pragma GCC unroll 4
          for (int i = 0; i < MR; ++i) {
            const __m512 d = _mm512_set1_ps(xd[i][b]);
            const int32_t asum = nh == 2 ? xs[i][2 * b + h] : xs[i][2 * b] + xs[i][2 * b + 1];
            const __m512 scale = _mm512_mul_ps(ws, d);
            if (!f.has_min) {
              const __m512i corr = _mm512_sub_epi32(isum[i][j], _mm512_set1_epi32(f.offset * asum));
              acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), scale, acc[i][j]);
            } else {
              acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), scale, acc[i][j]);
              const float sv = nh == 2 ? x.sum16[(row0 + i) * x.k_blocks * 2 + 2 * b + h]
                                       : x.sum32[(row0 + i) * x.k_blocks + b];
              acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(sv), wm, acc[i][j]);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
      for (int j = 0; j < NP; ++j) {
        const int64_t cols = ncols - j * kPanel;
        if (cols <= 0) continue;
        float* out = y + i * ldy + j * kPanel;
        const __mmask16 mask = cols >= kPanel ? static_cast<__mmask16>(0xFFFF)
                                              : static_cast<__mmask16>((1u << cols) - 1);
        __m512 v = acc[i][j];
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, out));
        _mm512_mask_storeu_ps(out, mask, v);
      }
    }
  }
};
