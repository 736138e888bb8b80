// The AVX-512 VNNI and AMX-INT8 tiles of the block-quantized GEMM compiled against scalar stand-ins
// of the intrinsics they use (written here from Intel's definitions), so that their indexing,
// nibble handling and float steps are checked on CPUs without AVX-512 or AMX too: each must equal
// the scalar path bit for bit. On CPUs that have them cpu_qgemm_test runs the real instructions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/qgemm_kernels.h"
#include "tests/support/test_util.h"

namespace astr::cpu::internal {
namespace emulated {

struct __m512 {
  float f[16];
};
union __m512i {
  int32_t i32[16];
  int16_t i16[32];
  uint8_t u8[64];
  int8_t i8[64];
};
union __m256i {
  uint16_t u16[16];
  uint8_t u8[32];
};
union __m128i {
  int8_t i8[16];
  uint8_t u8[16];
};
using __mmask16 = uint16_t;
constexpr int _MM_HINT_T0 = 3;
constexpr int _MM_HINT_T1 = 2;
inline void _mm_prefetch(const char*, int) {}

inline float HalfToFloat(uint16_t h) {
  const int exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mant + 1024), exp - 25);
}

inline __m512 _mm512_setzero_ps() { return __m512{}; }
inline __m512i _mm512_setzero_si512() { return __m512i{}; }
inline __m512 _mm512_set1_ps(float v) {
  __m512 r;
  for (float& f : r.f) f = v;
  return r;
}
inline __m512i _mm512_set1_epi32(int32_t v) {
  __m512i r;
  for (int32_t& x : r.i32) x = v;
  return r;
}
inline __m512i _mm512_set1_epi8(char v) {
  __m512i r;
  for (uint8_t& x : r.u8) x = static_cast<uint8_t>(v);
  return r;
}
inline __m512i _mm512_loadu_si512(const void* p) {
  __m512i r;
  std::memcpy(r.u8, p, 64);
  return r;
}
inline __m256i _mm256_loadu_si256(const __m256i* p) {
  __m256i r;
  std::memcpy(r.u8, p, 32);
  return r;
}
inline __m128i _mm_loadu_si128(const __m128i* p) {
  __m128i r;
  std::memcpy(r.u8, p, 16);
  return r;
}
inline __m512i _mm512_or_si512(__m512i a, __m512i b) {
  for (int j = 0; j < 64; ++j) a.u8[j] |= b.u8[j];
  return a;
}
inline __m512i _mm512_slli_epi16(__m512i a, unsigned n) {
  for (int16_t& x : a.i16) x = static_cast<int16_t>(static_cast<uint16_t>(x) << n);
  return a;
}
// Sign-extends 16 bytes into 16 int32 lanes.
inline __m512i _mm512_cvtepi8_epi32(__m128i a) {
  __m512i r;
  for (int l = 0; l < 16; ++l) r.i32[l] = a.i8[l];
  return r;
}
inline __m512i _mm512_and_si512(__m512i a, __m512i b) {
  for (int j = 0; j < 64; ++j) a.u8[j] &= b.u8[j];
  return a;
}
inline __m512i _mm512_xor_si512(__m512i a, __m512i b) {
  for (int j = 0; j < 64; ++j) a.u8[j] ^= b.u8[j];
  return a;
}
inline __m512i _mm512_srli_epi16(__m512i a, unsigned n) {
  for (int16_t& x : a.i16) x = static_cast<int16_t>(static_cast<uint16_t>(x) >> n);
  return a;
}
// Per 32-bit lane: src + sum over its 4 bytes of unsigned(a) * signed(b).
inline __m512i _mm512_dpbusd_epi32(__m512i src, __m512i a, __m512i b) {
  for (int l = 0; l < 16; ++l) {
    for (int t = 0; t < 4; ++t) src.i32[l] += a.u8[4 * l + t] * b.i8[4 * l + t];
  }
  return src;
}
inline __m512 _mm512_cvtph_ps(__m256i h) {
  __m512 r;
  for (int l = 0; l < 16; ++l) r.f[l] = HalfToFloat(h.u16[l]);
  return r;
}
inline __m512 _mm512_mul_ps(__m512 a, __m512 b) {
  for (int l = 0; l < 16; ++l) a.f[l] *= b.f[l];
  return a;
}
inline __m512 _mm512_add_ps(__m512 a, __m512 b) {
  for (int l = 0; l < 16; ++l) a.f[l] += b.f[l];
  return a;
}
inline __m512 _mm512_fmadd_ps(__m512 a, __m512 b, __m512 c) {
  for (int l = 0; l < 16; ++l) c.f[l] = std::fma(a.f[l], b.f[l], c.f[l]);
  return c;
}
inline __m512i _mm512_sub_epi32(__m512i a, __m512i b) {
  for (int l = 0; l < 16; ++l) a.i32[l] -= b.i32[l];
  return a;
}
inline __m512 _mm512_cvtepi32_ps(__m512i a) {
  __m512 r;
  for (int l = 0; l < 16; ++l) r.f[l] = static_cast<float>(a.i32[l]);
  return r;
}
inline __m512 _mm512_maskz_loadu_ps(__mmask16 m, const float* p) {
  __m512 r{};
  for (int l = 0; l < 16; ++l) r.f[l] = (m >> l) & 1 ? p[l] : 0.0f;
  return r;
}
inline void _mm512_mask_storeu_ps(float* p, __mmask16 m, __m512 v) {
  for (int l = 0; l < 16; ++l) {
    if ((m >> l) & 1) p[l] = v.f[l];
  }
}

