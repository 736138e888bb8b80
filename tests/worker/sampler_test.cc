#include "worker/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace astr {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// log_softmax(x / t) in double, computed independently of the sampler.
std::vector<double> LogSoftmax(const std::vector<double>& x, double t = 1.0) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v / t);
  double sum = 0.0;
  for (double v : x) sum += std::exp(v / t - m);
  std::vector<double> out;
  for (double v : x) out.push_back(v / t - m - std::log(sum));
  return out;
}

std::vector<double> Softmax(const std::vector<double>& x, double t = 1.0) {
  std::vector<double> p = LogSoftmax(x, t);
  for (double& v : p) v = std::exp(v);
  return p;
}

std::vector<double> ToDouble(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// Frequencies of `n` draws: one sequence, token index 0..n-1.
std::vector<int> Draw(const std::vector<float>& logits, const SamplingParams& params, int n,
                      uint64_t sequence = 0) {
  EXPECT_TRUE(ValidateSamplingParams(params, static_cast<int64_t>(logits.size())).ok());
  SequenceSampler state(params, sequence, {});
  SamplerScratch scratch;
  std::vector<int> counts(logits.size(), 0);
  std::vector<float> row;
  for (int i = 0; i < n; ++i) {
    row = logits;
    const SampleResult r = Sample(row.data(), static_cast<int64_t>(row.size()), state, scratch);
    ++counts[r.token];
    state.Append(r.token);
  }
  return counts;
}

// Each empirical frequency within 4.5 standard deviations of its probability; zero-probability
// tokens never drawn.
void ExpectFrequencies(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  ASSERT_EQ(counts.size(), probs.size());
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the candidate set";
      continue;
    }
    const double sd = std::sqrt(probs[i] * (1 - probs[i]) / n);
    EXPECT_NEAR(static_cast<double>(counts[i]) / n, probs[i], 4.5 * sd + 1e-9) << "token " << i;
  }
}

std::vector<double> Renormalized(std::vector<double> p, const std::vector<int>& keep) {
  std::vector<double> out(p.size(), 0.0);
  double z = 0.0;
  for (int id : keep) z += p[id];
  for (int id : keep) out[id] = p[id] / z;
  return out;
}

std::vector<float> RandomLogits(int64_t vocab, uint32_t seed, float scale = 3.0f) {
  return testing::RandomNormalFloats(static_cast<size_t>(vocab), seed, scale);
}

// ------------------------------------------------------------------------------------------
// Validate

void ExpectInvalid(const SamplingParams& p, const std::string& field, int64_t vocab = 100) {
  const Status s = ValidateSamplingParams(p, vocab);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}, 100).ok());
}

TEST(SamplingParamsTest, ErrorsNameTheField) {
  SamplingParams p;
  p = {};
  p.temperature = -0.5f;
  ExpectInvalid(p, "temperature");
  p = {};
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(p, "temperature");
  p = {};
  p.top_k = -1;
  ExpectInvalid(p, "top_k");
  p = {};
  p.top_p = 0.0f;
  ExpectInvalid(p, "top_p");
  p = {};
  p.top_p = 1.5f;
  ExpectInvalid(p, "top_p");
  p = {};
  p.min_p = -0.1f;
  ExpectInvalid(p, "min_p");
  p = {};
  p.min_p = 1.1f;
  ExpectInvalid(p, "min_p");
  p = {};
  p.repetition_penalty = 0.0f;
  ExpectInvalid(p, "repetition_penalty");
  p = {};
  p.frequency_penalty = 2.5f;
  ExpectInvalid(p, "frequency_penalty");
  p = {};
  p.presence_penalty = -3.0f;
  ExpectInvalid(p, "presence_penalty");
  p = {};
  p.penalty_window = -1;
  ExpectInvalid(p, "penalty_window");
  p = {};
  p.logit_bias[100] = 1.0f;
  ExpectInvalid(p, "logit_bias: key = 100");
  p = {};
  p.logit_bias[3] = 101.0f;
  ExpectInvalid(p, "logit_bias[3]");
  p = {};
  p.stop_token_ids = {1, -2};
  ExpectInvalid(p, "stop_token_ids[1]");
  p = {};
  p.eos_token_ids = {100};
  ExpectInvalid(p, "eos_token_ids[0]");
  p = {};
  p.max_tokens = 0;
  ExpectInvalid(p, "max_tokens");
  p = {};
  p.min_tokens = -1;
  ExpectInvalid(p, "min_tokens");
  p = {};
  p.min_tokens = 20;
  p.max_tokens = 10;
  ExpectInvalid(p, "min_tokens");
  p = {};
  p.logprobs = 21;
  ExpectInvalid(p, "logprobs");
  p = {};
  p.logprobs = -1;
  ExpectInvalid(p, "logprobs");
  p = {};
  p.logprobs_mode = static_cast<LogprobsMode>(7);
  ExpectInvalid(p, "logprobs_mode");
  p = {};
  p.top_k = 1000;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.logprobs = 20;
  EXPECT_TRUE(ValidateSamplingParams(p, 100).ok());
}

