// Tests of astr::cpu::Gemm on every ISA path this CPU runs: values against a double reference
// computed here (independent of the kernels), and bit-exact batch invariance across m, row blocking
// and threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/test_util.h"

namespace astr::cpu {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  return testing::RandomFloats(n, seed, -1.0f, 1.0f);
}

float RoundBf16(float f) {  // round-to-nearest-even, as the packing and the bf16-dot path do
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&f, &b, 4);
  return f;
}

// The bf16 bits of `w` rounded to nearest even.
std::vector<uint16_t> Bf16Bits(const std::vector<float>& w) {
  std::vector<uint16_t> raw(w.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const float r = RoundBf16(w[i]);
    uint32_t b;
    std::memcpy(&b, &r, 4);
    raw[i] = static_cast<uint16_t>(b >> 16);
  }
  return raw;
}

struct Case {
  int64_t m, n, k;
  WeightType type;
  bool accumulate;
  int threads;
};

std::string Name(Isa isa, const Case& c) {
  return std::string(IsaName(isa)) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
         " k=" + std::to_string(c.k) + (c.type == WeightType::kBF16 ? " bf16" : " f32") +
         (c.accumulate ? " acc" : "") + " threads=" + std::to_string(c.threads);
}

// Checks GemmIsa against sum_k x[i, k] w[j, k] in double, with x and w rounded to bf16 where the
// path does. Error bound relative to sum |x w| (robust to cancellation).
void CheckCase(Isa isa, const Case& c) {
  SCOPED_TRACE(Name(isa, c));
  const int64_t ldx = c.k + 3, ldy = c.n + 5;  // strides wider than the rows
  const std::vector<float> x = Random(c.m * ldx, 1 + c.m * 7 + c.k);
  const std::vector<float> w = Random(c.n * c.k, 2 + c.n * 3 + c.k);
  const std::vector<float> y0 = Random(c.m * ldy, 3);
  const PackedMatrix pm = PackedMatrix::FromF32(w.data(), c.n, c.k, c.type);
  ASSERT_EQ(pm.n(), c.n);
  ASSERT_EQ(pm.k(), c.k);
  std::vector<float> y = y0;
  ThreadPool pool(c.threads);
  GemmIsa(isa, x.data(), ldx, c.m, pm, y.data(), ldy, c.accumulate, &pool);

  const bool bf16_w = c.type == WeightType::kBF16;
  const bool bf16_x = bf16_w && isa == Isa::kAvx512Bf16;
  const double tol = bf16_x ? 1e-4 : 1e-5;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const double xv = bf16_x ? RoundBf16(x[i * ldx + kk]) : x[i * ldx + kk];
        const double wv = bf16_w ? RoundBf16(w[j * c.k + kk]) : w[j * c.k + kk];
        ref += xv * wv;
        mag += std::fabs(xv * wv);
      }
      if (c.accumulate) {
        ref += y0[i * ldy + j];
        mag += std::fabs(y0[i * ldy + j]);
      }
      ASSERT_NEAR(y[i * ldy + j], ref, tol * (mag + 1e-3)) << "at i=" << i << " j=" << j;
    }
    for (int64_t j = c.n; j < ldy; ++j) {  // padding columns untouched
      ASSERT_EQ(y[i * ldy + j], y0[i * ldy + j]) << "wrote past n at i=" << i << " j=" << j;
    }
  }
}

