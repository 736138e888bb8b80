// Internal: the AMX-INT8 tile of the block-quantized GEMM, as a header so that a test can also
// compile it against scalar stand-ins of the intrinsics (tests/kernels/
// cpu_qgemm_emulated_test.cc) on CPUs without AMX. The includer provides the intrinsics
// (immintrin.h, or the stand-ins), qgemm_kernels.h's names, Quant6/LoadScales of
// qgemm_avx512vnni_impl.h, and a namespace to put it in.
//
// One tile dot product computes a sub-block's integer sums for up to 16 activation rows against one
// panel: A = the rows' 32 (or, with 16-element sub-blocks, 16) signed activation quants, loaded
// straight from the quantized rows; B = the panel's block, whose layout (16 outputs x 4 k per
// 64-byte row, the vpdpbusd layout) is already AMX's B layout. Types with a min keep their unsigned
// quants (tdpbsud). Types with an offset have it taken off the quants while they are widened into
// a scratch, q - offset as int8 (tdpbssd), except 8-bit blocks, which hold q - 128 already and are
// read in place (a widening copy there cost ~20% of the tile: its stores stall the tile loads that
// read them). The sums then come out already corrected, sum(x (q - o)) = sum(x q) - o sum(x), the
// same integers the VNNI tile forms per row. C (rows x 16 int32) is stored and the float steps run
// on it exactly as in the VNNI tile (gemm.h), so both give the same bits.
#pragma once

// Tile registers: tmm0..3 hold C (rows x 16 int32) of up to four sub-blocks in flight, tmm4/5 their
// A (one load per sub-block of the activations, for every panel) and tmm6/7 their B, alternating,
// so that consecutive sub-blocks' tile instructions do not wait for each other (GCC's tile
// intrinsics take the register numbers as literals: the switches).
constexpr int kAmxSlots = 4;

// The AMX tile spends longer per byte than the VNNI tile, so it prefetches further ahead
// (astr-bench-gemm q8_0 5632 x 2048, 16 rows: 4096 bytes 710-790 us, 1024 bytes 800-900).
constexpr int64_t kAmxPrefetchBytes = 4096;

// The 64-byte tile configuration of palette 1 (ldtilecfg's memory operand).
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Configures this thread's tiles for `rows` activation rows and sub-blocks of `kbytes` (32 or 16)
// quants, unless the last call on this thread did so already.
inline void AmxConfigure(int rows, int kbytes) {
  thread_local int current = 0;
  const int key = rows * 64 + kbytes;
  if (current == key) return;
  AmxTileConfig cfg;
  for (int c = 0; c < 4; ++c) cfg.rows[c] = static_cast<uint8_t>(rows), cfg.colsb[c] = 64;
  for (int a : {4, 5})
    cfg.rows[a] = static_cast<uint8_t>(rows), cfg.colsb[a] = static_cast<uint16_t>(kbytes);
  for (int b : {6, 7}) cfg.rows[b] = static_cast<uint8_t>(kbytes / 4), cfg.colsb[b] = 64;
  // GCC's ldtilecfg builtin does not tell the optimizer that it reads *cfg: without this barrier
  // an out-of-line copy of this function dropped the stores of the loops above and loaded an all-
  // zero configuration (every tile instruction after it then faults with SIGILL).
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
  current = key;
}

// Loads A (the rows' quants at a, row stride lda) into A register r (tmm4 + r).
inline void AmxLoadA(int r, const int8_t* a, int64_t lda) {
  if (r == 0) {
    _tile_loadd(4, a, lda);
  } else {
    _tile_loadd(5, a, lda);
  }
}

// One tile product into C[t] (cleared first) of A register r and the sub-block's groups at b
// (64 bytes each; signed_b: int8 values, else uint8), loaded into B register s (tmm6 + s).
#define ASTR_AMX_DOT(T, A, B)        \
  _tile_zero(T);                     \
  _tile_loadd(B, b, 64);             \
  if (signed_b) {                    \
    _tile_dpbssd(T, A, B);           \
  } else {                           \
    _tile_dpbsud(T, A, B);           \
  }
#define ASTR_AMX_DOT_T(T)              \
  switch (r * 2 + s) {                 \
    case 0:                            \
      ASTR_AMX_DOT(T, 4, 6) break;     \
    case 1:                            \
      ASTR_AMX_DOT(T, 4, 7) break;     \
    case 2:                            \
      ASTR_AMX_DOT(T, 5, 6) break;     \
    default:                           \
      ASTR_AMX_DOT(T, 5, 7) break;     \
  }
inline void AmxDot(int t, int r, int s, bool signed_b, const uint8_t* b) {
  switch (t) {
    case 0:
      ASTR_AMX_DOT_T(0)
      break;
    case 1:
      ASTR_AMX_DOT_T(1)
      break;
    case 2:
      ASTR_AMX_DOT_T(2)
      break;
    default:
      ASTR_AMX_DOT_T(3)
      break;
  }
}
#undef ASTR_AMX_DOT_T
#undef ASTR_AMX_DOT

