// Tests of the ops in kernels/cpu/ops.h on every ISA path, against double references computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "tests/support/test_util.h"

namespace astr::cpu {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  return testing::RandomFloats(n, seed, lo, hi);
}

const std::vector<int64_t> kDims = {1, 7, 8, 15, 16, 17, 33, 64, 100, 2048};

TEST(CpuOpsTest, RmsNormAndAddRmsNorm) {
  for (Isa isa : AvailableIsas()) {
    for (int64_t dim : kDims) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " dim=" + std::to_string(dim));
      const int64_t rows = 3, ldx = dim + 2, ldy = dim + 1, ldd = dim + 3;
      const float eps = 1e-5f;
      std::vector<float> x = Random(rows * ldx, 1), w = Random(dim, 2), d = Random(rows * ldd, 3);
      std::vector<float> y(rows * ldy, 0);
      RmsNormIsa(isa, x.data(), ldx, w.data(), eps, rows, dim, y.data(), ldy);
      std::vector<float> x2 = x, y2(rows * ldy, 0);
      AddRmsNormIsa(isa, x2.data(), ldx, d.data(), ldd, w.data(), eps, rows, dim, y2.data(), ldy);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0, ss2 = 0;
        for (int64_t i = 0; i < dim; ++i) {
          const double s = static_cast<double>(x[r * ldx + i]) + d[r * ldd + i];
          ss += static_cast<double>(x[r * ldx + i]) * x[r * ldx + i];
          ss2 += s * s;
        }
        const double inv = 1 / std::sqrt(ss / dim + eps), inv2 = 1 / std::sqrt(ss2 / dim + eps);
        for (int64_t i = 0; i < dim; ++i) {
          const double ref = x[r * ldx + i] * inv * w[i];
          EXPECT_NEAR(y[r * ldy + i], ref, 1e-5 * std::fabs(ref) + 1e-6);
          const double sum = static_cast<double>(x[r * ldx + i]) + d[r * ldd + i];
          EXPECT_NEAR(x2[r * ldx + i], sum, 1e-6 * std::fabs(sum) + 1e-7);
          const double ref2 = sum * inv2 * w[i];
          EXPECT_NEAR(y2[r * ldy + i], ref2, 1e-5 * std::fabs(ref2) + 1e-6);
        }
      }
      // In place (y aliases x).
      std::vector<float> xi = x;
      RmsNormIsa(isa, xi.data(), ldx, w.data(), eps, rows, dim, xi.data(), ldx);
      for (int64_t i = 0; i < dim; ++i) EXPECT_EQ(xi[i], y[i]);
    }
  }
}

void RopeReference(std::vector<double>* x, int64_t ldx, int64_t tokens, int64_t heads,
                   int64_t head_dim, int64_t rot_dim, const std::vector<int32_t>& pos,
                   const std::vector<float>& inv_freq, bool interleaved) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      double* xh = x->data() + t * ldx + h * head_dim;
      for (int64_t i = 0; i < rot_dim / 2; ++i) {
        const double angle = static_cast<double>(pos[t]) * inv_freq[i];
        const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + rot_dim / 2;
        const double xa = xh[a], xb = xh[b];
        xh[a] = xa * std::cos(angle) - xb * std::sin(angle);
        xh[b] = xb * std::cos(angle) + xa * std::sin(angle);
      }
    }
  }
}

TEST(CpuOpsTest, RopeBothLayoutsIncludingLargePositions) {
  struct Shape {
    int64_t heads, head_dim, rot_dim;
  };
  for (Isa isa : AvailableIsas()) {
    for (Shape s : {Shape{4, 64, 64}, Shape{2, 128, 64}, Shape{3, 80, 80}, Shape{1, 600, 600}}) {
      for (bool interleaved : {false, true}) {
        SCOPED_TRACE(std::string(IsaName(isa)) + " head_dim=" + std::to_string(s.head_dim) +
                     " rot_dim=" + std::to_string(s.rot_dim) + (interleaved ? " gptj" : " neox"));
        const int64_t tokens = 5, ldx = s.heads * s.head_dim + 4;
        const std::vector<int32_t> pos = {0, 1, 17, 4095, 100000};
        std::vector<float> inv_freq(s.rot_dim / 2);
        for (int64_t i = 0; i < s.rot_dim / 2; ++i) {
          inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / s.rot_dim));
        }
        std::vector<float> x = Random(tokens * ldx, 7);
        std::vector<double> ref(x.begin(), x.end());
        RopeIsa(isa, x.data(), ldx, tokens, s.heads, s.head_dim, s.rot_dim, pos.data(),
                inv_freq.data(), interleaved);
        RopeReference(&ref, ldx, tokens, s.heads, s.head_dim, s.rot_dim, pos, inv_freq,
                      interleaved);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(x[i], ref[i], 1e-6 * 2 + 1e-6 * std::fabs(ref[i])) << "at " << i;
        }
      }
    }
  }
}

