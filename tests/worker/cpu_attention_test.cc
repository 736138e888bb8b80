// Paged attention (worker/backends/cpu/cpu_attention.h) on every ISA path against a double
// reference computed here, plus bitwise invariance to the page size and the batch composition.
#include "worker/backends/cpu/cpu_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "tests/support/test_util.h"
#include "worker/step_batch.h"

namespace astr {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return testing::RandomFloats(n, seed, lo, hi);
}

// K and V of every absolute position of a few sequences, [seq][pos, kv_heads, hd].
struct Sequences {
  std::vector<std::vector<float>> k, v;
};

// One batch entry: sequence `seq`, rows at positions [start, start + count).
struct Entry {
  int seq;
  int64_t start, count;
};

struct Result {
  std::vector<float> out;  // [T, ldo]
  std::vector<int32_t> positions;
  std::vector<int> row_seq;
};

constexpr int64_t kMaxLen = 100;

// Lays the sequences out in a paged pool (pages in a shuffled order) and runs PagedAttentionIsa
// over `entries`; queries come from q_all[seq][pos, heads, hd].
Result RunAttention(cpu::Isa isa, const AttentionShape& s, const Sequences& seqs,
                    const std::vector<std::vector<float>>& q_all,
                    const std::vector<Entry>& entries) {
  const int64_t slot_floats = s.num_kv_heads * s.head_dim;
  const int64_t pages_per_seq = (kMaxLen + s.page_size - 1) / s.page_size;
  const int64_t num_seqs = static_cast<int64_t>(seqs.k.size());
  const int64_t num_pages = pages_per_seq * num_seqs;
  std::vector<int32_t> order(num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(static_cast<uint32_t>(s.page_size * 7 + 1));
  std::shuffle(order.begin(), order.end(), rng);
  // Poison everything, then write each sequence's K/V into its pages.
  std::vector<float> k_pool(num_pages * s.page_size * slot_floats,
                            std::numeric_limits<float>::quiet_NaN());
  std::vector<float> v_pool = k_pool;
  for (int64_t sq = 0; sq < num_seqs; ++sq) {
    for (int64_t pos = 0; pos < kMaxLen; ++pos) {
      const int64_t page = order[sq * pages_per_seq + pos / s.page_size];
      const int64_t slot = page * s.page_size + pos % s.page_size;
      std::memcpy(&k_pool[slot * slot_floats], &seqs.k[sq][pos * slot_floats],
                  slot_floats * sizeof(float));
      std::memcpy(&v_pool[slot * slot_floats], &seqs.v[sq][pos * slot_floats],
                  slot_floats * sizeof(float));
    }
  }
  StepBatch batch;
  const int64_t q_floats = s.num_heads * s.head_dim;
  const int64_t ldq = q_floats + 3, ldo = q_floats + 5;
  std::vector<float> q;
  std::vector<int32_t> row_entry;
  Result r;
  for (size_t e = 0; e < entries.size(); ++e) {
    const Entry& en = entries[e];
    std::vector<int32_t> tokens(en.count, 1);
    batch.Append(tokens.data(), en.count, en.start, &order[en.seq * pages_per_seq], s.page_size,
                 true);
    for (int64_t i = 0; i < en.count; ++i) {
      const float* src = &q_all[en.seq][(en.start + i) * q_floats];
      q.insert(q.end(), src, src + q_floats);
      q.insert(q.end(), ldq - q_floats, 0.0f);
      row_entry.push_back(static_cast<int32_t>(e));
      r.row_seq.push_back(en.seq);
    }
  }
  r.positions = batch.positions;
  const int64_t rows = batch.num_tokens();
  std::vector<float> scratch(AttentionScratchFloats(s));
  r.out.assign(rows * ldo, std::numeric_limits<float>::quiet_NaN());
  PagedAttentionIsa(isa, q.data(), ldq, k_pool.data(), v_pool.data(), batch, row_entry.data(), s,
                    scratch.data(), r.out.data(), ldo, nullptr);
  return r;
}

void CheckAgainstReference(const AttentionShape& s, const Sequences& seqs,
                           const std::vector<std::vector<float>>& q_all, const Result& r) {
  const int64_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
  const int64_t slot_floats = s.num_kv_heads * hd, q_floats = s.num_heads * hd;
  const int64_t ldo = q_floats + 5;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (size_t t = 0; t < r.positions.size(); ++t) {
    const int64_t pos = r.positions[t];
    const int sq = r.row_seq[t];
    const int64_t lo = s.sliding_window > 0 ? std::max<int64_t>(0, pos + 1 - s.sliding_window) : 0;
    for (int64_t h = 0; h < s.num_heads; ++h) {
      const int64_t g = h / group;
      const float* qh = &q_all[sq][pos * q_floats + h * hd];
      std::vector<double> p;
      double mx = -1e300;
      for (int64_t j = lo; j <= pos; ++j) {
        const float* k = &seqs.k[sq][j * slot_floats + g * hd];
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(qh[i]) * k[i];
        p.push_back(d * scale);
        mx = std::max(mx, p.back());
      }
      double sum = 0;
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t j = lo; j <= pos; ++j) {
          o += p[j - lo] * seqs.v[sq][j * slot_floats + g * hd + i];
        }
        o /= sum;
        const float got = r.out[t * ldo + h * hd + i];
        ASSERT_NEAR(got, o, 2e-6 + 2e-6 * std::fabs(o))
            << "row " << t << " pos " << pos << " head " << h << " dim " << i;
      }
    }
  }
}

