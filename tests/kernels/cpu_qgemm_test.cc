// Tests of the block-quantized GEMM (WeightType::kQuant) on every ISA path this CPU runs:
// against a double reference computed here from the quants and the documented activation
// quantization, bit-identical results across paths, tilings, batches and threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/qgemm_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/test_util.h"

namespace astr::cpu {
namespace {

// Random weights in a format: quants, and scales / mins that f16 holds exactly (multiples of
// 2^-10 in [-2, 2)), so the reference sees exactly what the kernels see. With `super` the scales
// are such f16 factors per 256 elements times random int8 values.
struct QuantWeights {
  QuantFormat fmt;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> q;         // [n, k]
  std::vector<float> scale, min;  // [n, k / sub]
  std::vector<float> d, dmin;     // super: [n, k / 256]
  std::vector<int8_t> sc, m;      // super: [n, k / sub]
  double Value(int64_t r, int64_t c) const {
    const int64_t s = r * (k / fmt.sub) + c / fmt.sub;
    const double u = fmt.table ? fmt.values[q[r * k + c]] : q[r * k + c];
    return fmt.has_min ? scale[s] * u + min[s] : scale[s] * (u - fmt.offset);
  }
  // Sets scale = d * sc and min = dmin * m (super) after changing those.
  void DeriveScales() {
    if (!fmt.super) return;
    const int64_t subs = k / fmt.sub, per = 256 / fmt.sub;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t s = 0; s < subs; ++s) {
        const int64_t u = r * (k / 256) + s / per;
        scale[r * subs + s] = d[u] * sc[r * subs + s];
        min[r * subs + s] = dmin[u] * m[r * subs + s];
      }
    }
  }
  PackedMatrix Pack(ThreadPool* pool = nullptr) const {
    return PackedMatrix::FromQuantRows(
        n, k, fmt,
        [this](int64_t r, const QuantRowOut& out) {
          const int64_t subs = k / fmt.sub, units = k / 256;
          std::memcpy(out.q, q.data() + r * k, k);
          std::memcpy(out.scale, scale.data() + r * subs, subs * sizeof(float));
          if (out.min != nullptr) std::memcpy(out.min, min.data() + r * subs, subs * sizeof(float));
          if (!fmt.super) return;
          std::memcpy(out.d, d.data() + r * units, units * sizeof(float));
          std::memcpy(out.sc, sc.data() + r * subs, subs);
          if (out.dmin != nullptr) {
            std::memcpy(out.dmin, dmin.data() + r * units, units * sizeof(float));
            std::memcpy(out.m, m.data() + r * subs, subs);
          }
        },
        pool);
  }
};

int MaxQuant(const QuantFormat& fmt) { return (1 << fmt.bits) - 1; }

QuantWeights MakeWeights(const QuantFormat& fmt, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantWeights w{fmt, n, k, {}, {}, {}, {}, {}, {}, {}};
  const int max_q = MaxQuant(fmt);
  std::uniform_int_distribution<int> qd(0, max_q), sd(-2048, 2047), id(-128, 127);
  w.q.resize(n * k);
  for (auto& v : w.q) v = static_cast<uint8_t>(qd(rng));
  w.scale.resize(n * (k / fmt.sub));
  w.min.resize(w.scale.size());
  if (fmt.super) {
    w.d.resize(n * (k / 256));
    w.dmin.resize(w.d.size());
    for (auto& v : w.d) v = sd(rng) / 65536.0f;  // f16 values in [-1/32, 1/32)
    for (auto& v : w.dmin) v = sd(rng) / 65536.0f;
    w.sc.resize(w.scale.size());
    w.m.resize(w.scale.size());
    for (auto& v : w.sc) v = static_cast<int8_t>(id(rng));
    for (auto& v : w.m) v = static_cast<int8_t>(id(rng));
    w.DeriveScales();
    return w;
  }
  for (auto& v : w.scale) v = sd(rng) / 1024.0f;
  for (auto& v : w.min) v = sd(rng) / 1024.0f;
  return w;
}

std::string Name(const QuantFormat& f) {
  const char* act = f.act == ActQuant::kQ8_0   ? " q8_0"
                    : f.act == ActQuant::kQ8_1 ? " q8_1"
                                               : " q8_k";
  return "bits=" + std::to_string(f.bits) + " sub=" + std::to_string(f.sub) +
         (f.has_min ? " min" : " offset=" + std::to_string(f.offset)) + act +
         (f.super ? " super" : "") + (f.table ? " table" : "");
}

