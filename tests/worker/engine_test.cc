// The offline engine: continuous batching with preemption, seeded sampling independent of the
// batch, stop conditions, request validation, and every KV page returned.
#include "worker/engine.h"

#include <gtest/gtest.h>

#include <random>

#include "common/model/model_file.h"
#include "tests/support/test_util.h"
#include "worker/backend.h"

namespace astr {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::SharedFile("models/stories260K.gguf");
    if (path_.empty()) GTEST_SKIP() << "shared test data missing: models/stories260K.gguf";
    auto f = model::ModelFile::Open(path_);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(*f);
  }

  std::unique_ptr<Engine> MakeEngine(int64_t num_pages, int64_t page_size = 4,
                                     int64_t max_batch_tokens = 256, bool prefix_cache = false) {
    BackendOptions o;
    o.weight_dtype = "f32";
    o.threads = 2;
    o.page_size = page_size;
    o.num_pages = num_pages;
    o.max_batch_tokens = max_batch_tokens;
    o.max_sample_rows = 16;
    auto b = CreateCpuBackend(*file_, o);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    EngineOptions e;
    e.max_running = 16;
    e.prefill_chunk = 32;
    e.prefix_cache = prefix_cache;
    return std::make_unique<Engine>(std::move(*b), e);
  }

  static std::vector<int32_t> Prompt(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p = {1};
    for (int64_t i = 1; i < n; ++i) p.push_back(static_cast<int32_t>(3 + rng() % 500));
    return p;
  }

  static GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  }

  // Sample `sample_index` of a seeded, sampled request.
  static GenerationRequest Sampled(std::vector<int32_t> prompt, float temperature, uint64_t seed,
                                   int max_tokens, uint64_t sample_index) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.params.temperature = temperature;
    r.params.seed = seed;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    r.sample_index = sample_index;
    return r;
  }

  std::string path_;
  std::unique_ptr<model::ModelFile> file_;
};

TEST_F(EngineTest, PreemptionKeepsGreedyOutputAndReturnsPages) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(Greedy(Prompt(10 + 9 * i, i), 24));
  auto big = MakeEngine(1024);
  for (const auto& r : reqs) ASSERT_TRUE(big->Submit(r).ok());
  auto expected = big->RunToCompletion();
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  EXPECT_EQ(big->free_pages(), big->total_pages());

  // 40 pages of 4 tokens: 160 slots, far less than the ~600 the 8 sequences need together.
  auto small = MakeEngine(40);
  for (const auto& r : reqs) ASSERT_TRUE(small->Submit(r).ok());
  auto got = small->RunToCompletion();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  int64_t preemptions = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ((*got)[i].tokens, (*expected)[i].tokens) << "request " << i;
    EXPECT_EQ((*got)[i].finish, FinishReason::kLength);
    preemptions += (*got)[i].preemptions;
  }
  EXPECT_GT(preemptions, 0) << "the small pool should have forced preemption";
  EXPECT_EQ(small->free_pages(), small->total_pages());
}

TEST_F(EngineTest, SeededSamplingIndependentOfBatch) {
  GenerationRequest target;
  target.prompt = Prompt(12, 77);
  target.params.temperature = 0.9f;
  target.params.top_p = 0.95f;
  target.params.seed = 1234;
  target.params.max_tokens = 20;
  target.params.ignore_eos = true;

  auto alone = MakeEngine(512);
  ASSERT_TRUE(alone->Submit(target).ok());
  auto a = alone->RunToCompletion();
  ASSERT_TRUE(a.ok());

  auto crowded = MakeEngine(512);
  std::vector<GenerationRequest> others;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest o = target;
    o.prompt = Prompt(3 + 11 * i, 200 + i);
    o.params.seed = 99 + i;
    others.push_back(o);
  }
  ASSERT_TRUE(crowded->Submit(others[0]).ok());
  ASSERT_TRUE(crowded->Submit(others[1]).ok());
  std::vector<GenerationResult> done;
  ASSERT_TRUE(crowded->Step(&done).ok());  // the target joins mid-way
  ASSERT_TRUE(crowded->Submit(target).ok());
  for (int i = 2; i < 5; ++i) ASSERT_TRUE(crowded->Submit(others[i]).ok());
  auto c = crowded->RunToCompletion();
  ASSERT_TRUE(c.ok());
  const GenerationResult* found = nullptr;
  for (const auto& r : *c) {
    if (r.prompt == target.prompt) found = &r;
  }
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->tokens, (*a)[0].tokens);
}

