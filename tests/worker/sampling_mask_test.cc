// The sampling mask (SamplingParams.return_sampling_mask, worker/sampler.h step 9): the ids a draw
// chose among. Every expected set is computed here from the logits in double precision (sorting
// by (logit desc, id asc), prefix masses of the softmax), never from the sampler; thresholds are
// put halfway between two neighbouring values so that float rounding cannot move a boundary.
// Also: a step that asks for a mask draws on the host on a backend that samples on its device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_util.h"
#include "worker/backend.h"
#include "worker/sampler.h"
#include "worker/step_sampling.h"

namespace astr {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int64_t vocab, uint32_t seed, float scale = 2.0f) {
  return testing::RandomNormalFloats(static_cast<size_t>(vocab), seed, scale);
}

// Ids by (logit desc, id asc): the sampler's documented candidate order.
std::vector<int32_t> ByLogit(const std::vector<float>& x) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return ids;
}

std::vector<int32_t> Sorted(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

// softmax(x / t) in double over the given ids (others: 0), in the order of `ids`.
std::vector<double> Probs(const std::vector<float>& x, const std::vector<int32_t>& ids, double t) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t id : ids) m = std::max(m, x[id] / t);
  std::vector<double> p;
  double z = 0.0;
  for (int32_t id : ids) {
    p.push_back(std::exp(x[id] / t - m));
    z += p.back();
  }
  for (double& v : p) v /= z;
  return p;
}

// `n` draws of one sequence (token index 0..n-1) from the same logits.
std::vector<SampleResult> DrawMany(const std::vector<float>& logits, SamplingParams params, int n,
                                   const uint32_t* allowed = nullptr) {
  params.return_sampling_mask = true;
  EXPECT_TRUE(ValidateSamplingParams(params, static_cast<int64_t>(logits.size())).ok());
  SequenceSampler state(params, 3, {});
  SamplerScratch scratch;
  std::vector<SampleResult> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    out.push_back(Sample(row.data(), static_cast<int64_t>(row.size()), state, scratch, allowed));
    state.Append(out.back().token);
  }
  return out;
}

// Every draw's mask is `want` (ascending ids) and holds the drawn token.
void ExpectMasks(const std::vector<SampleResult>& draws, const std::vector<int32_t>& want) {
  for (size_t i = 0; i < draws.size(); ++i) {
    const SampleResult& r = draws[i];
    EXPECT_EQ(r.mask.count, static_cast<int32_t>(want.size())) << "draw " << i;
    EXPECT_EQ(r.mask.ids, want) << "draw " << i;
    EXPECT_TRUE(std::binary_search(r.mask.ids.begin(), r.mask.ids.end(), r.token))
        << "draw " << i << " chose " << r.token << ", outside its mask";
  }
}

TEST(SamplingMaskTest, TopKIsTheKHighestLogits) {
  const std::vector<float> x = RandomLogits(1000, 1);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 5;
  const std::vector<int32_t> order = ByLogit(x);
  ExpectMasks(DrawMany(x, p, 50), Sorted({order.begin(), order.begin() + 5}));
}

// Logits in steps of 0.5 over a small range: many exact ties, and the k-th place cuts through
// one. The ties go to the lowest ids.
TEST(SamplingMaskTest, TopKCutThroughTiesKeepsTheLowestIds) {
  std::vector<float> x = RandomLogits(300, 2);
  for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
  const std::vector<int32_t> order = ByLogit(x);
  int k = 1;  // a k whose cut falls inside a run of equal logits
  while (k < 299 && !(x[order[k - 1]] == x[order[k]] && k > 10)) ++k;
  ASSERT_LT(k, 299);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = k;
  ExpectMasks(DrawMany(x, p, 20), Sorted({order.begin(), order.begin() + k}));
}