TEST(CpuGemmTest, MatchesDoubleReferenceOnEveryIsa) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},   {16, 2},   {17, 3}, {31, 33},
                                                           {64, 64}, {70, 129}, {5, 300}};
  std::vector<int64_t> ms = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 64, 130};
  for (Isa isa : AvailableIsas()) {
    for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
      for (auto [n, k] : shapes) {
        for (int64_t m : ms) {
          if (isa == Isa::kScalar && m > 17 && n * k > 2000) continue;  // keep the reference quick
          const bool acc = (m + n) % 2 == 0;
          const int threads = (m + k) % 3 == 0 ? 1 : 2;
          CheckCase(isa, {m, n, k, type, acc, threads});
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(CpuGemmTest, AccumulateAndThreadsOnLargerShape) {
  for (Isa isa : AvailableIsas()) {
    for (bool acc : {false, true}) {
      for (int threads : {1, 2}) {
        CheckCase(isa, {9, 200, 257, WeightType::kBF16, acc, threads});
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Row i of any call equals the same row computed alone, with 1 or 2 threads, bit for bit.
TEST(CpuGemmTest, BatchInvariantAcrossMAndThreads) {
  for (Isa isa : AvailableIsas()) {
    for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
      for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{100, 257}, {37, 64}, {8, 31}}) {
        SCOPED_TRACE(std::string(IsaName(isa)) + " n=" + std::to_string(n) +
                     " k=" + std::to_string(k) + (type == WeightType::kBF16 ? " bf16" : " f32"));
        const int64_t m = 37;
        const std::vector<float> x = Random(m * k, 11);
        const std::vector<float> w = Random(n * k, 12);
        const PackedMatrix pm = PackedMatrix::FromF32(w.data(), n, k, type);
        ThreadPool one(1), two(2);
        std::vector<float> y_batch1(m * n), y_batch2(m * n);
        GemmIsa(isa, x.data(), k, m, pm, y_batch1.data(), n, false, &one);
        GemmIsa(isa, x.data(), k, m, pm, y_batch2.data(), n, false, &two);
        ASSERT_EQ(0, std::memcmp(y_batch1.data(), y_batch2.data(), m * n * sizeof(float)));
        // Every row alone, and every window of 5 rows starting at it (other neighbours).
        for (int64_t i = 0; i < m; ++i) {
          std::vector<float> y1(n), y5(5 * n);
          GemmIsa(isa, x.data() + i * k, k, 1, pm, y1.data(), n, false, &two);
          ASSERT_EQ(0, std::memcmp(y1.data(), &y_batch1[i * n], n * sizeof(float))) << "row " << i;
          const int64_t start = std::max<int64_t>(0, std::min(i, m - 5));
          GemmIsa(isa, x.data() + start * k, k, 5, pm, y5.data(), n, false, nullptr);
          ASSERT_EQ(0, std::memcmp(&y5[(i - start) * n], &y_batch1[i * n], n * sizeof(float)))
              << "row " << i << " in a window of 5";
        }
        // Through the public entry point too (whatever ActiveIsa() is).
        std::vector<float> ya(m * n), yb(n);
        Gemm(x.data(), k, m, pm, ya.data(), n, false, &two);
        Gemm(x.data() + 20 * k, k, 1, pm, yb.data(), n, false, nullptr);
        ASSERT_EQ(0, std::memcmp(yb.data(), &ya[20 * n], n * sizeof(float)));
      }
    }
  }
}

// Many rows, few outputs: the split goes over rows and must not change any value either.
TEST(CpuGemmTest, RowSplitIsInvariant) {
  for (Isa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    const int64_t m = 300, n = 5, k = 96;
    const std::vector<float> x = Random(m * k, 21), w = Random(n * k, 22);
    const PackedMatrix pm = PackedMatrix::FromF32(w.data(), n, k, WeightType::kBF16);
    ThreadPool two(2);
    std::vector<float> ya(m * n), yb(m * n);
    GemmIsa(isa, x.data(), k, m, pm, ya.data(), n, false, &two);
    GemmIsa(isa, x.data(), k, m, pm, yb.data(), n, false, nullptr);
    ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), m * n * sizeof(float)));
  }
}

TEST(CpuGemmTest, PackingFromBf16MatchesFromF32) {
  const int64_t n = 19, k = 7;
  const std::vector<float> w = Random(n * k, 31);
  const std::vector<uint16_t> raw = Bf16Bits(w);
  const PackedMatrix a = PackedMatrix::FromF32(w.data(), n, k, WeightType::kBF16);
  const PackedMatrix b = PackedMatrix::FromBf16(raw.data(), n, k);
  ASSERT_EQ(a.bytes(), b.bytes());
  ThreadPool pool(2);
  const PackedMatrix c = PackedMatrix::FromBf16Rows(
      n, k, [&](int64_t row) { return raw.data() + row * k; }, &pool);
  ASSERT_EQ(c.bytes(), a.bytes());
  EXPECT_EQ(0, std::memcmp(a.bf16_panel(0), c.bf16_panel(0), a.bytes()));
  // An even k, and packing into a matrix packed from other values before.
  const int64_t k2 = 8;
  const std::vector<float> w2 = Random(n * k2, 32);
  const std::vector<uint16_t> raw2 = Bf16Bits(w2);
  const PackedMatrix want = PackedMatrix::FromF32(w2.data(), n, k2, WeightType::kBF16);
  PackedMatrix old = PackedMatrix::FromF32(Random(n * k2, 33).data(), n, k2, WeightType::kBF16);
  const PackedMatrix got = PackedMatrix::FromBf16Rows(
      n, k2, [&](int64_t row) { return raw2.data() + row * k2; }, &pool, &old);
  EXPECT_EQ(old.bytes(), 0u);
  ASSERT_EQ(got.bytes(), want.bytes());
  EXPECT_EQ(0, std::memcmp(want.bf16_panel(0), got.bf16_panel(0), want.bytes()));
  EXPECT_EQ(a.bytes(),
            static_cast<size_t>(2 * 16 * 4 * 2 * 2));  // 2 panels x 4 pairs x 16 x 2 bf16
  EXPECT_EQ(0, std::memcmp(a.bf16_panel(0), b.bf16_panel(0), a.bytes()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.bf16_panel(0)) % 64, 0u);
}

// UnpackRows gives back exactly the packed values (the bf16 rounding of the input, or the f32
// input itself); Clone copies every byte; packing into a reused matrix's storage gives the same
// bytes as packing into fresh memory, whatever that storage held before, and takes it.
TEST(CpuGemmTest, UnpackCloneAndPackingIntoReusedStorage) {
  const int64_t n = 37, k = 13;  // a partial last panel and an odd k: padding in both
  for (WeightType type : {WeightType::kBF16, WeightType::kF32}) {
    SCOPED_TRACE(type == WeightType::kBF16 ? "bf16" : "f32");
    const std::vector<float> w = Random(n * k, 41);
    const PackedMatrix pm = PackedMatrix::FromF32(w.data(), n, k, type);
    std::vector<float> rows(5 * k);
    pm.UnpackRows(30, 5, rows.data());
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t kk = 0; kk < k; ++kk) {
        const float want =
            type == WeightType::kBF16 ? RoundBf16(w[(30 + r) * k + kk]) : w[(30 + r) * k + kk];
        ASSERT_EQ(rows[r * k + kk], want) << "row " << 30 + r << " k " << kk;
      }
    }
    const PackedMatrix copy = pm.Clone();
    ASSERT_TRUE(copy.SameLayout(pm));
    EXPECT_EQ(0, std::memcmp(copy.panel(0), pm.panel(0), pm.bytes()));

    const std::vector<float> other = Random(n * k, 42);
    PackedMatrix old = PackedMatrix::FromF32(other.data(), n, k, type);
    const void* storage = old.panel(0);
    const auto rows_of = [&](int64_t row, int64_t count, float* out) {
      std::memcpy(out, w.data() + row * k, static_cast<size_t>(count * k) * sizeof(float));
    };
    const PackedMatrix reused = PackedMatrix::FromF32Rows(n, k, type, rows_of, nullptr, &old);
    EXPECT_EQ(reused.panel(0), storage);
    EXPECT_EQ(old.bytes(), 0u);  // taken
    ASSERT_EQ(reused.bytes(), pm.bytes());
    EXPECT_EQ(0, std::memcmp(reused.panel(0), pm.panel(0), pm.bytes()));

    // Another layout's storage is not taken.
    PackedMatrix wrong = PackedMatrix::FromF32(other.data(), n - 1, k, type);
    const PackedMatrix fresh = PackedMatrix::FromF32Rows(n, k, type, rows_of, nullptr, &wrong);
    EXPECT_NE(wrong.bytes(), 0u);
    EXPECT_EQ(0, std::memcmp(fresh.panel(0), pm.panel(0), pm.bytes()));
  }
}

TEST(CpuGemmTest, ActiveIsaIsAvailable) {
  const std::vector<Isa> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_EQ(isas.back(), DetectIsa());
  EXPECT_LE(ActiveIsa(), DetectIsa());
}

}  // namespace
}  // namespace astr::cpu