TEST(CpuAttentionTest, MatchesDoubleReferenceAndIsInvariant) {
  struct Case {
    int64_t hd, group, window;
  };
  std::vector<Case> cases;
  for (int64_t hd : {8, 64, 128, 80}) {
    for (int64_t group : {1, 4}) cases.push_back({hd, group, 0});
  }
  cases.push_back({64, 4, 20});
  cases.push_back({8, 1, 5});
  cases.push_back({80, 4, 33});
  for (cpu::Isa isa : cpu::AvailableIsas()) {
    for (const Case& c : cases) {
      AttentionShape s{2 * c.group, 2, c.hd, 1, c.window};
      const int64_t slot_floats = s.num_kv_heads * s.head_dim;
      Sequences seqs;
      std::vector<std::vector<float>> q_all;
      for (uint32_t sq = 0; sq < 2; ++sq) {
        seqs.k.push_back(Random(kMaxLen * slot_floats, 10 + sq));
        seqs.v.push_back(Random(kMaxLen * slot_floats, 20 + sq));
        // Scaled up so the softmax is far from uniform.
        q_all.push_back(Random(kMaxLen * s.num_heads * s.head_dim, 30 + sq, -3.0f, 3.0f));
      }
      for (int64_t len : {1, 31, 32, 33, 100}) {
        SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " hd=" + std::to_string(c.hd) +
                     " group=" + std::to_string(c.group) + " window=" + std::to_string(c.window) +
                     " len=" + std::to_string(len));
        std::vector<float> first;
        for (int64_t page_size : {1, 16}) {
          s.page_size = page_size;
          // Prefill of the whole sequence, next to a decode row of the other sequence.
          const Result prefill = RunAttention(isa, s, seqs, q_all, {{0, 0, len}, {1, 57, 1}});
          CheckAgainstReference(s, seqs, q_all, prefill);
          if (HasFatalFailure()) return;
          const int64_t ldo = s.num_heads * s.head_dim + 5;
          // Bitwise: the page size does not matter.
          if (first.empty()) {
            first = prefill.out;
          } else {
            ASSERT_EQ(0, std::memcmp(first.data(), prefill.out.data(), first.size() * 4));
          }
          // Bitwise: the last row alone (decode) and a chunked prefill give the same rows.
          const Result decode = RunAttention(isa, s, seqs, q_all, {{0, len - 1, 1}});
          ASSERT_EQ(0, std::memcmp(&prefill.out[(len - 1) * ldo], decode.out.data(),
                                   s.num_heads * s.head_dim * sizeof(float)));
          const int64_t split = len / 2;
          if (split > 0) {
            const Result chunk =
                RunAttention(isa, s, seqs, q_all, {{1, 3, 2}, {0, split, len - split}});
            for (int64_t i = 0; i < len - split; ++i) {
              ASSERT_EQ(0, std::memcmp(&prefill.out[(split + i) * ldo], &chunk.out[(2 + i) * ldo],
                                       s.num_heads * s.head_dim * sizeof(float)))
                  << "chunked row " << i;
            }
          }
        }
      }
    }
  }
}