inline __m512i _mm512_load_si512(const void* p) { return _mm512_loadu_si512(p); }
inline void _mm512_store_si512(void* p, __m512i v) { std::memcpy(p, v.u8, 64); }

// AMX: eight tile registers of up to 16 rows x 64 bytes, shaped by the last _tile_loadconfig.
struct TileState {
  uint8_t rows[8] = {};
  uint16_t colsb[8] = {};
  uint8_t data[8][16][64] = {};
};
inline TileState& Tiles() {
  thread_local TileState t;
  return t;
}
inline void _tile_loadconfig(const void* cfg) {
  const auto* c = static_cast<const uint8_t*>(cfg);
  ASSERT_EQ(c[0], 1) << "palette";
  for (int t = 0; t < 8; ++t) {
    std::memcpy(&Tiles().colsb[t], c + 16 + 2 * t, 2);
    Tiles().rows[t] = c[48 + t];
    ASSERT_LE(Tiles().rows[t], 16);
    ASSERT_LE(Tiles().colsb[t], 64);
  }
}
inline void _tile_zero(int t) { std::memset(Tiles().data[t], 0, sizeof(Tiles().data[t])); }
inline void _tile_loadd(int t, const void* base, int64_t stride) {
  _tile_zero(t);
  for (int r = 0; r < Tiles().rows[t]; ++r) {
    std::memcpy(Tiles().data[t][r], static_cast<const uint8_t*>(base) + r * stride,
                Tiles().colsb[t]);
  }
}
inline void _tile_stored(int t, void* base, int64_t stride) {
  for (int r = 0; r < Tiles().rows[t]; ++r) {
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, Tiles().data[t][r], Tiles().colsb[t]);
  }
}
// C[m][n] += sum over k < colsb(a) / 4, i < 4 of signed a[m][4k + i] * b[k][4n + i], b unsigned
// (tdpbsud) or signed (tdpbssd).
template <typename B>
void TileDot(int c, int a, int b) {
  TileState& s = Tiles();
  ASSERT_EQ(s.rows[c], s.rows[a]);
  ASSERT_EQ(s.colsb[a] / 4, s.rows[b]);
  ASSERT_EQ(s.colsb[c], s.colsb[b]);
  for (int m = 0; m < s.rows[c]; ++m) {
    for (int n = 0; n < s.colsb[c] / 4; ++n) {
      int32_t acc;
      std::memcpy(&acc, &s.data[c][m][4 * n], 4);
      for (int k = 0; k < s.colsb[a] / 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          acc += static_cast<int8_t>(s.data[a][m][4 * k + i]) *
                 static_cast<B>(s.data[b][k][4 * n + i]);
        }
      }
      std::memcpy(&s.data[c][m][4 * n], &acc, 4);
    }
  }
}
inline void _tile_dpbsud(int c, int a, int b) { TileDot<uint8_t>(c, a, b); }
inline void _tile_dpbssd(int c, int a, int b) { TileDot<int8_t>(c, a, b); }
inline __m512i _mm512_sub_epi8(__m512i a, __m512i b) {
  for (int j = 0; j < 64; ++j) a.u8[j] = static_cast<uint8_t>(a.u8[j] - b.u8[j]);
  return a;
}
// The 16 bytes in each 128-bit lane; a byte lookup within each lane (the index's low 4 bits, 0
// where its top bit is set).
inline __m512i _mm512_broadcast_i32x4(__m128i a) {
  __m512i r;
  for (int j = 0; j < 64; ++j) r.u8[j] = a.u8[j % 16];
  return r;
}
inline __m512i _mm512_shuffle_epi8(__m512i a, __m512i b) {
  __m512i r;
  for (int j = 0; j < 64; ++j) {
    r.u8[j] = (b.u8[j] & 0x80) ? 0 : a.u8[(j / 16) * 16 + (b.u8[j] & 0x0F)];
  }
  return r;
}