// ------------------------------------------------------------------------------------------
// Greedy and determinism

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  SequenceSampler state(p, 0, {});
  SamplerScratch scratch;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::vector<float> x = RandomLogits(32000, seed);
    const int64_t expected = std::max_element(x.begin(), x.end()) - x.begin();
    EXPECT_EQ(Sample(x.data(), 32000, state, scratch).token, expected);
  }
  std::vector<float> tie = {0.0f, 3.0f, 1.0f, 3.0f, 3.0f};
  EXPECT_EQ(Sample(tie.data(), 5, state, scratch).token, 1);
}

// Greedy's id by definition: the first entry greater than every one before it (scanning from
// entry 0), so the lowest id of the maximum, NaNs never taken (a NaN entry 0 stays the answer).
int64_t FirstMaximum(const std::vector<float>& x) {
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[best]) best = static_cast<int64_t>(i);
  }
  return best;
}

TEST(SamplerTest, GreedyTakesTheFirstMaximumWhereverItLies) {
  SamplingParams p;
  p.temperature = 0.0f;
  SequenceSampler state(p, 0, {});
  SamplerScratch scratch;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t vocab : {1, 2, 15, 16, 17, 31, 33, 100, 1000, 4099}) {
    for (uint32_t seed = 0; seed < 12; ++seed) {
      std::mt19937 rng(seed * 7919 + static_cast<uint32_t>(vocab));
      // Few distinct values, so that maxima repeat across lanes and in the tail.
      std::uniform_int_distribution<int> level(0, seed % 3 == 0 ? 3 : 40);
      std::vector<float> x(vocab);
      for (float& v : x) v = static_cast<float>(level(rng));
      std::uniform_int_distribution<int64_t> at(0, vocab - 1);
      if (seed % 4 == 1) x[at(rng)] = nan, x[at(rng)] = nan;
      if (seed % 4 == 2) x[0] = nan;
      if (seed % 6 == 3) std::fill(x.begin(), x.end(), -inf);
      if (seed % 6 == 5) x[at(rng)] = inf, x[at(rng)] = inf;
      if (seed == 7) x.back() = 1000.0f;  // the maximum in the last, partial group
      std::vector<float> row = x;
      const int32_t got = Sample(row.data(), vocab, state, scratch).token;
      EXPECT_EQ(got, FirstMaximum(x)) << "vocab " << vocab << " seed " << seed;
    }
  }
}

// Logits for step `step` of sequence `seq`: the same whatever order they are requested in.
std::vector<float> StepLogits(int seq, int step, int64_t vocab) {
  return RandomLogits(vocab, static_cast<uint32_t>(1000 * seq + step), 2.0f);
}