// A gated activation out = act(gate) * up on every ISA, against `ref(g, u)` in double.
template <typename Op, typename Ref>
void CheckGatedAct(Op op, Ref ref, float range, float edge, double rel, double abs) {
  for (Isa isa : AvailableIsas()) {
    for (int64_t f : kDims) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " f=" + std::to_string(f));
      const int64_t tokens = 2, ldo = f + 3;
      std::vector<float> gu = Random(tokens * 2 * f, 9, -range, range);
      if (f >= 4) gu[0] = -100.0f, gu[1] = 100.0f, gu[2] = 0.0f, gu[3] = edge;
      std::vector<float> out(tokens * ldo, 0);
      op(isa, gu.data(), tokens, f, out.data(), ldo);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < f; ++i) {
          const double g = gu[t * 2 * f + i], u = gu[t * 2 * f + f + i];
          const double want = ref(g, u);
          ASSERT_NEAR(out[t * ldo + i], want, rel * std::fabs(want) + abs) << "g=" << g;
        }
      }
    }
  }
}

TEST(CpuOpsTest, SiluMul) {
  CheckGatedAct(
      SiluMulIsa, [](double g, double u) { return g / (1 + std::exp(-g)) * u; }, 20.0f, -88.0f,
      3e-6, 1e-30);
}

// GeGLU against transformers' gelu_pytorch_tanh written out in double: 0.5 g (1 + tanh(...)).
TEST(CpuOpsTest, GeluTanhMul) {
  CheckGatedAct(
      GeluTanhMulIsa,
      [](double g, double u) {
        const double k = std::sqrt(2.0 / M_PI);
        return 0.5 * g * (1 + std::tanh(k * (g + 0.044715 * g * g * g))) * u;
      },
      8.0f, -12.0f, 1e-5, 1e-6);
}

TEST(CpuOpsTest, VectorOps) {
  for (Isa isa : AvailableIsas()) {
    for (int64_t n : kDims) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " n=" + std::to_string(n));
      const std::vector<float> a = Random(n, 11), b = Random(n, 12);
      double dot = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i)
        dot += static_cast<double>(a[i]) * b[i], mag += std::fabs(a[i] * b[i]);
      EXPECT_NEAR(DotIsa(isa, a.data(), b.data(), n), dot, 1e-6 * mag + 1e-7);
      std::vector<float> y = b;
      AxpyIsa(isa, 0.75f, a.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], b[i] + 0.75 * a[i], 1e-6);
      y = b;
      ScaleIsa(isa, y.data(), -1.5f, n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], b[i] * -1.5f);
      y = b;
      AddInPlaceIsa(isa, y.data(), a.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], b[i] + a[i]);
    }
  }
}

// Argmax by definition: the first entry greater than every one before it (scanning from entry 0).
int64_t FirstMaximum(const std::vector<float>& x) {
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[best]) best = static_cast<int64_t>(i);
  }
  return best;
}