// Top-p: the smallest prefix (by probability) whose mass reaches top_p. top_p is put halfway
// between the masses of the 7- and 8-token prefixes, so the mask is the 8 most likely tokens.
TEST(SamplingMaskTest, TopPIsTheSmallestPrefixReachingTheMass) {
  const std::vector<float> x = RandomLogits(500, 3, 2.5f);
  const double t = 0.9;
  const std::vector<int32_t> order = ByLogit(x);
  const std::vector<double> probs = Probs(x, order, t);
  double before = 0.0;
  for (int i = 0; i < 7; ++i) before += probs[i];
  const double after = before + probs[7];
  ASSERT_GT(probs[7], 1e-3) << "pick another seed: the boundary would be too tight";
  SamplingParams p;
  p.temperature = static_cast<float>(t);
  p.top_p = static_cast<float>((before + after) / 2);
  ExpectMasks(DrawMany(x, p, 50), Sorted({order.begin(), order.begin() + 8}));
}

// Min-p: tokens whose probability is at least min_p times the largest. min_p is put halfway
// between two neighbouring ratios.
TEST(SamplingMaskTest, MinPKeepsTokensAboveTheFractionOfTheMax) {
  const std::vector<float> x = RandomLogits(400, 4, 1.5f);
  const double t = 1.2;
  const std::vector<int32_t> order = ByLogit(x);
  const std::vector<double> probs = Probs(x, order, t);
  const int keep = 12;
  const double min_p = (probs[keep - 1] + probs[keep]) / 2 / probs[0];
  ASSERT_GT((probs[keep - 1] - probs[keep]) / probs[0], 1e-4);
  SamplingParams p;
  p.temperature = static_cast<float>(t);
  p.min_p = static_cast<float>(min_p);
  ExpectMasks(DrawMany(x, p, 50), Sorted({order.begin(), order.begin() + keep}));
}

// top-k, then top-p over the renormalized top-k, then min-p: the order of worker/sampler.h step 7.
TEST(SamplingMaskTest, TopKThenTopPThenMinP) {
  const std::vector<float> x = RandomLogits(800, 5, 1.0f);  // flat: top-p alone would keep many
  const double t = 1.0;
  const std::vector<int32_t> order = ByLogit(x);
  const std::vector<int32_t> top40(order.begin(), order.begin() + 40);
  const std::vector<double> probs = Probs(x, top40, t);  // renormalized over the top 40
  double before = 0.0;
  for (int i = 0; i < 29; ++i) before += probs[i];
  SamplingParams p;
  p.temperature = static_cast<float>(t);
  p.top_k = 40;
  p.top_p = static_cast<float>(before + probs[29] / 2);  // the 30 most likely reach it
  // min_p halfway between the 25th and 26th ratios cuts further, to 25.
  p.min_p = static_cast<float>((probs[24] + probs[25]) / 2 / probs[0]);
  ASSERT_GT((probs[24] - probs[25]) / probs[0], 1e-4);
  ExpectMasks(DrawMany(x, p, 40), Sorted({order.begin(), order.begin() + 25}));
}