TEST(SamplerTest, SameSeedSequenceAndIndexGiveSameTokenWhateverTheBatch) {
  const int64_t vocab = 5000;
  const int kSeqs = 4;
  const int kSteps = 30;
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 200;
  p.top_p = 0.95f;
  p.seed = 1234;
  p.repetition_penalty = 1.1f;
  ASSERT_TRUE(ValidateSamplingParams(p, vocab).ok());
  const std::vector<int32_t> prompt = {5, 6, 7};

  // Run `order` (a permutation of sequence ids, re-shuffled per step when shuffle is set), with
  // unrelated "noise" sequences sampled in between, all sharing one scratch.
  auto run = [&](bool shuffle, bool noise) {
    std::vector<SequenceSampler> seqs;
    for (int s = 0; s < kSeqs; ++s) seqs.emplace_back(p, static_cast<uint64_t>(s), prompt);
    SamplingParams other = p;
    other.seed = 99;
    SequenceSampler noise_seq(other, 0, {});
    SamplerScratch scratch;
    std::vector<std::vector<int32_t>> out(kSeqs);
    std::vector<int> order = {0, 1, 2, 3};
    std::mt19937 rng(7);
    for (int step = 0; step < kSteps; ++step) {
      if (shuffle) std::shuffle(order.begin(), order.end(), rng);
      for (int s : order) {
        if (noise) {
          std::vector<float> junk = RandomLogits(vocab, 555 + step);
          noise_seq.Append(Sample(junk.data(), vocab, noise_seq, scratch).token);
        }
        std::vector<float> x = StepLogits(s, step, vocab);
        const int32_t tok = Sample(x.data(), vocab, seqs[s], scratch).token;
        seqs[s].Append(tok);
        out[s].push_back(tok);
      }
    }
    return out;
  };
  const auto base = run(false, false);
  EXPECT_EQ(run(true, false), base);
  EXPECT_EQ(run(true, true), base);
  // Sequences of one request share the seed but not the stream.
  EXPECT_NE(base[0], base[1]);

  // Resuming elsewhere: prompt + Append(generated so far) continues identically.
  SequenceSampler resumed(p, 2, prompt);
  for (int step = 0; step < 10; ++step) resumed.Append(base[2][step]);
  SamplerScratch scratch;
  for (int step = 10; step < kSteps; ++step) {
    std::vector<float> x = StepLogits(2, step, vocab);
    const int32_t tok = Sample(x.data(), vocab, resumed, scratch).token;
    EXPECT_EQ(tok, base[2][step]) << "step " << step;
    resumed.Append(tok);
  }
}

// ------------------------------------------------------------------------------------------
// Distributions (fixed seeds, 20k draws)

constexpr int kDraws = 20000;

TEST(SamplerTest, TemperatureMatchesSoftmax) {
  const std::vector<float> x = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -0.5f, 0.25f};
  for (float t : {0.5f, 1.0f, 1.7f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 17;
    ExpectFrequencies(Draw(x, p, kDraws), Softmax(ToDouble(x), t), kDraws);
  }
}

// A constraint's mask (structured outputs): the draw follows softmax renormalized over the allowed
// tokens, greedy is the best allowed token, and no logit bias brings a masked token back.
TEST(SamplerTest, AllowedMaskRestrictsTheDraw) {
  const int64_t vocab = 70;  // not a multiple of 32: the last word is partial
  const std::vector<float> x = RandomLogits(vocab, 5);
  const std::vector<int> keep = {0, 31, 32, 45, 69};
  std::vector<uint32_t> mask((vocab + 31) / 32, 0);
  for (int id : keep) mask[id / 32] |= 1u << (id % 32);

  std::vector<float> row = x;
  ApplyAllowedMask(row.data(), vocab, mask.data());
  for (int64_t t = 0; t < vocab; ++t) {
    const bool allowed = std::find(keep.begin(), keep.end(), t) != keep.end();
    EXPECT_EQ(row[t], allowed ? x[t] : -kInf) << "token " << t;
  }

  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.logit_bias[1] = 100.0f;  // masked: stays out
  SequenceSampler gs(greedy, 0, {});
  SamplerScratch scratch;
  row = x;
  const int best =
      *std::max_element(keep.begin(), keep.end(), [&](int a, int b) { return x[a] < x[b]; });
  EXPECT_EQ(Sample(row.data(), vocab, gs, scratch, mask.data()).token, best);

  SamplingParams p;
  p.temperature = 1.3f;
  p.seed = 9;
  SequenceSampler state(p, 0, {});
  std::vector<int> counts(vocab, 0);
  for (int i = 0; i < kDraws; ++i) {
    row = x;
    const SampleResult r = Sample(row.data(), vocab, state, scratch, mask.data());
    ++counts[r.token];
    state.Append(r.token);
  }
  ExpectFrequencies(counts, Renormalized(Softmax(ToDouble(x), 1.3), keep), kDraws);
}

TEST(SamplerTest, TemperatureOnLargeVocabulary) {
  // A 32k row with a few heavy tokens: frequencies of the heavy ones and of "the rest".
  std::vector<float> x = RandomLogits(32000, 3, 1.0f);
  x[10] = 9.0f;
  x[20000] = 8.5f;
  x[31999] = 8.0f;
  SamplingParams p;
  p.seed = 5;
  const int n = 5000;  // 32k-entry rows: fewer draws keep the test fast
  const std::vector<int> counts = Draw(x, p, n);
  const std::vector<double> probs = Softmax(ToDouble(x));
  std::vector<int> c4 = {counts[10], counts[20000], counts[31999], 0};
  std::vector<double> p4 = {probs[10], probs[20000], probs[31999], 0.0};
  p4[3] = 1.0 - p4[0] - p4[1] - p4[2];
  c4[3] = n - c4[0] - c4[1] - c4[2];
  ExpectFrequencies(c4, p4, n);
}