#include "kernels/cpu/qgemm_avx512vnni_impl.h"
// After the VNNI tile: the AMX tile uses its helpers.
#include "kernels/cpu/qgemm_amx_impl.h"

}  // namespace emulated
namespace {

void CheckEqualsScalarPath(const QuantKernelSet& emu) {
  // {bits, sub, has_min, offset, act, super}: the ggml types' formats (quant_format.h).
  const std::vector<QuantFormat> formats = {
      {8, 32, false, 128, ActQuant::kQ8_0},       {4, 32, false, 8, ActQuant::kQ8_0},
      {4, 32, true, 0, ActQuant::kQ8_1},          {6, 32, false, 16, ActQuant::kQ8_0},
      {6, 32, true, 0, ActQuant::kQ8_1},          {4, 32, true, 0, ActQuant::kQ8_K, true},
      {6, 32, true, 0, ActQuant::kQ8_K, true},    {6, 16, false, 32, ActQuant::kQ8_K, true},
      {6, 16, false, 4, ActQuant::kQ8_K, true},   {4, 16, true, 0, ActQuant::kQ8_K, true},
      {8, 32, false, 128, ActQuant::kQ8_K, true}, {4, 32, true, 0, ActQuant::kQ8_K}};
  QuantFormat mxfp4{4, 32, false, 128, ActQuant::kQ8_0};  // 4-bit indices into MXFP4's quants
  mxfp4.table = true;
  mxfp4.values = {128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116};
  std::vector<QuantFormat> all = formats;
  all.push_back(mxfp4);
  for (bool super : {false, true}) {  // IQ4_NL / IQ4_XS: kvalues_iq4nl + 128, extremes 1 and 241
    QuantFormat iq4{4, 32, false, 128, super ? ActQuant::kQ8_K : ActQuant::kQ8_0, super};
    iq4.table = true;
    iq4.values = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
    all.push_back(iq4);
  }
  for (const QuantFormat& fmt : all) {
    for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 16, 256},
                                                                             {3, 40, 512},
                                                                             {9, 67, 256},
                                                                             {5, 33, 48},
                                                                             {21, 35, 256},
                                                                             {9, 50, 256},
                                                                             {37, 34, 256}}) {
      if (k % (fmt.super ? 256 : fmt.sub) != 0) continue;
      SCOPED_TRACE("bits=" + std::to_string(fmt.bits) + " sub=" + std::to_string(fmt.sub) +
                   " min=" + std::to_string(fmt.has_min) + " super=" + std::to_string(fmt.super) +
                   " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                   " k=" + std::to_string(k));
      const std::vector<float> raw = astr::testing::RandomFloats(n * k, 5 + n, 0.0f, 1.0f);
      const int max_q = (1 << fmt.bits) - 1;
      const PackedMatrix pm =
          PackedMatrix::FromQuantRows(n, k, fmt, [&](int64_t r, const QuantRowOut& out) {
            for (int64_t c = 0; c < k; ++c) out.q[c] = static_cast<uint8_t>(raw[r * k + c] * max_q);
            for (int64_t s = 0; s < k / fmt.sub; ++s) {
              if (fmt.super) {  // int8 scales and mins times f16 factors (0.0625, -0.03125 ...)
                const int64_t u = s * fmt.sub / 256;
                out.d[u] = 0.0625f * static_cast<float>(1 + (r + u) % 3);
                out.sc[s] = static_cast<int8_t>(raw[r * k + s] * 200.0f - 100.0f);
                out.scale[s] = out.d[u] * out.sc[s];
                if (out.min != nullptr) {
                  out.dmin[u] = -0.03125f;
                  out.m[s] = static_cast<int8_t>(raw[r * k + s + 1] * 63.0f);
                  out.min[s] = out.dmin[u] * out.m[s];
                }
                continue;
              }
              out.scale[s] = (raw[r * k + s] - 0.5f) * 0.1f;
              if (out.min != nullptr) out.min[s] = raw[r * k + s + 1] - 0.5f;
            }
          });
      const std::vector<float> x = astr::testing::RandomFloats(m * k, 9 + m, -3.0f, 3.0f);
      const std::vector<float> y0 = astr::testing::RandomFloats(m * n, 2, -1.0f, 1.0f);
      for (bool accumulate : {false, true}) {
        std::vector<float> want = y0, got = y0;
        GemmIsa(Isa::kScalar, x.data(), k, m, pm, want.data(), n, accumulate, nullptr);
        QuantGemmWith(emu, x.data(), k, m, pm, got.data(), n, accumulate, nullptr);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
      }
    }
  }
}