// A constraint's mask (structured outputs) removes what it does not allow; a top-k larger than
// what is allowed keeps only the allowed tokens (the others have logit -inf).
TEST(SamplingMaskTest, ConstraintMaskIsPartOfTheSamplingMask) {
  const int64_t vocab = 700;
  const std::vector<float> x = RandomLogits(vocab, 6);
  std::mt19937 rng(6);
  std::set<int32_t> allowed_set;
  while (allowed_set.size() < 37) allowed_set.insert(static_cast<int32_t>(rng() % vocab));
  std::vector<uint32_t> words((vocab + 31) / 32, 0);
  for (int32_t id : allowed_set) words[id / 32] |= 1u << (id % 32);
  const std::vector<int32_t> allowed(allowed_set.begin(), allowed_set.end());

  SamplingParams p;
  p.temperature = 1.0f;
  ExpectMasks(DrawMany(x, p, 30, words.data()), allowed);
  p.top_k = 50;  // more than the 37 allowed
  ExpectMasks(DrawMany(x, p, 30, words.data()), allowed);
  p.top_k = 4;  // the 4 allowed tokens with the highest logits
  std::vector<int32_t> best = allowed;
  std::stable_sort(best.begin(), best.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  best.resize(4);
  ExpectMasks(DrawMany(x, p, 30, words.data()), Sorted(best));
}

// Nothing removed: count is the vocabulary size and no ids are sent. A finite logit_bias, however
// negative, removes nothing; min_tokens masking removes the stop and EOS ids.
TEST(SamplingMaskTest, UntruncatedDrawIsTheWholeVocabularyWithoutIds) {
  const int64_t vocab = 256;
  const std::vector<float> x = RandomLogits(vocab, 7);
  SamplingParams p;
  p.temperature = 1.3f;
  p.logit_bias[17] = -100.0f;
  for (const SampleResult& r : DrawMany(x, p, 20)) {
    EXPECT_EQ(r.mask.count, vocab);
    EXPECT_TRUE(r.mask.ids.empty());
  }
  p.eos_token_ids = {2};
  p.stop_token_ids = {9, 200};
  p.min_tokens = 5;
  p.max_tokens = 10;
  std::vector<int32_t> rest;
  for (int32_t id = 0; id < vocab; ++id) {
    if (id != 2 && id != 9 && id != 200) rest.push_back(id);
  }
  const std::vector<SampleResult> draws = DrawMany(x, p, 7);
  ExpectMasks({draws.begin(), draws.begin() + 5}, rest);  // tokens 0..4: under min_tokens
  for (size_t i = 5; i < draws.size(); ++i) {
    EXPECT_EQ(draws[i].mask.count, vocab) << "draw " << i;
    EXPECT_TRUE(draws[i].mask.ids.empty()) << "draw " << i;
  }
}

// Across many parameter sets and logits, the drawn token is in its mask, and asking for the mask
// changes neither the token nor the logprobs.
TEST(SamplingMaskTest, DrawnTokenIsInTheMaskAndTheDrawIsUnchanged) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t vocab = 50 + rng() % 3000;
    std::vector<float> x = RandomLogits(vocab, 100 + trial, 0.5f + (rng() % 40) / 10.0f);
    if (trial % 5 == 0) x[rng() % vocab] = -kInf;
    SamplingParams p;
    p.temperature = 0.2f + (rng() % 20) / 10.0f;
    if (trial % 2) p.top_k = 1 + rng() % 100;
    if (trial % 3) p.top_p = 0.05f + (rng() % 95) / 100.0f;
    if (trial % 4 == 1) p.min_p = (rng() % 50) / 100.0f;
    p.seed = trial;
    p.return_logprob = true;
    p.logprobs = 3;
    SequenceSampler plain(p, 1, {});
    SamplingParams with_mask = p;
    with_mask.return_sampling_mask = true;
    SequenceSampler masked(with_mask, 1, {});
    SamplerScratch scratch;
    std::vector<float> a = x, b = x;
    const SampleResult ra = Sample(a.data(), vocab, plain, scratch);
    const SampleResult rb = Sample(b.data(), vocab, masked, scratch);
    EXPECT_EQ(ra.mask.count, 0) << "trial " << trial << ": a mask nobody asked for";
    EXPECT_TRUE(ra.mask.ids.empty());
    EXPECT_EQ(ra.token, rb.token) << "trial " << trial;
    EXPECT_EQ(ra.logprob, rb.logprob) << "trial " << trial;
    for (int k = 0; k < 3; ++k) EXPECT_EQ(ra.top[k].id, rb.top[k].id) << "trial " << trial;
    ASSERT_GE(rb.mask.count, 1) << "trial " << trial;
    if (rb.mask.count == vocab && rb.mask.ids.empty()) continue;
    EXPECT_EQ(rb.mask.count, static_cast<int32_t>(rb.mask.ids.size())) << "trial " << trial;
    EXPECT_TRUE(std::is_sorted(rb.mask.ids.begin(), rb.mask.ids.end())) << "trial " << trial;
    EXPECT_TRUE(std::binary_search(rb.mask.ids.begin(), rb.mask.ids.end(), rb.token))
        << "trial " << trial;
    for (int32_t id : rb.mask.ids) EXPECT_GT(x[id], -kInf) << "trial " << trial;
    if (p.top_k > 0) EXPECT_LE(rb.mask.count, p.top_k) << "trial " << trial;
  }
}