TEST(SamplerTest, TopKNeverLeavesTheTopK) {
  const std::vector<float> x = {0.1f, 2.0f, 1.0f, 3.0f, -1.0f, 1.9f, 0.5f, 2.5f, 0.0f, 1.2f};
  SamplingParams p;
  p.top_k = 3;
  p.seed = 3;
  // Top 3 by logit: ids 3 (3.0), 7 (2.5), 1 (2.0).
  ExpectFrequencies(Draw(x, p, kDraws), Renormalized(Softmax(ToDouble(x)), {3, 7, 1}), kDraws);
  p.top_k = 1;
  const std::vector<int> one = Draw(x, p, 200);
  EXPECT_EQ(one[3], 200);
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingTheMass) {
  // probs 0.4, 0.3, 0.2, 0.1 (ids shuffled): top_p 0.65 keeps {0.4, 0.3}.
  const std::vector<double> probs = {0.2, 0.4, 0.1, 0.3};
  std::vector<float> x;
  for (double q : probs) x.push_back(static_cast<float>(std::log(q)));
  SamplingParams p;
  p.top_p = 0.65f;
  p.seed = 11;
  ExpectFrequencies(Draw(x, p, kDraws), Renormalized(probs, {1, 3}), kDraws);
  p.top_p = 0.75f;  // 0.4 + 0.3 < 0.75 -> needs the 0.2 too
  ExpectFrequencies(Draw(x, p, kDraws), Renormalized(probs, {1, 3, 0}), kDraws);
  p.top_p = 0.1f;  // always at least the best token
  EXPECT_EQ(Draw(x, p, 100)[1], 100);
}

TEST(SamplerTest, TopPOnLargeVocabulary) {
  // 300 near-equal heavy tokens share a weight bucket that the top-p cut falls inside.
  std::vector<float> x(20000, -5.0f);
  for (int i = 0; i < 300; ++i) x[i * 61] = 2.0f + 0.001f * i;
  SamplingParams p;
  p.top_p = 0.9f;
  p.seed = 8;
  const std::vector<int> counts = Draw(x, p, 2000);
  int heavy = 0;
  for (int i = 0; i < 300; ++i) heavy += counts[i * 61];
  EXPECT_EQ(heavy, 2000);  // the light tokens' total mass is < 10%, all cut
}

TEST(SamplerTest, MinPKeepsTokensAboveFractionOfTheMax) {
  const std::vector<double> probs = {0.15, 0.5, 0.1, 0.25};
  std::vector<float> x;
  for (double q : probs) x.push_back(static_cast<float>(std::log(q)));
  SamplingParams p;
  p.min_p = 0.25f;  // threshold 0.125: keeps 0.5, 0.25, 0.15
  p.seed = 21;
  ExpectFrequencies(Draw(x, p, kDraws), Renormalized(probs, {1, 3, 0}), kDraws);
  // top-p first (0.7 -> {0.5, 0.25}), then min-p 0.6 (threshold 0.3) -> {0.5}.
  p.top_p = 0.7f;
  p.min_p = 0.6f;
  EXPECT_EQ(Draw(x, p, 100)[1], 100);
  // top-k 3 -> {0.5, 0.25, 0.15}, top-p 0.85 -> {0.5, 0.25, 0.15} (0.75/0.9 < 0.85).
  p.top_k = 3;
  p.top_p = 0.85f;
  p.min_p = 0.0f;
  ExpectFrequencies(Draw(x, p, kDraws), Renormalized(probs, {1, 3, 0}), kDraws);
}

// ------------------------------------------------------------------------------------------
// Penalties, bias, masking (processed logprobs expose the modified row)