inline void AmxStore(int t, int32_t* out) {
  switch (t) {
    case 0:
      _tile_stored(0, out, 64);
      break;
    case 1:
      _tile_stored(1, out, 64);
      break;
    case 2:
      _tile_stored(2, out, 64);
      break;
    default:
      _tile_stored(3, out, 64);
      break;
  }
}

// A thread's widened quants of the panel pair it last widened with several row tiles to go
// (QuantTileAmx): one per thread whatever the tile's shape, so it holds at most the largest
// k_blocks x 2 panels x 512 bytes this thread has met (0.9 MB for k = 28672), kept for the
// thread's life like the GEMM driver's activation buffers.
struct AmxWideCache {
  uint64_t call = 0;  // QuantActivations::call
  const uint8_t* w = nullptr;
  int np = 0, bits = 0;
  std::vector<uint8_t> bytes;
};
inline AmxWideCache& ThisThreadAmxWideCache() {
  thread_local AmxWideCache cache;
  return cache;
}

template <int MR, int NP, int BITS>
struct QuantTileAmx {
  static_assert(NP >= 1 && NP <= 2, "the AMX tile covers one or two panels");
  static void Run(const QuantActivations& x, int64_t row0, const uint8_t* w, int64_t panel_stride,
                  int64_t block_bytes, const QuantFormat& f, float* y, int64_t ldy, int64_t ncols,
                  bool accumulate) {
    static_assert(MR <= 16);
    const int nh = f.sub == 16 ? 2 : 1;
    const int64_t kp = x.k_blocks * 32;
    constexpr int64_t qbytes = QuantBlockQuantBytes(BITS);
    const int64_t scale_bytes = f.super ? 1 : 2;
    AmxConfigure(MR, 32 / nh);
    alignas(64) int32_t c[kAmxSlots][16][16];
    // Quants that are not bytes already are widened to a byte each (8 groups of 64 bytes per
    // block and panel). The driver calls a panel pair once per 16-row tile: with several row tiles
    // the first call of a GEMM widens into this thread's cache and the next ones read it (one
    // widening per block instead of one per row tile: IQ4_XS prefill on a 0.85B llama 8% faster).
    AmxWideCache& cache = ThisThreadAmxWideCache();
    // One row tile in the whole GEMM: a small scratch, reused block after block, does.
    const bool use_cache = BITS != 8 && x.m > 16;
    alignas(64) uint8_t scratch[kAmxSlots][8 * 64];
    const bool cached =
        use_cache && cache.call == x.call && cache.w == w && cache.np == NP && cache.bits == BITS;
    if constexpr (BITS != 8) {
      if (use_cache && !cached) {
        cache.call = x.call;
        cache.w = w;
        cache.np = NP;
        cache.bits = BITS;
        const size_t need = static_cast<size_t>(x.k_blocks * NP * 8 * 64 + 64);
        if (cache.bytes.size() < need) cache.bytes.resize(need);
      }
    }
    // 64-byte aligned: the tile loads read it in whole lines.
    uint8_t* const wide_base = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(cache.bytes.data()) + 63) & ~uintptr_t{63});
    // One prefetch stream per panel (two streams keep more lines in flight than one).
    const char* pf[NP];
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) pf[j] = reinterpret_cast<const char*>(w + j * panel_stride);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f.values.data())));
    // Quants with an offset go to B as q - offset (int8; every offset of the ggml types fits).
    const bool signed_b = BITS == 8 || (!f.has_min && f.offset <= 128);
    const __m512i off = _mm512_set1_epi8(static_cast<char>(signed_b ? f.offset : 0));
    const int8_t* xq = x.q + row0 * kp;
    const float* xd[MR];
    const int32_t* xs[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      xd[i] = x.d + (row0 + i) * x.k_blocks;
      xs[i] = x.s + (row0 + i) * x.k_blocks * 2;
    }
    __m512 acc[MR][NP];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    // Blocks go in groups whose sub-blocks (of every panel) fill the C tiles: first every tile
    // product of the group, then the float steps of each sub-block in order.
    const int64_t group = kAmxSlots / (nh * NP);
    for (int64_t b0 = 0; b0 < x.k_blocks; b0 += group) {
      const int64_t nblk = std::min<int64_t>(group, x.k_blocks - b0);
      QuantBlockAt at[kAmxSlots][NP];
      int dot = 0;
      for (int64_t u = 0; u < nblk; ++u) {
        const uint8_t* bq[NP];
#pragma GCC unroll 2
        for (int j = 0; j < NP; ++j) {
          at[u][j] = LocateQuantBlock(w + j * panel_stride, b0 + u, block_bytes, f);
          const uint8_t* blk = at[u][j].block;
          const char* until = reinterpret_cast<const char*>(blk) + block_bytes + kAmxPrefetchBytes;
          for (; pf[j] < until; pf[j] += 64) _mm_prefetch(pf[j], _MM_HINT_T1);
          // row g: group g's 4 quants of the 16 outputs
          uint8_t* const wide =
              use_cache ? wide_base + ((b0 + u) * NP + j) * 8 * 64 : scratch[(u * NP + j) * nh];
          bq[j] = wide;
          if (cached) {
            // widened by this GEMM's first row tile
          } else if constexpr (BITS == 4 || BITS == kTableBits) {
#pragma GCC unroll 4
            for (int v = 0; v < 4; ++v) {
              const __m512i raw = _mm512_loadu_si512(blk + v * 64);
              __m512i lo = _mm512_and_si512(raw, low4);
              __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
              if constexpr (BITS == kTableBits) {  // the table's values (q) for the indices
                lo = _mm512_shuffle_epi8(table, lo);
                hi = _mm512_shuffle_epi8(table, hi);
              }
              _mm512_store_si512(wide + v * 64, _mm512_sub_epi8(lo, off));
              _mm512_store_si512(wide + (v + 4) * 64, _mm512_sub_epi8(hi, off));
            }
          } else if constexpr (BITS == 6) {
#pragma GCC unroll 8
            for (int g = 0; g < 8; ++g) {
              _mm512_store_si512(wide + g * 64, _mm512_sub_epi8(Quant6(blk, g), off));
            }
          } else {
            bq[j] = blk;  // 8-bit blocks hold q - 128 already: read in place
          }
        }
        // One A load serves every panel; A and B registers alternate so that consecutive
        // products do not wait for each other.
        const int8_t* a = xq + (b0 + u) * 32;
        for (int h = 0; h < nh; ++h) {
          const int r = static_cast<int>((u * nh + h) & 1);
          AmxLoadA(r, a + 16 * h, kp);
#pragma GCC unroll 2
          for (int j = 0; j < NP; ++j, ++dot) {
            AmxDot(static_cast<int>((u * NP + j) * nh + h), r, dot & 1, signed_b, bq[j] + 256 * h);
          }
        }
      }
      for (int t = 0; t < nblk * nh * NP; ++t) AmxStore(t, c[t][0]);
      for (int64_t u = 0; u < nblk; ++u) {
        const int64_t b = b0 + u;
#pragma GCC unroll 2
        for (int j = 0; j < NP; ++j) {
          const uint8_t* blk = at[u][j].block;
          const uint8_t* hdr = at[u][j].header;
          for (int h = 0; h < nh; ++h) {
            const int32_t(&cs)[16][16] = c[(u * NP + j) * nh + h];
            const __m512 ws = LoadScales(f.super, hdr, blk + qbytes + h * kPanel * scale_bytes);
            if constexpr (BITS == 8) {  // signed, no min: the same steps, a tighter loop
              const float* db = x.dt + b * x.m + row0;
#pragma GCC unroll 16
              for (int i = 0; i < MR; ++i) {
                const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(db[i]));
                acc[i][j] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cs[i])), scale, acc[i][j]);
              }
              continue;
            }
            const __m512 wm = f.has_min ? LoadScales(f.super, hdr + kPanel * 2,
                                                     blk + qbytes + (nh + h) * kPanel * scale_bytes)
                                        : _mm512_setzero_ps();