// MXFP4's format (worker/backends/cpu/quant_format.h): 4-bit indices into the quants 128 +
// {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}.
QuantFormat Mxfp4Format() {
  QuantFormat f{4, 32, false, 128, ActQuant::kQ8_0};
  f.table = true;
  f.values = {128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116};
  return f;
}

// IQ4_NL's (super: IQ4_XS's) 4-bit indices into kvalues_iq4nl + 128 (its extremes: 1 and 241).
QuantFormat Iq4Format(bool super) {
  QuantFormat f{4, 32, false, 128, super ? ActQuant::kQ8_K : ActQuant::kQ8_0, super};
  f.table = true;
  f.values = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
  return f;
}

// The ggml types' formats (worker/backends/cpu/quant_format.h), and the non-super forms too.
const std::vector<QuantFormat>& Formats() {
  static const std::vector<QuantFormat> formats = {
      {8, 32, false, 128, ActQuant::kQ8_0},        // Q8_0
      {4, 32, false, 8, ActQuant::kQ8_0},          // Q4_0
      {4, 32, true, 0, ActQuant::kQ8_1},           // Q4_1
      {4, 32, true, 0, ActQuant::kQ8_K, true},     // Q4_K
      {6, 32, false, 16, ActQuant::kQ8_0},         // Q5_0
      {6, 32, true, 0, ActQuant::kQ8_1},           // Q5_1
      {6, 32, true, 0, ActQuant::kQ8_K, true},     // Q5_K
      {6, 16, false, 32, ActQuant::kQ8_K, true},   // Q6_K
      {6, 16, false, 4, ActQuant::kQ8_K, true},    // Q3_K
      {4, 16, true, 0, ActQuant::kQ8_K, true},     // Q2_K
      {8, 32, false, 128, ActQuant::kQ8_K, true},  // a super 8-bit form
      Iq4Format(false),                            // IQ4_NL
      Iq4Format(true),                             // IQ4_XS
      {4, 32, true, 0, ActQuant::kQ8_K},
      {6, 16, false, 32, ActQuant::kQ8_K},
      {8, 16, false, 128, ActQuant::kQ8_K},
      Mxfp4Format(),
  };
  return formats;
}

float RoundF16(float f) {  // via the hardware-independent definition: nearest f16, ties even
  if (f == 0.0f || !std::isfinite(f)) return f;
  int e;
  std::frexp(f, &e);                       // |f| in [2^(e-1), 2^e)
  const int step = std::max(e - 11, -24);  // f16: 11 significant bits, subnormals below 2^-14
  return static_cast<float>(std::nearbyint(std::ldexp(static_cast<double>(f), -step)) *
                            std::ldexp(1.0, step));
}

// The activation rules of gemm.h, written out again: per element its int8 quant and its block's
// scale.
struct RefActivations {
  std::vector<int> q;
  std::vector<double> d;
};
RefActivations QuantizeReference(const float* x, int64_t k, ActQuant act) {
  RefActivations r{std::vector<int>(k), std::vector<double>(k)};
  const int64_t group = act == ActQuant::kQ8_K ? 256 : 32;
  for (int64_t g = 0; g < k; g += group) {
    const int64_t end = std::min(k, g + group);
    float amax = 0, max = 0;
    for (int64_t j = g; j < end; ++j) {
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    }
    for (int64_t j = g; j < end; ++j) {
      if (amax == 0) continue;
      if (act == ActQuant::kQ8_K) {
        const float iscale = -127.0f / max;
        r.q[j] = std::min(127, static_cast<int>(std::nearbyint(iscale * x[j])));
        r.d[j] = 1.0f / iscale;
      } else {
        r.q[j] = static_cast<int>(std::nearbyint(x[j] * (127.0f / amax)));
        r.d[j] = RoundF16(amax / 127.0f);
      }
    }
  }
  return r;
}