// Processed logits (up to a constant) via logprobs of every id on a tiny vocabulary.
std::vector<double> ProcessedLogprobs(std::vector<float> x, SamplingParams p,
                                      const SequenceSampler& state, int32_t* token = nullptr) {
  SamplerScratch scratch;
  const SampleResult r = Sample(x.data(), static_cast<int64_t>(x.size()), state, scratch);
  std::vector<double> lp(x.size(), std::nan(""));
  for (int i = 0; i < r.num_top; ++i) lp[r.top[i].id] = r.top[i].logprob;
  if (token != nullptr) *token = r.token;
  return lp;
}

SequenceSampler WithHistory(const SamplingParams& p, std::vector<int32_t> prompt,
                            std::vector<int32_t> generated) {
  SequenceSampler s(p, 0, prompt);
  for (int32_t t : generated) s.Append(t);
  return s;
}

void ExpectLogprobsOf(const std::vector<double>& got, const std::vector<double>& logits) {
  const std::vector<double> want = LogSoftmax(logits);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "id " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-5) << "id " << i;
    }
  }
}

SamplingParams ProcessedParams(int vocab) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = vocab;
  p.logprobs_mode = LogprobsMode::kProcessed;
  return p;
}

TEST(SamplerTest, RepetitionFrequencyPresencePenalties) {
  const std::vector<float> x = {1.0f, 2.0f, -1.0f, 4.0f, 0.5f, -2.0f};
  SamplingParams p = ProcessedParams(6);
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  // prompt [1, 2], generated [2, 3, 3]
  // id0 absent: 1. id1 prompt only: 2/2 = 1. id2: -1*2 = -2, then -0.5*1 - 0.25 -> -2.75.
  // id3: 4/2 = 2, then -0.5*2 - 0.25 -> 0.75. id4, id5 absent.
  ExpectLogprobsOf(ProcessedLogprobs(x, p, WithHistory(p, {1, 2}, {2, 3, 3})),
                   {1.0, 1.0, -2.75, 0.75, 0.5, -2.0});

  // Window 3: context tail [2 (generated), 3, 3]; the prompt's 1 and 2 fall out.
  p.penalty_window = 3;
  ExpectLogprobsOf(ProcessedLogprobs(x, p, WithHistory(p, {1, 2}, {2, 3, 3})),
                   {1.0, 2.0, -2.75, 0.75, 0.5, -2.0});
  // Window 2: only [3, 3].
  p.penalty_window = 2;
  ExpectLogprobsOf(ProcessedLogprobs(x, p, WithHistory(p, {1, 2}, {2, 3, 3})),
                   {1.0, 2.0, -1.0, 0.75, 0.5, -2.0});
  // Window longer than the prompt alone, applied from construction.
  p.penalty_window = 1;
  ExpectLogprobsOf(ProcessedLogprobs(x, p, WithHistory(p, {3, 1}, {})),
                   {1.0, 1.0, -1.0, 4.0, 0.5, -2.0});
}

TEST(SamplerTest, LogitBiasAndTemperatureInProcessedLogprobs) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 0.0f};
  SamplingParams p = ProcessedParams(4);
  p.logit_bias[0] = 5.0f;
  p.logit_bias[2] = -1.5f;
  int32_t token = -1;
  ExpectLogprobsOf(ProcessedLogprobs(x, p, SequenceSampler(p, 0, {}), &token),
                   {6.0, 2.0, 1.5, 0.0});
  EXPECT_EQ(token, 0);  // the bias changed the greedy choice
  p.temperature = 2.0f;
  ExpectLogprobsOf(ProcessedLogprobs(x, p, SequenceSampler(p, 0, {})), {3.0, 1.0, 0.75, 0.0});
}

TEST(SamplerTest, MinTokensMasksEosAndStopIds) {
  const std::vector<float> x = {0.0f, 1.0f, 5.0f, 4.0f, 3.0f};  // EOS 2 is the argmax
  SamplingParams p;
  p.temperature = 0.0f;
  p.eos_token_ids = {2};
  p.stop_token_ids = {3};
  p.min_tokens = 2;
  SequenceSampler s(p, 0, {});
  SamplerScratch scratch;
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> row = x;
    got.push_back(Sample(row.data(), 5, s, scratch).token);
    s.Append(got.back());
  }
  EXPECT_EQ(got, (std::vector<int32_t>{4, 4, 2}));
  EXPECT_TRUE(s.IsStopToken(2));
  EXPECT_TRUE(s.IsStopToken(3));
  EXPECT_FALSE(s.IsStopToken(4));

  // ignore_eos: EOS is an ordinary token (neither masked nor a stop), stop ids still masked.
  p.ignore_eos = true;
  SequenceSampler s2(p, 0, {});
  std::vector<float> row = x;
  EXPECT_EQ(Sample(row.data(), 5, s2, scratch).token, 2);
  EXPECT_FALSE(s2.IsStopToken(2));
  EXPECT_TRUE(s2.IsStopToken(3));

  // Sampling path too: EOS never drawn before min_tokens.
  SamplingParams q;
  q.eos_token_ids = {2};
  q.min_tokens = 1;
  q.max_tokens = 1;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    q.seed = seed;
    SequenceSampler s3(q, 0, {});
    std::vector<float> r = x;
    EXPECT_NE(Sample(r.data(), 5, s3, scratch).token, 2);
  }
}