// The scores kernel reduces several heads' dot products together when the heads fill whole
// vectors (4 heads a pass on AVX-512, then 2 or 1) and one at a time otherwise (a pass of 3): each
// score must still be the same bits as the head's alone, whatever the group and n.
TEST(CpuAttentionTest, ScoresDoNotDependOnTheGroupOrTheBlockLength) {
  for (cpu::Isa isa : cpu::AvailableIsas()) {
    const cpu::AttnKernels& kern = cpu::AttnKernelsFor(isa);
    for (int64_t hd : {8, 64, 80, 128}) {
      constexpr int64_t kGroup = 7, kRows = 32;
      const std::vector<float> q = Random(kGroup * hd, 1, -3.0f, 3.0f);
      const std::vector<float> k = Random(kRows * hd, 2);
      std::vector<const float*> rows;
      for (int64_t j = 0; j < kRows; ++j) rows.push_back(&k[j * hd]);
      for (int64_t n : {1, 3, 5, 16, 17, 32}) {
        SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " hd=" + std::to_string(hd) +
                     " n=" + std::to_string(n));
        std::vector<float> together(kGroup * kRows, -1.0f);
        kern.scores(q.data(), kGroup, hd, rows.data(), n, 0.125f, together.data(), kRows);
        for (int64_t h = 0; h < kGroup; ++h) {
          std::vector<float> alone(kRows, -1.0f);
          kern.scores(&q[h * hd], 1, hd, rows.data(), n, 0.125f, alone.data(), kRows);
          ASSERT_EQ(0, std::memcmp(&together[h * kRows], alone.data(), n * sizeof(float)))
              << "head " << h;
          // Nothing past n is written.
          for (int64_t j = n; j < kRows; ++j) ASSERT_EQ(together[h * kRows + j], -1.0f);
        }
      }
    }
  }
}

// The softmax update against libm's exp in double: with m = 0 and scores <= 0, each score becomes
// exp(score) (2 ulp at most: AVX-512 has its own exp), l the sum, and an -inf m a correction of 0.
TEST(CpuAttentionTest, SoftmaxUpdateIsExpWithinTwoUlp) {
  for (cpu::Isa isa : cpu::AvailableIsas()) {
    SCOPED_TRACE(cpu::IsaName(isa));
    const cpu::AttnKernels& kern = cpu::AttnKernelsFor(isa);
    constexpr int64_t kN = 29;  // a partial vector on every path
    double worst = 0;
    for (int rep = 0; rep < 400; ++rep) {
      std::vector<float> sc = Random(2 * kN, 100 + rep, -87.0f, 0.0f);
      sc[0] = 0.0f;  // the block's max: m stays 0
      float m[2] = {0.0f, -std::numeric_limits<float>::infinity()}, l[2] = {1.5f, 0.0f}, c[2];
      const std::vector<float> in = sc;
      kern.softmax(sc.data(), kN, 2, kN, m, l, c);
      ASSERT_EQ(c[0], 1.0f);
      ASSERT_EQ(m[0], 0.0f);
      ASSERT_EQ(c[1], 0.0f);  // exp(-inf - m_new)
      double sum = 0;
      for (int64_t j = 0; j < kN; ++j) {
        const double want = std::exp(static_cast<double>(in[j]));
        sum += want;
        const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
        worst = std::max(worst, std::fabs(sc[j] - want) / ulp);
      }
      ASSERT_NEAR(l[0], 1.5 + sum, 1e-6 * (1.5 + sum));
      // Head 1's max is its own largest score.
      const float mx = *std::max_element(in.begin() + kN, in.end());
      ASSERT_EQ(m[1], mx);
      for (int64_t j = 0; j < kN; ++j) {
        const double want = std::exp(static_cast<double>(in[kN + j]) - mx);
        ASSERT_NEAR(sc[kN + j], want, 2.5e-7 * want) << j;
      }
    }
    EXPECT_LE(worst, 2.0);
    std::printf("%s: worst exp error %.2f ulp\n", cpu::IsaName(isa), worst);
  }
}

}  // namespace
}  // namespace astr