TEST_F(EngineTest, SamplesOfOneRequestDifferAndReproduce) {
  auto run = [&]() {
    auto e = MakeEngine(512);
    for (uint64_t s = 0; s < 4; ++s)
      EXPECT_TRUE(e->Submit(Sampled(Prompt(6, 5), 1.0f, 7, 16, s)).ok());
    auto out = e->RunToCompletion();
    EXPECT_TRUE(out.ok());
    return *out;
  };
  auto first = run(), second = run();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].tokens, second[i].tokens);
  EXPECT_NE(first[0].tokens, first[1].tokens);
  EXPECT_NE(first[1].tokens, first[2].tokens);
}

TEST_F(EngineTest, StopConditions) {
  auto e = MakeEngine(512);
  // The golden continuation of "Once upon a time" starts 432 383 286 ...: stop on 286.
  GenerationRequest stop_id = Greedy({1, 403, 407, 261, 378}, 32);
  stop_id.params.stop_token_ids = {286};
  GenerationRequest callback = Greedy({1, 403, 407, 261, 378}, 32);
  callback.stop_check = [](const std::vector<int32_t>& gen) { return gen.size() == 5; };
  GenerationRequest length = Greedy({1, 403, 407, 261, 378}, 3);
  ASSERT_TRUE(e->Submit(stop_id).ok());
  ASSERT_TRUE(e->Submit(callback).ok());
  ASSERT_TRUE(e->Submit(length).ok());
  auto out = e->RunToCompletion();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].tokens, (std::vector<int32_t>{432, 383, 286}));
  EXPECT_EQ((*out)[0].finish, FinishReason::kStop);
  EXPECT_EQ((*out)[1].tokens.size(), 5u);
  EXPECT_EQ((*out)[1].finish, FinishReason::kStop);
  EXPECT_EQ((*out)[2].tokens, (std::vector<int32_t>{432, 383, 286}));
  EXPECT_EQ((*out)[2].finish, FinishReason::kLength);
  EXPECT_EQ(e->free_pages(), e->total_pages());
}

TEST_F(EngineTest, EosEndsUnlessIgnored) {
  auto e = MakeEngine(512);
  // Bias EOS (id 2) up so the model emits it at once.
  GenerationRequest eos = Greedy({1, 403}, 10);
  eos.params.ignore_eos = false;
  eos.params.eos_token_ids = {2};
  eos.params.logit_bias[2] = 100.0f;
  GenerationRequest ignored = eos;
  ignored.params.ignore_eos = true;
  ASSERT_TRUE(e->Submit(eos).ok());
  ASSERT_TRUE(e->Submit(ignored).ok());
  auto out = e->RunToCompletion();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].tokens, std::vector<int32_t>{2});
  EXPECT_EQ((*out)[0].finish, FinishReason::kEos);
  EXPECT_EQ((*out)[1].tokens.size(), 10u);
  EXPECT_EQ((*out)[1].finish, FinishReason::kLength);
}

// The engine plans with the scheduler's planner, so the scheduler's prefix cache works offline too:
// samples of one long prompt reuse its full pages, outputs are those computed without the cache,
// and every page (cached ones included) is free for reuse at the end.
TEST_F(EngineTest, PrefixCacheReusesSharedPromptsWithIdenticalOutputs) {
  auto run = [&](bool cache, int64_t* hits) {
    auto e = MakeEngine(512, 4, 256, cache);
    const std::vector<int32_t> prompt = Prompt(41, 9);  // 10 full pages of 4 tokens
    std::vector<GenerationResult> all;
    for (uint64_t s = 0; s < 4; ++s) {
      EXPECT_TRUE(e->Submit(Sampled(prompt, 0.8f, 5, 12, s)).ok());
      // One after the other, so each later sample finds the prompt's pages cached.
      auto out = e->RunToCompletion();
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      all.push_back((*out)[0]);
    }
    *hits = e->cache_hit_tokens();
    EXPECT_EQ(e->free_pages(), e->total_pages());
    return all;
  };
  int64_t hits_off = 0, hits_on = 0;
  const auto off = run(false, &hits_off);
  const auto on = run(true, &hits_on);
  EXPECT_EQ(hits_off, 0);
  // Samples 1..3 reuse the 10 full prompt pages (40 tokens; the last token is always fed).
  EXPECT_EQ(hits_on, 3 * 40);
  for (size_t i = 0; i < off.size(); ++i) {
    EXPECT_EQ(on[i].tokens, off[i].tokens) << "sample " << i;
    EXPECT_EQ(on[i].tokens.size(), 12u);
  }
  EXPECT_NE(off[0].tokens, off[1].tokens);
}