// ------------------------------------------------------------------------------------------
// Logprobs

TEST(SamplerTest, RawLogprobsSumToOneAndMatchDoubleLogSoftmax) {
  const std::vector<float> x = {0.3f, -1.2f, 2.2f, 0.9f, 0.9f, -3.0f, 1.1f, 0.0f, 2.2f, -0.4f};
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 3;
  p.logit_bias[5] = 3.0f;  // must not show in raw logprobs
  p.logprobs = 10;
  p.seed = 77;
  SequenceSampler state(p, 0, {});
  SamplerScratch scratch;
  const std::vector<double> want = LogSoftmax(ToDouble(x));
  for (int i = 0; i < 50; ++i) {
    std::vector<float> row = x;
    const SampleResult r = Sample(row.data(), 10, state, scratch);
    ASSERT_EQ(r.num_top, 10);
    double mass = 0.0;
    for (int j = 0; j < r.num_top; ++j) {
      mass += std::exp(static_cast<double>(r.top[j].logprob));
      EXPECT_NEAR(r.top[j].logprob, want[r.top[j].id], 1e-5);
      if (j > 0) {
        const bool ordered =
            r.top[j - 1].logprob > r.top[j].logprob ||
            (r.top[j - 1].logprob == r.top[j].logprob && r.top[j - 1].id < r.top[j].id);
        EXPECT_TRUE(ordered) << "position " << j;
      }
    }
    EXPECT_NEAR(mass, 1.0, 1e-5);
    EXPECT_NEAR(r.logprob, want[r.token], 1e-5);
    state.Append(r.token);
  }
  // Ties: ids 2 and 8 (2.2), 3 and 4 (0.9) in id order.
  std::vector<float> row = x;
  const SampleResult r = Sample(row.data(), 10, state, scratch);
  EXPECT_EQ(r.top[0].id, 2);
  EXPECT_EQ(r.top[1].id, 8);
  EXPECT_EQ(r.top[3].id, 3);
  EXPECT_EQ(r.top[4].id, 4);
}

TEST(SamplerTest, ChosenLogprobOnlyWhenAskedAndTopNOnLargeVocab) {
  std::vector<float> x = RandomLogits(50000, 9);
  SamplingParams p;
  p.seed = 1;
  SamplerScratch scratch;
  std::vector<float> row = x;
  SampleResult r = Sample(row.data(), 50000, SequenceSampler(p, 0, {}), scratch);
  EXPECT_EQ(r.num_top, 0);
  EXPECT_EQ(r.logprob, 0.0f);

  p.return_logprob = true;
  p.logprobs = 5;
  row = x;
  r = Sample(row.data(), 50000, SequenceSampler(p, 0, {}), scratch);
  const std::vector<double> want = LogSoftmax(ToDouble(x));
  EXPECT_NEAR(r.logprob, want[r.token], 1e-4);
  std::vector<int> by_value(50000);
  for (int i = 0; i < 50000; ++i) by_value[i] = i;
  std::partial_sort(by_value.begin(), by_value.begin() + 5, by_value.end(),
                    [&](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  ASSERT_EQ(r.num_top, 5);
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(r.top[j].id, by_value[j]);
    EXPECT_NEAR(r.top[j].logprob, want[by_value[j]], 1e-4);
  }
}

TEST(SamplerTest, AllMaskedRowDoesNotCrash) {
  std::vector<float> x = {-kInf, -kInf, -kInf};
  SamplingParams p;
  SamplerScratch scratch;
  const SampleResult r = Sample(x.data(), 3, SequenceSampler(p, 0, {}), scratch);
  EXPECT_GE(r.token, 0);
  EXPECT_LT(r.token, 3);
}

// NaN and +inf logits (a broken model, or a temperature so small that x / T overflows) neither
// crash nor pick a NaN token; +inf logits take all the mass.
TEST(SamplerTest, NanAndInfLogitsAreSafe) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingParams p;
  p.temperature = 1.0f;
  SamplerScratch scratch;
  for (int i = 0; i < 50; ++i) {
    std::vector<float> x = {nan, 1.0f, -nan, 2.0f};
    SequenceSampler state(p, 0, {});
    for (int k = 0; k < i; ++k) state.Append(1);
    const SampleResult r = Sample(x.data(), 4, state, scratch);
    EXPECT_TRUE(r.token == 1 || r.token == 3) << r.token;
  }
  std::vector<float> inf_row = {1.0f, kInf, 3.0f, kInf};
  std::vector<int> counts = Draw(inf_row, p, 2000);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(counts[1], 800);
  EXPECT_GT(counts[3], 800);
  SamplingParams tiny = p;
  tiny.temperature = 1e-38f;
  counts = Draw({30.0f, 29.0f, 30.0f}, tiny, 200);
  EXPECT_EQ(counts[0], 200);  // greedy: ties go to the lowest id
}

