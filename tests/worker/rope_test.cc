// RoPE frequency tables (worker/rope.h): LongRoPE's two sets, its cos / sin factor, and which rows
// of a step take the long set.
#include "worker/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace astr {
namespace {

model::ModelConfig LongRopeConfig() {
  model::ModelConfig c;
  c.architecture = "phi3";
  c.head_dim = 16, c.rope_dim = 8, c.rope_theta = 10000.0;
  c.rope_scaling.type = model::RopeScaling::Type::kLongRope;
  c.rope_scaling.short_factor = {1.0, 1.5, 2.0, 4.0};
  c.rope_scaling.long_factor = {1.0, 3.0, 9.0, 27.0};
  c.rope_scaling.original_max_position = 32;
  c.rope_scaling.attention_factor = 1.25;
  return c;
}

TEST(RopeTest, LongRopeTablesAreTheBaseFrequenciesOverEachFactor) {
  const model::ModelConfig c = LongRopeConfig();
  const std::vector<float> shrt = RopeInvFreq(c), lng = RopeInvFreqLong(c);
  ASSERT_EQ(shrt.size(), 4u);
  ASSERT_EQ(lng.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    // theta^(-2i / rope_dim): 1, 0.1, 0.01, 0.001 for theta 1e4 and rope_dim 8.
    const double base = std::pow(10.0, -i);
    EXPECT_NEAR(shrt[i], base / c.rope_scaling.short_factor[i], 1e-7 * base);
    EXPECT_NEAR(lng[i], base / c.rope_scaling.long_factor[i], 1e-7 * base);
  }
  EXPECT_EQ(RopeCosSinScale(c), 1.25f);
  // Without LongRoPE: no long table, no factor.
  model::ModelConfig plain = c;
  plain.rope_scaling = {};
  EXPECT_TRUE(RopeInvFreqLong(plain).empty());
  EXPECT_EQ(RopeCosSinScale(plain), 1.0f);
  EXPECT_NEAR(RopeInvFreq(plain)[1], 0.1f, 1e-8);
}

// YaRN (gpt-oss): the tables transformers 5.25 computes (_compute_yarn_parameters, float32) for
// head_dim 16, theta 1e4, factor 32 over a 4096-token context, betas 32 / 1, with the correction
// range as it is (2.62 .. 5.63) and truncated (2 .. 6, llama.cpp's rule); taken by hand with
// ROPE_INIT_FUNCTIONS["yarn"](GptOssConfig(...)).
TEST(RopeTest, YarnTablesAreTransformers) {
  model::ModelConfig c;
  c.architecture = "gpt_oss";
  c.head_dim = 16, c.rope_dim = 16, c.rope_theta = 10000.0;
  c.rope_scaling.type = model::RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 32.0;
  c.rope_scaling.original_max_position = 4096;
  c.rope_scaling.beta_fast = 32.0;
  c.rope_scaling.beta_slow = 1.0;
  c.rope_scaling.attention_factor = 1.3465735902799727;  // 1 + 0.1 ln 32, transformers' default
  const std::vector<double> untruncated = {1,
                                           0.316227764,
                                           0.100000001,
                                           0.0277359355,
                                           0.00555275427,
                                           0.000738276867,
                                           3.12500015e-05,
                                           9.88211832e-06};
  const std::vector<double> truncated = {1,
                                         0.316227764,
                                         0.100000001,
                                         0.0239641368,
                                         0.00515624974,
                                         0.000864685338,
                                         3.12500015e-05,
                                         9.88211832e-06};
  for (bool truncate : {false, true}) {
    c.rope_scaling.truncate = truncate;
    const std::vector<float> inv = RopeInvFreq(c);
    const std::vector<double>& want = truncate ? truncated : untruncated;
    ASSERT_EQ(inv.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      // transformers blends in float32 (a few ulps); astr in double, rounded once.
      EXPECT_NEAR(inv[i], want[i], 1e-6 * want[i]) << "truncate " << truncate << " i " << i;
    }
  }
  EXPECT_FLOAT_EQ(RopeCosSinScale(c), 1.3465736f);
  EXPECT_TRUE(RopeInvFreqLong(c).empty());
}

TEST(RopeTest, AnEntryTakesTheLongSetWhenItsLastPositionReachesTheOriginalContext) {
  const model::ModelConfig c = LongRopeConfig();
  // Entries: a prefill 0..30 (short), a prefill 28..32 (long: it reaches position 32, so all of its
  // rows do, as transformers rotates a whole forward pass with one set), a decode at 31 (short) and
  // one at 32 (long).
  std::vector<int32_t> positions, qo_indptr = {0};
  auto entry = [&](int32_t from, int32_t to) {
    for (int32_t p = from; p <= to; ++p) positions.push_back(p);
    qo_indptr.push_back(static_cast<int32_t>(positions.size()));
  };
  entry(0, 30), entry(28, 32), entry(31, 31), entry(32, 32);
  std::vector<uint8_t> use(positions.size(), 7);
  EXPECT_TRUE(RopeLongRows(c, positions, qo_indptr, {}, use.data()));
  for (size_t r = 0; r < positions.size(); ++r) {
    const bool want = r >= 31 && r < 36 ? true : r == 37;
    EXPECT_EQ(use[r], want ? 1 : 0) << "row " << r;
  }
  std::vector<int32_t> early = {0, 1, 2}, one = {0, 3};
  EXPECT_FALSE(RopeLongRows(c, early, one, {}, use.data()));
  // A sequence computed with the long set (it started with more than 32 tokens) takes it in every
  // chunk, its first ones included: the first entry (0..30) now too.
  EXPECT_TRUE(RopeLongRows(c, positions, qo_indptr, {1, 0, 0, 0}, use.data()));
  for (size_t r = 0; r < positions.size(); ++r) {
    const bool want = r < 36 || r == 37;
    EXPECT_EQ(use[r], want ? 1 : 0) << "row " << r;
  }
  EXPECT_TRUE(RopeLongRows(c, early, one, {1}, use.data()));
}

// cpu::Rope with RopeMore against the rotation written out: each pair (i, i + rot/2) of a head
// turned by pos * f_i, times the factor, with f from the row's own table.
TEST(RopeTest, CpuRopeAppliesTheFactorAndEachRowsTable) {
  const model::ModelConfig c = LongRopeConfig();
  const std::vector<float> shrt = RopeInvFreq(c), lng = RopeInvFreqLong(c);
  const int64_t heads = 2, hd = c.head_dim, rot = c.rope_dim, t = 2;
  std::vector<float> x(t * heads * hd);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i)) + 0.1f;
  const std::vector<float> in = x;
  const std::vector<int32_t> pos = {5, 40};
  const std::vector<uint8_t> use = {0, 1};
  cpu::RopeMore more;
  more.scale = 1.25f, more.inv_freq_long = lng.data(), more.use_long = use.data();
  cpu::Rope(x.data(), heads * hd, t, heads, hd, rot, pos.data(), shrt.data(), false, more);
  for (int64_t r = 0; r < t; ++r) {
    const std::vector<float>& f = use[r] ? lng : shrt;
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = in.data() + r * heads * hd + h * hd;
      const float* b = x.data() + r * heads * hd + h * hd;
      for (int64_t i = 0; i < rot / 2; ++i) {
        const double ang = pos[r] * static_cast<double>(f[i]);
        const double cs = 1.25 * std::cos(ang), sn = 1.25 * std::sin(ang);
        EXPECT_NEAR(b[i], a[i] * cs - a[i + rot / 2] * sn, 1e-5);
        EXPECT_NEAR(b[i + rot / 2], a[i + rot / 2] * cs + a[i] * sn, 1e-5);
      }
      for (int64_t i = rot; i < hd; ++i) EXPECT_EQ(b[i], a[i]);  // past rope_dim: untouched
    }
  }
}

}  // namespace
}  // namespace astr