TEST(CpuOpsTest, ArgmaxIsTheFirstMaximumOnEveryPath) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (Isa isa : AvailableIsas()) {
    for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 1000, 4099}) {
      for (uint32_t seed = 0; seed < 12; ++seed) {
        SCOPED_TRACE(std::string(IsaName(isa)) + " n=" + std::to_string(n) + " seed " +
                     std::to_string(seed));
        std::mt19937 rng(seed * 7919 + static_cast<uint32_t>(n));
        // Few distinct values, so that maxima repeat across lanes and in the tail.
        std::uniform_int_distribution<int> level(0, seed % 3 == 0 ? 3 : 40);
        std::vector<float> x(n);
        for (float& v : x) v = static_cast<float>(level(rng));
        std::uniform_int_distribution<int64_t> at(0, n - 1);
        if (seed % 4 == 1) x[at(rng)] = nan, x[at(rng)] = nan;
        if (seed % 4 == 2) x[0] = nan;
        if (seed % 6 == 3) std::fill(x.begin(), x.end(), -inf);
        if (seed % 6 == 5) x[at(rng)] = inf, x[at(rng)] = inf;
        if (seed == 7) x.back() = 1000.0f;  // the maximum in the last, partial group
        EXPECT_EQ(ArgmaxIsa(isa, x.data(), n), FirstMaximum(x));
      }
    }
  }
}