// ------------------------------------------------------------------------------------------
// PromptScorer: the logprob of a given token, position after position

// Every id's logprob from one Score call (logprobs = vocab), and the scored token's.
std::vector<double> ScoredLogprobs(PromptScorer& scorer, std::vector<float> x, int32_t token,
                                   double* token_logprob) {
  const SampleResult r = scorer.Score(x.data(), static_cast<int64_t>(x.size()), token);
  EXPECT_EQ(r.token, token);
  std::vector<double> lp(x.size(), std::nan(""));
  for (int i = 0; i < r.num_top; ++i) lp[r.top[i].id] = r.top[i].logprob;
  *token_logprob = r.logprob;
  return lp;
}

TEST(PromptScorerTest, RawIsTheLogSoftmaxOfTheRowWhateverTheParameters) {
  const std::vector<float> x = {0.3f, -1.2f, 2.2f, 0.9f, 0.9f, -3.0f};
  SamplingParams p;
  p.temperature = 0.5f;
  p.logit_bias[1] = 4.0f;
  p.repetition_penalty = 3.0f;
  p.logprobs = 4;
  PromptScorer scorer(p, 0, std::vector<int32_t>{2, 2});
  const std::vector<double> want = LogSoftmax(ToDouble(x));
  for (int32_t token : {1, 5, 3}) {
    std::vector<float> row = x;
    const SampleResult r = scorer.Score(row.data(), 6, token);
    EXPECT_EQ(r.token, token);
    EXPECT_NEAR(r.logprob, want[token], 1e-6) << token;
    ASSERT_EQ(r.num_top, 4);
    // By hand: 2.2 (id 2), then the tie 0.9 of ids 3 and 4 in id order, then 0.3 (id 0).
    const int32_t ids[] = {2, 3, 4, 0};
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(r.top[k].id, ids[k]) << k;
      EXPECT_NEAR(r.top[k].logprob, want[ids[k]], 1e-6) << k;
    }
  }
}