// A pool that holds one sequence at a time: the planner admits, grows and preempts by its
// policy (the newest sequence gives up its pages), and every request still finishes with the
// tokens it gets alone.
TEST_F(EngineTest, OneSequencePoolServesEveryRequestInTurn) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(Greedy(Prompt(20, 30 + i), 20));
  auto alone = MakeEngine(1024);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& r : reqs) {
    ASSERT_TRUE(alone->Submit(r).ok());
    auto out = alone->RunToCompletion();
    ASSERT_TRUE(out.ok());
    expected.push_back((*out)[0].tokens);
  }
  auto tight = MakeEngine(10);  // 40 slots: one sequence of 20 + 20 tokens
  for (const auto& r : reqs) ASSERT_TRUE(tight->Submit(r).ok());
  auto got = tight->RunToCompletion();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ((*got)[i].tokens, expected[i]) << i;
  EXPECT_EQ(tight->free_pages(), tight->total_pages());
  EXPECT_TRUE(tight->Idle());
}

// Teacher forcing: a generated continuation fed back as prompt and scored (logprob_start) gets the
// logprobs and top alternatives its generation reported, across prefill chunks and beside another
// sequence that samples in the same steps.
TEST_F(EngineTest, PromptScoringGivesTheLogprobsOfGeneration) {
  const std::vector<int32_t> prompt = Prompt(30, 7);
  GenerationRequest gen = Greedy(prompt, 12);
  gen.params.logprobs = 3;
  auto e = MakeEngine(512);
  ASSERT_TRUE(e->Submit(gen).ok());
  auto generated = e->RunToCompletion();
  ASSERT_TRUE(generated.ok()) << generated.status().ToString();
  const GenerationResult& g = (*generated)[0];
  ASSERT_EQ(g.tokens.size(), 12u);

  std::vector<int32_t> forced = prompt;
  forced.insert(forced.end(), g.tokens.begin(), g.tokens.end());  // 42 tokens: two chunks of 32
  GenerationRequest score = Greedy(forced, 1);
  score.params.logprobs = 3;
  score.logprob_start = static_cast<int32_t>(prompt.size());
  ASSERT_TRUE(e->Submit(Greedy(Prompt(9, 3), 20)).ok());  // samples while the other is scored
  ASSERT_TRUE(e->Submit(score).ok());
  auto scored = e->RunToCompletion();
  ASSERT_TRUE(scored.ok()) << scored.status().ToString();
  const GenerationResult& s = (*scored)[1];
  EXPECT_TRUE((*scored)[0].prompt_logprobs.empty());
  ASSERT_EQ(s.prompt_logprobs.size(), 12u);
  ASSERT_EQ(s.prompt_top.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(s.prompt_logprobs[i], g.logprobs[i], 1e-4) << "token " << i;
    ASSERT_EQ(s.prompt_top[i].size(), 3u);
    EXPECT_EQ(s.prompt_top[i][0].id, g.tokens[i]) << "token " << i;  // greedy: the best
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(s.prompt_top[i][k].id, g.top[i][k].id) << "token " << i << " alt " << k;
    }
  }
  EXPECT_EQ(e->free_pages(), e->total_pages());
}

TEST_F(EngineTest, InvalidRequestsNameTheField) {
  auto e = MakeEngine(64);
  GenerationRequest empty = Greedy({}, 4);
  auto s = e->Submit(empty);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("prompt"), std::string::npos);

  GenerationRequest bad_id = Greedy({1, 512}, 4);
  s = e->Submit(bad_id);
  EXPECT_NE(s.status().message().find("prompt[1]"), std::string::npos) << s.status().message();

  GenerationRequest too_long = Greedy({1, 2, 3}, 100000);
  s = e->Submit(too_long);
  EXPECT_NE(s.status().message().find("max_tokens"), std::string::npos) << s.status().message();

  GenerationRequest bad_start = Greedy({1, 2, 3}, 4);
  bad_start.logprob_start = 4;
  s = e->Submit(bad_start);
  EXPECT_NE(s.status().message().find("logprob_start"), std::string::npos) << s.status().message();

  GenerationRequest bad_top_p = Greedy({1, 2, 3}, 4);
  bad_top_p.params.top_p = 0;
  s = e->Submit(bad_top_p);
  EXPECT_NE(s.status().message().find("top_p"), std::string::npos) << s.status().message();
  EXPECT_TRUE(e->Idle());
}

}  // namespace
}  // namespace astr