void CheckAgainstReference(Isa isa, const QuantFormat& fmt, int64_t m, int64_t n, int64_t k,
                           bool accumulate, int threads) {
  SCOPED_TRACE(std::string(IsaName(isa)) + " " + Name(fmt) + " m=" + std::to_string(m) +
               " n=" + std::to_string(n) + " k=" + std::to_string(k) + (accumulate ? " acc" : "") +
               " threads=" + std::to_string(threads));
  const QuantWeights w = MakeWeights(fmt, n, k, static_cast<uint32_t>(n * 31 + k));
  ThreadPool pool(threads);
  const PackedMatrix pm = w.Pack(&pool);
  ASSERT_EQ(pm.type(), WeightType::kQuant);
  const int64_t ldx = k + 3, ldy = n + 5;
  const std::vector<float> x = testing::RandomFloats(m * ldx, 7 + m, -2.0f, 2.0f);
  const std::vector<float> y0 = testing::RandomFloats(m * ldy, 9, -1.0f, 1.0f);
  std::vector<float> y = y0;
  GemmIsa(isa, x.data(), ldx, m, pm, y.data(), ldy, accumulate, &pool);
  for (int64_t i = 0; i < m; ++i) {
    const RefActivations xq = QuantizeReference(x.data() + i * ldx, k, fmt.act);
    for (int64_t j = 0; j < n; ++j) {
      double ref = accumulate ? y0[i * ldy + j] : 0.0, mag = std::fabs(ref), exact = ref;
      for (int64_t c = 0; c < k; ++c) {
        const double wv = w.Value(j, c);
        mag += std::fabs(xq.q[c] * xq.d[c] * wv);
        exact += x[i * ldx + c] * wv;
        if (!fmt.has_min) ref += xq.q[c] * xq.d[c] * wv;
      }
      if (fmt.has_min) {  // scale part per element; min part from each sub-block's sum
        for (int64_t sb = 0; sb < k / fmt.sub; ++sb) {
          const int64_t c0 = sb * fmt.sub;
          int sum = 0;
          for (int64_t c = c0; c < c0 + fmt.sub; ++c) {
            ref += xq.q[c] * xq.d[c] * w.scale[j * (k / fmt.sub) + sb] * w.q[j * k + c];
            sum += xq.q[c];
          }
          double factor = static_cast<float>(xq.d[c0] * sum);
          if (fmt.act == ActQuant::kQ8_1) factor = RoundF16(static_cast<float>(factor));
          ref += factor * w.min[j * (k / fmt.sub) + sb];
        }
      }
      // Against the quantized activations: only float rounding of the per-block steps.
      ASSERT_NEAR(y[i * ldy + j], ref, 1e-5 * (mag + 1e-3)) << "at i=" << i << " j=" << j;
      // Against the exact activations: the int8 rounding, well under 1% of the magnitude.
      ASSERT_NEAR(y[i * ldy + j], exact, 1e-2 * (mag + 1e-3)) << "at i=" << i << " j=" << j;
    }
    for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], y0[i * ldy + j]);
  }
}