TEST(CpuQuantGemmEmulatedTest, VnniEqualsScalarPathBitForBit) {
  CheckEqualsScalarPath(MakeQuantKernelSet<emulated::QuantTileAvx512Vnni, 4, 2>());
}

// The emulated AMX tile for the row counts the shapes above take (1, 3, 5, 9, 21 = 16 + 5 and
// 37 = 16 + 16 + 5, whose second 16-row tile reads the first's widened quants):
// every row count up to 16 would make this file take a minute to compile. One and two panels per
// tile (the shapes' odd panel counts end on a one-panel tile; n = 50 on a partial second panel).
template <int R>
void FillEmulatedAmxRows(QuantKernelSet* set) {
  set->kernels[QuantBitsIndex(8)][R - 1][0] = &emulated::QuantTileAmx<R, 1, 8>::Run;
  set->kernels[QuantBitsIndex(4)][R - 1][0] = &emulated::QuantTileAmx<R, 1, 4>::Run;
  set->kernels[QuantBitsIndex(6)][R - 1][0] = &emulated::QuantTileAmx<R, 1, 6>::Run;
  set->kernels[QuantBitsIndex(8)][R - 1][1] = &emulated::QuantTileAmx<R, 2, 8>::Run;
  set->kernels[QuantBitsIndex(4)][R - 1][1] = &emulated::QuantTileAmx<R, 2, 4>::Run;
  set->kernels[QuantBitsIndex(6)][R - 1][1] = &emulated::QuantTileAmx<R, 2, 6>::Run;
  set->kernels[QuantBitsIndex(kTableBits)][R - 1][0] =
      &emulated::QuantTileAmx<R, 1, kTableBits>::Run;
  set->kernels[QuantBitsIndex(kTableBits)][R - 1][1] =
      &emulated::QuantTileAmx<R, 2, kTableBits>::Run;
}

TEST(CpuQuantGemmEmulatedTest, AmxEqualsScalarPathBitForBit) {
  QuantKernelSet amx;
  amx.max_rows = 16;
  FillEmulatedAmxRows<1>(&amx);
  FillEmulatedAmxRows<3>(&amx);
  FillEmulatedAmxRows<5>(&amx);
  FillEmulatedAmxRows<9>(&amx);
  FillEmulatedAmxRows<16>(&amx);
  for (int panels : {1, 2}) {
    SCOPED_TRACE("panels per tile " + std::to_string(panels));
    amx.panels_per_tile = panels;
    CheckEqualsScalarPath(amx);
  }
}

}  // namespace
}  // namespace astr::cpu::internal