TEST(SamplingMaskTest, GreedyIsRefusedNamingTheField) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.return_sampling_mask = true;
  const Status s = ValidateSamplingParams(p, 100, "sampling.");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("sampling.return_sampling_mask needs temperature >= 1e-05", 0), 0u)
      << s.ToString();
  p.temperature = 1e-5f;
  EXPECT_TRUE(ValidateSamplingParams(p, 100).ok());
  // Unvalidated (the sampler's own documented rule): the argmax alone.
  p.temperature = 0.0f;
  SequenceSampler state(p, 0, {});
  SamplerScratch scratch;
  std::vector<float> x = RandomLogits(100, 9);
  const int32_t argmax = ByLogit(x)[0];
  const SampleResult r = Sample(x.data(), 100, state, scratch);
  EXPECT_EQ(r.token, argmax);
  EXPECT_EQ(r.mask.count, 1);
  EXPECT_EQ(r.mask.ids, std::vector<int32_t>{argmax});
}

// A backend that says it samples on its device: ForwardSample draws a fixed token, Forward fills
// the logits rows with `logits` (so a host draw can be told from a device one).
class DeviceSamplingBackend final : public Backend {
 public:
  explicit DeviceSamplingBackend(std::vector<float> logits) : logits_(std::move(logits)) {
    config_.vocab_size = static_cast<int64_t>(logits_.size());
  }
  std::string name() const override { return "fake-device"; }
  const model::ModelConfig& config() const override { return config_; }
  int64_t num_pages() const override { return 1; }
  int64_t page_size() const override { return 16; }
  int64_t max_batch_tokens() const override { return 16; }
  int64_t max_sample_rows() const override { return 4; }
  Status Forward(const StepBatch& batch, float* logits) override {
    ++forwards;
    for (size_t r = 0; r < batch.sample_rows.size(); ++r) {
      std::copy(logits_.begin(), logits_.end(), logits + r * logits_.size());
    }
    return OkStatus();
  }
  bool samples_on_device() const override { return true; }
  Status ForwardSample(const StepBatch& /*batch*/, std::span<const SequenceSampler* const> samplers,
                       std::span<SampleResult> results, std::span<const uint32_t* const>,
                       const std::function<Status()>&) override {
    ++device_draws;
    for (size_t i = 0; i < samplers.size(); ++i) results[i] = SampleResult{.token = kDeviceToken};
    return OkStatus();
  }
  static constexpr int32_t kDeviceToken = 7;
  int forwards = 0;
  int device_draws = 0;

 private:
  std::vector<float> logits_;
  model::ModelConfig config_;
};

TEST(SamplingMaskTest, AStepThatAsksForAMaskDrawsOnTheHost) {
  std::vector<float> x = RandomLogits(64, 10);
  x[DeviceSamplingBackend::kDeviceToken] = -50.0f;  // never among the top 3 drawn on the host
  DeviceSamplingBackend backend(x);
  StepSampling sampling(backend);
  StepBatch batch;
  batch.sample_rows = {0, 1};
  SamplingParams p;
  p.top_k = 3;
  SequenceSampler plain(p, 0, {});
  SamplingParams with_mask = p;
  with_mask.return_sampling_mask = true;
  SequenceSampler masked(with_mask, 1, {});
  std::vector<SampleResult> results(2);

  std::vector<const SequenceSampler*> rows = {&plain, &plain};
  ASSERT_TRUE(sampling.Run(backend, batch, rows, {}, results).ok());
  EXPECT_EQ(backend.device_draws, 1);
  EXPECT_EQ(backend.forwards, 0);
  EXPECT_EQ(results[0].token, DeviceSamplingBackend::kDeviceToken);

  rows = {&plain, &masked};  // one row asks: the whole step draws on the host
  ASSERT_TRUE(sampling.Run(backend, batch, rows, {}, results).ok());
  EXPECT_EQ(backend.device_draws, 1);
  EXPECT_EQ(backend.forwards, 1);
  const std::vector<int32_t> order = ByLogit(x);
  const std::vector<int32_t> top3 = Sorted({order.begin(), order.begin() + 3});
  for (const SampleResult& r : results) {
    EXPECT_TRUE(std::binary_search(top3.begin(), top3.end(), r.token)) << r.token;
  }
  EXPECT_EQ(results[0].mask.count, 0);
  EXPECT_EQ(results[1].mask.ids, top3);
}