// Worked by hand: logits (1, 3, 2, 0, 3) -> softmax p_i = e^l_i / S, S = e + 2e^3 + e^2 + 1.
TEST(CpuOpsTest, RouteTopK) {
  const float logits[5] = {1, 3, 2, 0, 3};
  const double s = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0) + 1.0;
  int32_t experts[3];
  float weights[3];
  // Top 3, raw probabilities: the tie (experts 1 and 4) goes to the lower expert first.
  RouteTopK(logits, 5, 3, /*normalize=*/false, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 4);
  EXPECT_EQ(experts[2], 2);
  EXPECT_NEAR(weights[0], std::exp(3.0) / s, 1e-6);
  EXPECT_NEAR(weights[1], std::exp(3.0) / s, 1e-6);
  EXPECT_NEAR(weights[2], std::exp(2.0) / s, 1e-6);
  // Renormalized over the chosen: e^3 / (2 e^3 + e^2) and e^2 / (2 e^3 + e^2).
  RouteTopK(logits, 5, 3, /*normalize=*/true, experts, weights);
  const double picked = 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(weights[0], std::exp(3.0) / picked, 1e-6);
  EXPECT_NEAR(weights[2], std::exp(2.0) / picked, 1e-6);
  // Top 1 renormalized is weight 1 whatever the logits; large logits do not overflow.
  const float big[3] = {1000, -1000, 999};
  RouteTopK(big, 3, 1, /*normalize=*/true, experts, weights);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(weights[0], 1.0f);
  RouteTopK(big, 3, 2, /*normalize=*/false, experts, weights);
  EXPECT_EQ(experts[1], 2);
  EXPECT_NEAR(weights[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

// DeepSeek-V3 / GLM-4.5 routing worked by hand: 8 experts in 4 groups of 2, choice = sigmoid +
// bias. Logits chosen so that sigmoid(l) is exact enough to reason with: l = 0 -> 0.5.
//   expert:  0     1     2     3     4     5     6     7
//   logit:   2     0    -1     3     0     0     1    -2
//   bias:    0     0     0   -0.5   0.4   0.4    0     0
// choice c = s + b; group sums (both members, groups of 2): g0 = s(2) + s(0) = 1.3808,
// g1 = s(-1) + s(3) - 0.5 = 0.7262, g2 = 0.9 + 0.9 = 1.8, g3 = s(1) + s(-2) = 0.8500.
// topk_groups 2 keeps groups 2 and 0; the others' choices become 0. Top 3 of the kept choices:
// experts 4 and 5 (0.9 each; the tie to the lower first), then 0 (0.8808). Weights are the
// sigmoid scores without the bias: 0.5, 0.5, s(2), renormalized and scaled by 2.5.
TEST(CpuOpsTest, RouteTopKSigmoidGroups) {
  const float logits[8] = {2, 0, -1, 3, 0, 0, 1, -2};
  const float bias[8] = {0, 0, 0, -0.5f, 0.4f, 0.4f, 0, 0};
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  moe::RouteParams p;
  p.num_experts = 8, p.top_k = 3, p.sigmoid = true, p.normalize = true, p.scale = 2.5f;
  p.choice_bias = bias, p.groups = 4, p.topk_groups = 2;
  int32_t experts[3];
  float weights[3];
  RouteTopK(logits, p, experts, weights);
  EXPECT_EQ(experts[0], 4);
  EXPECT_EQ(experts[1], 5);
  EXPECT_EQ(experts[2], 0);
  const double sum = 0.5 + 0.5 + sig(2.0);
  EXPECT_NEAR(weights[0], 2.5 * 0.5 / sum, 1e-6);
  EXPECT_NEAR(weights[2], 2.5 * sig(2.0) / sum, 1e-6);
  // Without groups expert 3 (s(3) - 0.5 = 0.4526) loses to 6 (s(1) = 0.7311) anyway, and the
  // raw weights (no renormalization) are the sigmoid scores times the scale.
  p.groups = p.topk_groups = 1, p.normalize = false, p.scale = 1.0f;
  RouteTopK(logits, p, experts, weights);
  EXPECT_EQ(experts[0], 4);
  EXPECT_EQ(experts[1], 5);
  EXPECT_EQ(experts[2], 0);
  EXPECT_NEAR(weights[2], sig(2.0), 1e-6);
  // One group kept of four, top 2: group 2's experts, however large expert 0's choice.
  p.groups = 4, p.topk_groups = 1, p.top_k = 2;
  const float tilted[8] = {5, 0, -1, 3, 0, 0.5f, 1, -2};  // g0 = s(5) + 0.5 = 1.4933 < g2 = 1.9225
  RouteTopK(tilted, p, experts, weights);
  EXPECT_EQ(experts[0], 5);
  EXPECT_EQ(experts[1], 4);
}

TEST(CpuOpsTest, Conversions) {
  std::vector<float> x = Random(37, 13, -1e5f, 1e5f);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            1e-40f /*subnormal*/,
                            3.0e38f /*rounds to inf*/,
                            1.00390625f /*tie: to even (1.0)*/,
                            1.01171875f /*tie: to even (1.015625)*/};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = x.size();
  for (Isa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    std::vector<uint16_t> bf(n);
    F32ToBf16Isa(isa, x.data(), bf.data(), n);
    std::vector<float> back(n);
    Bf16ToF32Isa(isa, bf.data(), back.data(), n);
    for (int64_t i = 0; i + 1 < n; ++i) {
      // Reference RNE: the nearest bf16 by value, ties to an even mantissa.
      uint32_t bits;
      std::memcpy(&bits, &x[i], 4);
      const uint32_t down = bits & 0xFFFF0000u, up = down + 0x10000u;
      float fd, fu;
      std::memcpy(&fd, &down, 4);
      std::memcpy(&fu, &up, 4);
      const double dd = std::fabs(static_cast<double>(x[i]) - fd);
      const double du = std::fabs(static_cast<double>(fu) - x[i]);
      const uint32_t want = (dd < du || (dd == du && ((down >> 16) & 1) == 0)) ? down : up;
      if (std::isinf(x[i])) {
        EXPECT_EQ(static_cast<uint32_t>(bf[i]) << 16, bits) << i;
      } else {
        EXPECT_EQ(static_cast<uint32_t>(bf[i]) << 16, want) << "x=" << x[i];
      }
      uint32_t bb;
      std::memcpy(&bb, &back[i], 4);
      EXPECT_EQ(bb, static_cast<uint32_t>(bf[i]) << 16);
    }
    EXPECT_TRUE(std::isnan(back[n - 1]));

    // f16: every finite, infinite and NaN encoding against an exact decode.
    std::vector<uint16_t> h(65536);
    for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    F16ToF32Isa(isa, h.data(), f.data(), 65536);
    for (int i = 0; i < 65536; ++i) {
      const int e = (i >> 10) & 31, m = i & 1023;
      const double sign = (i & 0x8000) ? -1 : 1;
      if (e == 31) {
        if (m == 0) {
          ASSERT_EQ(f[i], sign * std::numeric_limits<float>::infinity()) << i;
        } else {
          ASSERT_TRUE(std::isnan(f[i])) << i;
        }
        continue;
      }
      const double ref = sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
      ASSERT_EQ(f[i], ref) << "h=" << i;
      ASSERT_EQ(std::signbit(f[i]), sign < 0) << i;
    }
  }
}

}  // namespace
}  // namespace astr::cpu