#pragma GCC unroll 16
            for (int i = 0; i < MR; ++i) {
              const __m512i isum = _mm512_load_si512(cs[i]);
              const __m512 d = _mm512_set1_ps(xd[i][b]);
              const __m512 scale = _mm512_mul_ps(ws, d);
              if (signed_b) {
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[i][j]);
              } else if (!f.has_min) {
                const int32_t asum = nh == 2 ? xs[i][2 * b + h] : xs[i][2 * b] + xs[i][2 * b + 1];
                const __m512i corr = _mm512_sub_epi32(isum, _mm512_set1_epi32(f.offset * asum));
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), scale, acc[i][j]);
              } else {
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[i][j]);
                const float sv = nh == 2 ? x.sum16[(row0 + i) * x.k_blocks * 2 + 2 * b + h]
                                         : x.sum32[(row0 + i) * x.k_blocks + b];
                acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(sv), wm, acc[i][j]);
              }
            }
          }
        }
      }
    }
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) {
      const int64_t cols = ncols - j * kPanel;
      if (cols <= 0) continue;
      const __mmask16 mask = cols >= kPanel ? static_cast<__mmask16>(0xFFFF)
                                            : static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        float* out = y + i * ldy + j * kPanel;
        __m512 v = acc[i][j];
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, out));
        _mm512_mask_storeu_ps(out, mask, v);
      }
    }
  }
};