// A host-sampling backend whose rows have logits of their own and which spreads the draws over
// `threads` host threads (its own std::threads, as the CPU backend's pool would).
class HostThreadsBackend final : public Backend {
 public:
  HostThreadsBackend(int64_t vocab, int rows, int threads) : rows_(rows), threads_(threads) {
    config_.vocab_size = vocab;
  }
  std::string name() const override { return "fake-host"; }
  const model::ModelConfig& config() const override { return config_; }
  int64_t num_pages() const override { return 1; }
  int64_t page_size() const override { return 16; }
  int64_t max_batch_tokens() const override { return 16; }
  int64_t max_sample_rows() const override { return rows_; }
  Status Forward(const StepBatch& batch, float* logits) override {
    for (size_t r = 0; r < batch.sample_rows.size(); ++r) {
      const std::vector<float> x = RandomLogits(config_.vocab_size, 100 + r);
      std::copy(x.begin(), x.end(), logits + r * config_.vocab_size);
    }
    return OkStatus();
  }
  int host_threads() const override { return threads_; }
  void RunOnHostThreads(const std::function<void(int, int)>& fn) override {
    ++regions;
    std::vector<std::thread> others;
    for (int t = 1; t < threads_; ++t) others.emplace_back([&fn, t, this] { fn(t, threads_); });
    fn(0, threads_);
    for (std::thread& t : others) t.join();
  }
  int regions = 0;

 private:
  int rows_;
  int threads_;
  model::ModelConfig config_;
};

TEST(SamplingMaskTest, HostDrawsSpreadOverThreadsEqualOneThreadsDraws) {
  const int64_t vocab = 3000;
  const int rows = 7;
  std::vector<SamplingParams> params(rows);
  params[0].temperature = 0.0f;  // greedy
  params[1].temperature = 0.0f;
  params[1].logprobs = 5;
  params[2].temperature = 0.9f;
  params[2].top_k = 50;
  params[2].seed = 11;
  params[3].temperature = 1.3f;
  params[3].top_p = 0.8f;
  params[3].return_logprob = true;
  params[3].seed = 12;
  params[4].min_p = 0.1f;
  params[4].seed = 13;
  params[5].logprobs = 3;
  params[5].seed = 14;
  params[6].temperature = 0.7f;
  params[6].return_sampling_mask = true;
  params[6].top_k = 20;
  params[6].seed = 15;
  std::vector<SequenceSampler> states;
  states.reserve(rows);
  for (int i = 0; i < rows; ++i) {
    states.emplace_back(params[i], static_cast<uint64_t>(i), std::span<const int32_t>{});
  }
  std::vector<const SequenceSampler*> samplers;
  for (const SequenceSampler& s : states) samplers.push_back(&s);
  StepBatch batch;
  for (int i = 0; i < rows; ++i) batch.sample_rows.push_back(i);

  std::vector<std::vector<SampleResult>> got;
  for (int threads : {1, 2, 3, 8}) {
    HostThreadsBackend backend(vocab, rows, threads);
    StepSampling sampling(backend);
    std::vector<SampleResult> results(rows);
    ASSERT_TRUE(sampling.Run(backend, batch, samplers, {}, results).ok());
    EXPECT_EQ(backend.regions, threads > 1 ? 1 : 0);
    got.push_back(results);
  }
  for (size_t v = 1; v < got.size(); ++v) {
    for (int i = 0; i < rows; ++i) {
      SCOPED_TRACE("variant " + std::to_string(v) + " row " + std::to_string(i));
      const SampleResult& a = got[0][i];
      const SampleResult& b = got[v][i];
      EXPECT_EQ(a.token, b.token);
      EXPECT_EQ(a.logprob, b.logprob);
      ASSERT_EQ(a.num_top, b.num_top);
      for (int k = 0; k < a.num_top; ++k) {
        EXPECT_EQ(a.top[k].id, b.top[k].id);
        EXPECT_EQ(a.top[k].logprob, b.top[k].logprob);
      }
      EXPECT_EQ(a.mask.count, b.mask.count);
      EXPECT_EQ(a.mask.ids, b.mask.ids);
    }
  }
  // The rows did draw what their params say: greedy rows the argmax, the mask row within its k.
  const std::vector<float> x0 = RandomLogits(vocab, 100);
  EXPECT_EQ(got[0][0].token, std::max_element(x0.begin(), x0.end()) - x0.begin());
  EXPECT_EQ(got[0][6].mask.count, 20);
  EXPECT_EQ(got[0][1].num_top, 5);
}

}  // namespace
}  // namespace astr