TEST(CpuQuantGemmTest, MatchesReferenceOnEveryIsaAndFormat) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 32},  {16, 64},  {17, 96},
                                                           {40, 48}, {33, 256}, {18, 512}};
  for (Isa isa : AvailableIsas()) {
    for (const QuantFormat& fmt : Formats()) {
      for (auto [n, k] : shapes) {
        if (k % (fmt.super ? 256 : fmt.sub) != 0) continue;
        for (int64_t m : {1, 2, 3, 5, 9}) {
          CheckAgainstReference(isa, fmt, m, n, k, (m + n) % 2 == 0, m % 2 == 0 ? 2 : 1);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Every path, every tiling, batch and thread count gives the same bits for a row.
TEST(CpuQuantGemmTest, BitIdenticalAcrossIsasBatchesAndThreads) {
  for (const QuantFormat& fmt : Formats()) {
    SCOPED_TRACE(Name(fmt));
    const int64_t m = 23, n = 75, k = fmt.super ? 512 : 320;
    const QuantWeights w = MakeWeights(fmt, n, k, 5);
    const PackedMatrix pm = w.Pack();
    const std::vector<float> x = testing::RandomFloats(m * k, 3, -1.0f, 1.0f);
    ThreadPool one(1), three(3);
    std::vector<float> ref(m * n);
    GemmIsa(Isa::kScalar, x.data(), k, m, pm, ref.data(), n, false, &one);
    for (Isa isa : AvailableIsas()) {
      SCOPED_TRACE(IsaName(isa));
      std::vector<float> y(m * n);
      GemmIsa(isa, x.data(), k, m, pm, y.data(), n, false, &three);
      ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)));
      for (int64_t i = 0; i < m; i += 4) {
        std::vector<float> y1(n), y3(3 * n);
        GemmIsa(isa, x.data() + i * k, k, 1, pm, y1.data(), n, false, &three);
        ASSERT_EQ(0, std::memcmp(y1.data(), &ref[i * n], n * sizeof(float))) << "row " << i;
        const int64_t start = std::min(i, m - 3);
        GemmIsa(isa, x.data() + start * k, k, 3, pm, y3.data(), n, false, nullptr);
        ASSERT_EQ(0, std::memcmp(&y3[(i - start) * n], &ref[i * n], n * sizeof(float)));
      }
    }
    // The public entry point, and a large row split.
    std::vector<float> ya(m * n);
    Gemm(x.data(), k, m, pm, ya.data(), n, false, &three);
    ASSERT_EQ(0, std::memcmp(ya.data(), ref.data(), ya.size() * sizeof(float)));
  }
}

TEST(CpuQuantGemmTest, ZeroBlocksAndPaddingContributeNothing) {
  // k = 48 with 16-element sub-blocks pads the second 32-block; an all-zero activation block has
  // scale 0.
  const QuantFormat fmt{6, 16, false, 32};
  const QuantWeights w = MakeWeights(fmt, 20, 48, 8);
  const PackedMatrix pm = w.Pack();
  EXPECT_EQ(pm.k_blocks(), 2);
  std::vector<float> x(48, 0.0f);
  for (int64_t c = 0; c < 16; ++c) x[c] = 0.5f;
  for (Isa isa : AvailableIsas()) {
    std::vector<float> y(20);
    GemmIsa(isa, x.data(), 48, 1, pm, y.data(), 20, false, nullptr);
    for (int64_t j = 0; j < 20; ++j) {
      double ref = 0;
      // 0.5 quantizes to q = 127 with d = f16(0.5 / 127).
      for (int64_t c = 0; c < 16; ++c) ref += 127 * RoundF16(0.5f / 127.0f) * w.Value(j, c);
      ASSERT_NEAR(y[j], ref, 1e-5 * (std::fabs(ref) + 1)) << IsaName(isa) << " j=" << j;
    }
  }
}

// The largest sums the formats allow (every quant at its maximum, every activation at +-127) must
// not overflow any path's intermediate integers.
TEST(CpuQuantGemmTest, ExtremeQuantsDoNotOverflow) {
  for (const QuantFormat& fmt : Formats()) {
    SCOPED_TRACE(Name(fmt));
    for (int sign : {1, -1}) {
      QuantWeights w = MakeWeights(fmt, 16, 256, 2);
      // The largest quant (a table format's: the index of its largest value, MXFP4's 7).
      const int extreme = fmt.table ? 7 : MaxQuant(fmt);
      for (auto& q : w.q) q = static_cast<uint8_t>(extreme);
      for (auto& v : w.scale) v = 1.0f / 64;
      for (auto& v : w.min) v = 0.0f;
      for (auto& v : w.d) v = 1.0f / 64;
      for (auto& v : w.sc) v = 1;
      for (auto& v : w.m) v = 0;
      w.DeriveScales();
      const PackedMatrix pm = w.Pack();
      const std::vector<float> x(256, 3.0f * sign);  // every block quantizes to +-127
      for (Isa isa : AvailableIsas()) {
        std::vector<float> y(16);
        GemmIsa(isa, x.data(), 256, 1, pm, y.data(), 16, false, nullptr);
        const double per =
            (fmt.table ? fmt.values[extreme] : extreme) - (fmt.has_min ? 0 : fmt.offset);
        const double want = sign * 3.0 * 256 * per / 64;
        for (float v : y) ASSERT_NEAR(v, want, 1e-3 * std::fabs(want) + 1e-3) << IsaName(isa);
      }
    }
  }
}

TEST(CpuQuantGemmTest, PackedSizeMatchesTheFormat) {
  // 4-bit, 32-element sub-blocks with mins: 256 quant bytes + 2 x 16 f16 per 16 x 32 block.
  const QuantWeights w = MakeWeights({4, 32, true, 0}, 33, 64, 1);
  const PackedMatrix pm = w.Pack();
  EXPECT_EQ(pm.block_bytes(), 256 + 64);
  EXPECT_EQ(pm.bytes(), static_cast<size_t>(3 * 2 * (256 + 64)));  // 3 panels x 2 blocks
  const QuantWeights w8 = MakeWeights({8, 16, false, 128}, 16, 32, 1);
  EXPECT_EQ(w8.Pack().block_bytes(), 512 + 64);
  // 6 bits: 256 + 128 quant bytes.
  EXPECT_EQ(MakeWeights({6, 32, false, 16}, 16, 32, 1).Pack().block_bytes(), 384 + 32);
  // Super (Q4_K): int8 scales and mins per block, a header f16 d[16] + dmin[16] per 8 blocks.
  const PackedMatrix q4k = MakeWeights({4, 32, true, 0, ActQuant::kQ8_K, true}, 20, 512, 1).Pack();
  EXPECT_EQ(q4k.block_bytes(), 256 + 32);
  EXPECT_EQ(q4k.unit_header_bytes(), 64);
  EXPECT_EQ(q4k.bytes(), static_cast<size_t>(2 * 2 * (64 + 8 * (256 + 32))));  // 4.625 bpw
  // Q6_K: 6-bit quants, two int8 scales per block, a header f16 d[16]: 6.5625 bits per weight.
  const PackedMatrix q6k =
      MakeWeights({6, 16, false, 32, ActQuant::kQ8_K, true}, 16, 256, 1).Pack();
  EXPECT_EQ(q6k.bytes(), static_cast<size_t>(32 + 8 * (384 + 32)));
  EXPECT_EQ(q6k.bytes() * 8, static_cast<size_t>(16 * 256 * 6.5625));
}

TEST(CpuQuantGemmTest, VnniDetectionIsConsistent) {
  if (CpuHasAvx512Vnni()) {
    EXPECT_GE(DetectIsa(), Isa::kAvx512);
  }
  if (CpuHasAmx()) {
    EXPECT_TRUE(CpuHasAvx512Vnni());
  }
  if (CpuUsesAmx()) {
    EXPECT_TRUE(CpuHasAmx());
  }
}

// Where AMX runs, the AVX-512 paths take its tiles for several rows (GemmIsa above); here the real
// AMX tiles are compared with the real VNNI tiles directly, for every format, row count up to and
// past one 16-row tile, and thread count.
TEST(CpuQuantGemmTest, AmxTilesEqualVnniTilesBitForBit) {
  if (!CpuHasAmx()) GTEST_SKIP() << "this CPU (or OS) runs no AMX-INT8";
  ThreadPool two(2);
  // n = 75: a last tile of one partial panel; n = 90: of two panels, the second partial.
  for (const QuantFormat& fmt : Formats()) {
    for (const int64_t n : {75, 90}) {
      const int64_t k = fmt.super ? 512 : 320;
      const PackedMatrix pm = MakeWeights(fmt, n, k, 11).Pack();
      for (int64_t m : {1, 2, 7, 16, 37}) {
        SCOPED_TRACE(Name(fmt) + " n=" + std::to_string(n) + " m=" + std::to_string(m));
        const std::vector<float> x = testing::RandomFloats(m * k, 13 + m, -1.5f, 1.5f);
        for (bool accumulate : {false, true}) {
          const std::vector<float> y0 = testing::RandomFloats(m * n, 4, -1.0f, 1.0f);
          std::vector<float> vnni = y0, amx = y0;
          internal::QuantGemmWith(internal::QuantKernelsAvx512Vnni(), x.data(), k, m, pm,
                                  vnni.data(), n, accumulate, &two);
          internal::QuantGemmWith(internal::QuantKernelsAmx(), x.data(), k, m, pm, amx.data(), n,
                                  accumulate, m % 2 == 0 ? &two : nullptr);
          ASSERT_EQ(0, std::memcmp(vnni.data(), amx.data(), vnni.size() * sizeof(float)));
        }
      }
    }
  }
}

// The AMX tiles widen 4- and 6-bit quants once per GEMM call and panel pair, for every 16-row
// tile of that call: weights rewritten in place between two calls (a weight update reuses the
// storage) must be read anew, not from the previous call's widened copy.
TEST(CpuQuantGemmTest, AmxTilesReadWeightsRewrittenInPlace) {
  if (!CpuHasAmx()) GTEST_SKIP() << "this CPU (or OS) runs no AMX-INT8";
  const int64_t m = 40, n = 48;
  for (const QuantFormat& fmt : Formats()) {
    SCOPED_TRACE(Name(fmt));
    const int64_t k = fmt.super ? 512 : 320;
    PackedMatrix a = MakeWeights(fmt, n, k, 21).Pack();
    const PackedMatrix b = MakeWeights(fmt, n, k, 22).Pack();
    const std::vector<float> x = testing::RandomFloats(m * k, 5, -1.5f, 1.5f);
    std::vector<float> first(m * n), second(m * n), want(m * n);
    internal::QuantGemmWith(internal::QuantKernelsAmx(), x.data(), k, m, a, first.data(), n, false,
                            nullptr);
    const void* storage = a.quant_panel(0);
    const PackedMatrix rewritten = b.Clone(&a);
    ASSERT_EQ(storage, rewritten.quant_panel(0));
    internal::QuantGemmWith(internal::QuantKernelsAmx(), x.data(), k, m, rewritten, second.data(),
                            n, false, nullptr);
    internal::QuantGemmWith(internal::QuantKernelsAvx512Vnni(), x.data(), k, m, b, want.data(), n,
                            false, nullptr);
    ASSERT_EQ(0, std::memcmp(want.data(), second.data(), want.size() * sizeof(float)));
    ASSERT_NE(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float)));
  }
}

}  // namespace
}  // namespace astr::cpu
