// PackSamplingRow: the flattened parameters and sparse edits of hand-made samplers, against arrays
// written out by hand from the CPU sampler's rules (worker/sampler.h).
#include "worker/backends/cuda/sampling_pack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace astr::cuda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kVocab = 100;

// The row's bias entries as (id, value) in packed order.
std::vector<std::pair<int32_t, float>> BiasOf(const SamplingBatch& b, size_t row) {
  std::vector<std::pair<int32_t, float>> out;
  const DeviceSamplingParams& d = b.params[row];
  for (int32_t i = d.bias_begin; i < d.bias_end; ++i) {
    out.emplace_back(b.bias_ids[i], b.bias_values[i]);
  }
  return out;
}

// The row's penalty entries as (id, generated), sorted by id (the packed order is the count
// table's, which carries no meaning).
std::vector<std::pair<int32_t, int32_t>> PenaltiesOf(const SamplingBatch& b, size_t row) {
  std::vector<std::pair<int32_t, int32_t>> out;
  const DeviceSamplingParams& d = b.params[row];
  for (int32_t i = d.penalty_begin; i < d.penalty_end; ++i) {
    out.emplace_back(b.penalty_ids[i], b.penalty_generated[i]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SamplingPackTest, DefaultsCopyTheParametersAndAddNoEdits) {
  SamplingParams p;
  p.seed = 0x123456789ABCDEFull;
  const SequenceSampler s(p, /*sequence=*/3, std::vector<int32_t>{1, 2, 3});
  SamplingBatch b;
  PackSamplingRow(s, kVocab, &b);
  ASSERT_EQ(b.params.size(), 1u);
  const DeviceSamplingParams& d = b.params[0];
  EXPECT_EQ(d.greedy, 0);
  EXPECT_EQ(d.temperature, 1.0f);
  EXPECT_EQ(d.top_k, 0);
  EXPECT_EQ(d.top_p, 1.0f);
  EXPECT_EQ(d.min_p, 0.0f);
  EXPECT_EQ(d.repetition_penalty, 1.0f);
  EXPECT_EQ(d.frequency_penalty, 0.0f);
  EXPECT_EQ(d.presence_penalty, 0.0f);
  EXPECT_EQ(d.seed, 0x123456789ABCDEFull);
  EXPECT_EQ(d.sequence, 3u);
  EXPECT_EQ(d.token_index, 0u);
  EXPECT_EQ(d.num_top, 0);
  EXPECT_EQ(d.want_logprob, 0);
  EXPECT_EQ(d.processed_logprobs, 0);
  EXPECT_EQ(d.bias_begin, 0);
  EXPECT_EQ(d.bias_end, 0);
  EXPECT_EQ(d.penalty_begin, 0);
  EXPECT_EQ(d.penalty_end, 0);  // no penalty on: no counts, even with a prompt
}

TEST(SamplingPackTest, GreedyBelowTheGreedyTemperatureAndTopKOffAtVocab) {
  const std::vector<std::pair<float, int32_t>> temps = {
      {0.0f, 1}, {1e-6f, 1}, {1e-5f, 0}, {0.7f, 0}};
  for (const auto& [t, greedy] : temps) {
    SamplingParams p;
    p.temperature = t;
    SamplingBatch b;
    PackSamplingRow(SequenceSampler(p, 0, {}), kVocab, &b);
    EXPECT_EQ(b.params[0].greedy, greedy) << "temperature " << t;
    EXPECT_EQ(b.params[0].temperature, t);
  }
  const std::vector<std::pair<int32_t, int32_t>> ks = {{1, 1}, {99, 99}, {100, 0}, {5000, 0}};
  for (const auto& [k, packed] : ks) {
    SamplingParams p;
    p.top_k = k;
    SamplingBatch b;
    PackSamplingRow(SequenceSampler(p, 0, {}), kVocab, &b);
    EXPECT_EQ(b.params[0].top_k, packed) << "top_k " << k;
  }
}

TEST(SamplingPackTest, LogprobFlags) {
  SamplingParams p;
  p.logprobs = 5;  // implies the chosen token's logprob
  p.logprobs_mode = LogprobsMode::kProcessed;
  SamplingBatch b;
  PackSamplingRow(SequenceSampler(p, 0, {}), kVocab, &b);
  EXPECT_EQ(b.params[0].num_top, 5);
  EXPECT_EQ(b.params[0].want_logprob, 1);
  EXPECT_EQ(b.params[0].processed_logprobs, 1);

  SamplingParams q;
  q.return_logprob = true;
  PackSamplingRow(SequenceSampler(q, 0, {}), kVocab, &b);
  EXPECT_EQ(b.params[1].num_top, 0);
  EXPECT_EQ(b.params[1].want_logprob, 1);
  EXPECT_EQ(b.params[1].processed_logprobs, 0);
}

TEST(SamplingPackTest, LogitBiasInIdOrder) {
  SamplingParams p;
  p.logit_bias = {{50, 1.5f}, {2, -3.0f}, {99, -100.0f}};
  SamplingBatch b;
  PackSamplingRow(SequenceSampler(p, 0, {}), kVocab, &b);
  const std::vector<std::pair<int32_t, float>> want = {{2, -3.0f}, {50, 1.5f}, {99, -100.0f}};
  EXPECT_EQ(BiasOf(b, 0), want);
}

TEST(SamplingPackTest, MinTokensMasksStopAndEosUntilTheThreshold) {
  SamplingParams p;
  p.min_tokens = 2;
  p.stop_token_ids = {7, 9};
  p.eos_token_ids = {1};
  p.logit_bias = {{7, 4.0f}};
  SequenceSampler s(p, 0, std::vector<int32_t>{5});
  SamplingBatch b;
  PackSamplingRow(s, kVocab, &b);  // 0 generated < 2: masked
  s.Append(3);
  PackSamplingRow(s, kVocab, &b);  // 1 < 2: masked
  s.Append(4);
  PackSamplingRow(s, kVocab, &b);  // 2: no longer
  const std::vector<std::pair<int32_t, float>> masked = {
      {7, 4.0f}, {7, kNegInf}, {9, kNegInf}, {1, kNegInf}};
  const std::vector<std::pair<int32_t, float>> unmasked = {{7, 4.0f}};
  EXPECT_EQ(BiasOf(b, 0), masked);
  EXPECT_EQ(BiasOf(b, 1), masked);
  EXPECT_EQ(BiasOf(b, 2), unmasked);
  // Rows' ranges follow each other.
  EXPECT_EQ(b.params[1].bias_begin, 4);
  EXPECT_EQ(b.params[2].bias_begin, 8);
  EXPECT_EQ(b.params[2].bias_end, 9);
  EXPECT_EQ(b.params[0].token_index, 0u);
  EXPECT_EQ(b.params[1].token_index, 1u);
  EXPECT_EQ(b.params[2].token_index, 2u);
}

TEST(SamplingPackTest, IgnoreEosMasksOnlyStopIds) {
  SamplingParams p;
  p.min_tokens = 1;
  p.stop_token_ids = {9};
  p.eos_token_ids = {1, 2};
  p.ignore_eos = true;
  SamplingBatch b;
  PackSamplingRow(SequenceSampler(p, 0, {}), kVocab, &b);
  const std::vector<std::pair<int32_t, float>> want = {{9, kNegInf}};
  EXPECT_EQ(BiasOf(b, 0), want);
}

TEST(SamplingPackTest, PenaltiesOverTheWholeContext) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  SequenceSampler s(p, 0, std::vector<int32_t>{4, 4, 6});
  s.Append(4);
  s.Append(11);
  SamplingBatch b;
  PackSamplingRow(s, kVocab, &b);
  // Context counts 4: 3, 6: 1, 11: 1; generated 4: 1, 11: 1.
  const std::vector<std::pair<int32_t, int32_t>> want = {{4, 1}, {6, 0}, {11, 1}};
  EXPECT_EQ(PenaltiesOf(b, 0), want);
  EXPECT_EQ(b.params[0].token_index, 2u);
  EXPECT_EQ(b.params[0].frequency_penalty, 0.5f);
}

TEST(SamplingPackTest, PenaltiesWithinTheWindow) {
  SamplingParams p;
  p.repetition_penalty = 1.2f;
  p.penalty_window = 3;
  // The window starts as the last 3 prompt tokens: 4, 6, 8.
  SequenceSampler s(p, 0, std::vector<int32_t>{4, 4, 6, 8});
  SamplingBatch b;
  PackSamplingRow(s, kVocab, &b);
  const std::vector<std::pair<int32_t, int32_t>> first = {{4, 0}, {6, 0}, {8, 0}};
  EXPECT_EQ(PenaltiesOf(b, 0), first);
  s.Append(6);  // window 6, 8, 6: the 4 leaves
  PackSamplingRow(s, kVocab, &b);
  const std::vector<std::pair<int32_t, int32_t>> second = {{6, 1}, {8, 0}};
  EXPECT_EQ(PenaltiesOf(b, 1), second);
  s.Append(9);  // window 8, 6, 9
  s.Append(9);  // window 6, 9, 9: the 8 leaves
  PackSamplingRow(s, kVocab, &b);
  const std::vector<std::pair<int32_t, int32_t>> third = {{6, 1}, {9, 2}};
  EXPECT_EQ(PenaltiesOf(b, 2), third);
  EXPECT_EQ(b.params[1].penalty_begin, 3);
  EXPECT_EQ(b.params[2].penalty_begin, 5);
  EXPECT_EQ(b.params[2].token_index, 3u);
}

TEST(SamplingPackTest, ClearEmptiesEveryArray) {
  SamplingParams p;
  p.presence_penalty = 1.0f;
  p.logit_bias = {{3, 1.0f}};
  SamplingBatch b;
  PackSamplingRow(SequenceSampler(p, 0, std::vector<int32_t>{1}), kVocab, &b);
  EXPECT_EQ(b.bias_ids.size(), 1u);
  EXPECT_EQ(b.penalty_ids.size(), 1u);
  b.Clear();
  EXPECT_TRUE(b.params.empty());
  EXPECT_TRUE(b.bias_ids.empty());
  EXPECT_TRUE(b.bias_values.empty());
  EXPECT_TRUE(b.penalty_ids.empty());
  EXPECT_TRUE(b.penalty_generated.empty());
}

}  // namespace
}  // namespace astr::cuda
