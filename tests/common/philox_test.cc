#include "common/base/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>

namespace astr::philox {
namespace {

void ExpectBlock(Counter ctr, Key key, Counter expected) {
  const Counter out = Philox4x32(ctr, key);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], expected.v[i]) << "word " << i;
}

// Known-answer vectors from Random123's kat_vectors (philox4x32 with 10 rounds).
TEST(PhiloxTest, KnownAnswerZeros) {
  ExpectBlock({{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
}

TEST(PhiloxTest, KnownAnswerAllOnes) {
  ExpectBlock({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
              {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
}

TEST(PhiloxTest, KnownAnswerPi) {
  ExpectBlock({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
              {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

TEST(PhiloxTest, SampleBlockLayout) {
  // The documented recipe: key = seed halves, counter = token_index halves then sequence halves.
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t sequence = 0x0370734413198a2eull;
  const uint64_t token_index = 0x85a308d3243f6a88ull;
  const Counter out = SampleBlock(seed, sequence, token_index);
  EXPECT_EQ(out.v[0], 0xd16cfe09u);
  EXPECT_EQ(out.v[1], 0x94fdccebu);
  EXPECT_EQ(out.v[2], 0x5001e420u);
  EXPECT_EQ(out.v[3], 0x24126ea1u);
  // UniformDouble = ((out[1] << 32 | out[0]) >> 11) * 2^-53, computed here independently.
  const double expected = std::ldexp(static_cast<double>(0x94fdccebd16cfe09ull >> 11), -53);
  EXPECT_EQ(UniformDouble(seed, sequence, token_index), expected);
  EXPECT_EQ(UniformFloat(seed, sequence, token_index),
            std::ldexp(static_cast<float>(0xd16cfe09u >> 8), -24));
}

TEST(PhiloxTest, UniformsAreInRangeAndDistinctAcrossStreams) {
  std::set<double> seen;
  double sum = 0.0;
  const int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    const double u = UniformDouble(42, static_cast<uint64_t>(i % 4), static_cast<uint64_t>(i / 4));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    seen.insert(u);
    sum += u;
    const float f = UniformFloat(42, i % 4, i / 4);
    ASSERT_GE(f, 0.0f);
    ASSERT_LT(f, 1.0f);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kDraws));
  // Mean of U(0,1): 0.5 with sd sqrt(1/12/n) ~ 0.002; allow 5 sd.
  EXPECT_NEAR(sum / kDraws, 0.5, 5 * std::sqrt(1.0 / 12 / kDraws));
  // Different seeds give different streams.
  EXPECT_NE(UniformDouble(1, 0, 0), UniformDouble(2, 0, 0));
}

}  // namespace
}  // namespace astr::philox