// Processed: bias, then the repetition penalty over the tokens before the scored one (the context
// grows by each scored token), then temperature; frequency / presence penalties and min_tokens
// masking do not apply to prompt tokens.
TEST(PromptScorerTest, ProcessedAppliesBiasRepetitionOverTheContextAndTemperature) {
  const std::vector<float> x = {1.0f, 2.0f, -1.0f, 4.0f, 0.5f};
  SamplingParams p = ProcessedParams(5);
  p.temperature = 2.0f;
  p.logit_bias[4] = 1.5f;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  p.presence_penalty = 1.0f;
  p.min_tokens = 5;
  p.eos_token_ids = {3};
  PromptScorer scorer(p, 0, std::vector<int32_t>{1});
  double lp = 0;
  // Context [1]: id1 2/2 = 1; id4 biased 2.0; / 2.
  ExpectLogprobsOf(ScoredLogprobs(scorer, x, 3, &lp), {0.5, 0.5, -0.5, 2.0, 1.0});
  EXPECT_NEAR(lp, LogSoftmax({0.5, 0.5, -0.5, 2.0, 1.0})[3], 1e-5);
  // Context [1, 3]: id3 4/2 = 2 too.
  ExpectLogprobsOf(ScoredLogprobs(scorer, x, 2, &lp), {0.5, 0.5, -0.5, 1.0, 1.0});
  // Context [1, 3, 2]: id2 -1*2 = -2.
  ExpectLogprobsOf(ScoredLogprobs(scorer, x, 0, &lp), {0.5, 0.5, -1.0, 1.0, 1.0});
  EXPECT_NEAR(lp, LogSoftmax({0.5, 0.5, -1.0, 1.0, 1.0})[0], 1e-5);

  // Window 2 over context [1, 3] then [3, 0]: id1 falls out of the window.
  p.penalty_window = 2;
  PromptScorer windowed(p, 0, std::vector<int32_t>{1, 3});
  ExpectLogprobsOf(ScoredLogprobs(windowed, x, 0, &lp), {0.5, 0.5, -0.5, 1.0, 1.0});
  ExpectLogprobsOf(ScoredLogprobs(windowed, x, 4, &lp), {0.25, 1.0, -0.5, 1.0, 1.0});

  // Greedy: no temperature division (Sample reports greedy draws the same way).
  p.temperature = 0.0f;
  p.penalty_window = 0;
  PromptScorer greedy(p, 0, std::vector<int32_t>{});
  ExpectLogprobsOf(ScoredLogprobs(greedy, x, 1, &lp), {1.0, 2.0, -1.0, 4.0, 2.0});
}

// The scorer's processed logprob is the one Sample() reports for the same token drawn after the
// same context (here a context of prompt tokens only, no generated ones, no min_tokens).
TEST(PromptScorerTest, ProcessedEqualsSampleAfterTheSameContext) {
  const std::vector<float> x = RandomLogits(1000, 5);
  SamplingParams p;
  p.temperature = 0.7f;
  p.repetition_penalty = 1.3f;
  p.logit_bias[17] = -2.0f;
  p.logprobs = 5;
  p.return_logprob = true;
  p.logprobs_mode = LogprobsMode::kProcessed;
  p.seed = 3;
  const std::vector<int32_t> context = {17, 40, 40, 999, 3};
  SamplerScratch scratch;
  PromptScorer scorer(p, 0, std::span<const int32_t>(context.data(), 2));
  for (size_t i = 2; i < context.size(); ++i) {
    std::vector<float> a = x, b = x;
    const SampleResult scored = scorer.Score(a.data(), 1000, context[i]);
    const SequenceSampler state(p, 0, std::span<const int32_t>(context.data(), i));
    const SampleResult drawn = Sample(b.data(), 1000, state, scratch);
    ASSERT_EQ(scored.num_top, 5);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(scored.top[k].id, drawn.top[k].id) << i << "/" << k;
      EXPECT_EQ(scored.top[k].logprob, drawn.top[k].logprob) << i << "/" << k;
    }
  }
}

// ------------------------------------------------------------------------------------------
// TokenCounts against a std::map reference, through growth, window eviction and compaction.

TEST(TokenCountsTest, MatchesReferenceUnderChurn) {
  TokenCounts counts(4);
  std::map<int32_t, std::pair<int, int>> ref;
  std::vector<std::pair<int32_t, bool>> live;
  std::mt19937 rng(123);
  for (int step = 0; step < 200000; ++step) {
    const bool add = live.size() < 50 || (rng() % 2 == 0 && live.size() < 400);
    if (add) {
      const int32_t id = static_cast<int32_t>(rng() % 5000);
      const bool gen = rng() % 3 == 0;
      counts.Add(id, gen);
      live.emplace_back(id, gen);
      ++ref[id].first;
      if (gen) ++ref[id].second;
    } else {
      const size_t k = rng() % live.size();
      const auto [id, gen] = live[k];
      live[k] = live.back();
      live.pop_back();
      counts.Remove(id, gen);
      --ref[id].first;
      if (gen) --ref[id].second;
    }
  }
  int visited = 0;
  counts.ForEach([&](const TokenCounts::Entry& e) {
    ++visited;
    EXPECT_EQ(e.context, ref[e.id].first);
    EXPECT_EQ(e.generated, ref[e.id].second);
  });
  int nonzero = 0;
  for (const auto& [id, c] : ref) {
    nonzero += c.first > 0;
    EXPECT_EQ(counts.Get(id).context, c.first);
    EXPECT_EQ(counts.Get(id).generated, c.second);
  }
  EXPECT_EQ(visited, nonzero);
}

}  // namespace
}  // namespace astr
