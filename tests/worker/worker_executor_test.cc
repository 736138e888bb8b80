// WorkerExecutor in-process on stories260K: greedy plans reproduce llama.cpp's golden ids,
// chunked prefill, batching and restarts after preemption change nothing, seeded sampling equals
// the offline engine's, every malformed plan is refused naming its field with the state untouched,
// and released sequences give back their pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/model/model_file.h"
#include "tests/support/test_util.h"
#include "worker/backend.h"
#include "worker/engine.h"
#include "worker/service/executor.h"
#include "worker/service/step_runner.h"

namespace astr {
namespace {

// llama.cpp's greedy output for "Once upon a time" (/work/shared/models/README.md).
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};
const std::vector<int32_t> kGolden = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                      338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                      265, 282, 295, 433, 426, 385, 328, 432, 358, 394};
constexpr int64_t kPageSize = 4;
constexpr int64_t kNumPages = 600;  // 2400 slots: one sequence can reach the 2048-token context
constexpr int64_t kMaxBatchTokens = 64;
constexpr int64_t kMaxBatch = 4;
constexpr int64_t kContext = 2048;  // stories260K's context_length

v1::WorkerSamplingParams GreedyParams() {
  v1::WorkerSamplingParams p;
  p.set_temperature(0);
  p.set_top_p(1);
  p.set_repetition_penalty(1);
  return p;
}

// Temperature, truncation and all three penalties: every piece of per-sequence sampling state.
v1::WorkerSamplingParams SeededParams(uint64_t seed) {
  v1::WorkerSamplingParams p;
  p.set_temperature(0.9f);
  p.set_top_k(40);
  p.set_top_p(0.95f);
  p.set_repetition_penalty(1.2f);
  p.set_frequency_penalty(0.3f);
  p.set_presence_penalty(0.2f);
  p.set_seed(seed);
  p.set_ignore_eos(true);
  return p;
}

// The same parameters for the offline engine, written out by hand rather than converted.
SamplingParams SeededEngineParams(uint64_t seed, int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.2f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.2f;
  p.seed = seed;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

// The scheduler's view of one sequence in these tests.
struct TestSeq {
  uint64_t id = 0;
  v1::WorkerSamplingParams params;
  uint64_t sample_index = 0;
  std::vector<int32_t> tokens;  // every known token
  int64_t num_prompt = 0;
  int64_t num_computed = 0;
  std::vector<int32_t> pages;
  int64_t score_from = 0;  // SequenceStart.score_from
  bool started = false;

  TestSeq(uint64_t live_id, std::vector<int32_t> prompt, v1::WorkerSamplingParams p)
      : id(live_id), params(std::move(p)), tokens(std::move(prompt)) {
    num_prompt = static_cast<int64_t>(tokens.size());
  }
  std::vector<int32_t> Generated() const { return {tokens.begin() + num_prompt, tokens.end()}; }
};

// Hands out page ids in order and never reuses one, so released pages keep their K/V.
struct PagePool {
  int32_t next = 0;
  int32_t Take() { return next++; }
};

void AddStart(v1::StepPlan* plan, TestSeq* s) {
  v1::SequenceStart* start = plan->add_start();
  start->set_live_id(s->id);
  *start->mutable_params() = s->params;
  start->set_sample_index(s->sample_index);
  for (int32_t t : s->tokens) start->add_tokens(t);
  start->set_num_prompt_tokens(static_cast<int32_t>(s->num_prompt));
  start->set_num_cached_tokens(static_cast<int32_t>(s->num_computed));
  for (int32_t p : s->pages) start->add_pages(p);
  start->set_score_from(static_cast<int32_t>(s->score_from));
  s->started = true;
}

// Feeds up to `n` pending tokens of `s`, taking the pages they need; samples iff it reaches the
// end.
void AddEntry(v1::StepPlan* plan, TestSeq* s, int64_t n, PagePool* pool) {
  const int64_t pending = static_cast<int64_t>(s->tokens.size()) - s->num_computed;
  n = std::min(n, pending);
  v1::StepEntry* e = plan->add_entries();
  e->set_live_id(s->id);
  e->set_start_position(static_cast<int32_t>(s->num_computed));
  e->set_num_tokens(static_cast<int32_t>(n));
  const int64_t need = (s->num_computed + n + kPageSize - 1) / kPageSize;
  while (static_cast<int64_t>(s->pages.size()) < need) {
    s->pages.push_back(pool->Take());
    e->add_new_pages(s->pages.back());
  }
  s->num_computed += n;
  e->set_sample(s->num_computed == static_cast<int64_t>(s->tokens.size()));
}

void ExpectOk(WorkerExecutor& ex, const v1::StepPlan& plan, v1::StepResult* result) {
  const Status s = ex.Execute(plan, result);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(result->step_id(), plan.step_id());
  EXPECT_EQ(result->error_code(), 0);
}

// Appends each sampled token to its sequence.
void Accept(const v1::StepResult& result, const std::vector<TestSeq*>& seqs) {
  for (const v1::SampledToken& t : result.samples()) {
    for (TestSeq* s : seqs) {
      if (s->id == t.live_id()) s->tokens.push_back(t.token_id());
    }
  }
}

// Runs `seqs` together (each step: every unfinished sequence feeds up to `chunk` tokens) until
// each has `max_new` generated tokens, then releases them.
void RunTogether(WorkerExecutor& ex, const std::vector<TestSeq*>& seqs, int64_t max_new,
                 int64_t chunk, PagePool* pool, uint64_t* step_id) {
  for (;;) {
    v1::StepPlan plan;
    plan.set_step_id((*step_id)++);
    for (TestSeq* s : seqs) {
      if (static_cast<int64_t>(s->Generated().size()) >= max_new) continue;
      if (!s->started) AddStart(&plan, s);
      AddEntry(&plan, s, chunk, pool);
    }
    if (plan.entries().empty()) break;
    v1::StepResult result;
    ExpectOk(ex, plan, &result);
    Accept(result, seqs);
  }
  v1::StepPlan release;
  release.set_step_id((*step_id)++);
  for (TestSeq* s : seqs) release.add_release(s->id);
  v1::StepResult result;
  ExpectOk(ex, release, &result);
}

class WorkerExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
    auto f = model::ModelFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(*f);
  }

  static BackendOptions Options() {
    BackendOptions o;
    o.weight_dtype = "f32";
    o.threads = 2;
    o.page_size = kPageSize;
    o.num_pages = kNumPages;
    o.max_batch_tokens = kMaxBatchTokens;
    o.max_sample_rows = kMaxBatch;
    return o;
  }

  std::unique_ptr<Backend> MakeBackend() {
    auto b = CreateCpuBackend(*file_, Options());
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : nullptr;
  }

  std::unique_ptr<WorkerExecutor> MakeExecutor() {
    return std::make_unique<WorkerExecutor>(MakeBackendRunner(MakeBackend(), "f32"));
  }

  // The offline engine's tokens for `params`: the reference for seeded sampling.
  std::vector<int32_t> EngineTokens(const SamplingParams& params, uint64_t sample_index) {
    Engine engine(MakeBackend(), EngineOptions{});
    GenerationRequest req;
    req.prompt = kPrompt;
    req.params = params;
    req.sample_index = sample_index;
    EXPECT_TRUE(engine.Submit(req).ok());
    auto out = engine.RunToCompletion();
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? (*out)[0].tokens : std::vector<int32_t>{};
  }

  std::unique_ptr<model::ModelFile> file_;
  PagePool pool_;
  uint64_t step_id_ = 1;
};

TEST_F(WorkerExecutorTest, GreedyPlansReproduceLlamaCppGolden) {
  auto ex = MakeExecutor();
  TestSeq s(1, kPrompt, GreedyParams());
  RunTogether(*ex, {&s}, 32, 1 << 20, &pool_, &step_id_);
  EXPECT_EQ(s.Generated(), kGolden);
  EXPECT_EQ(ex->counters().steps, 32 + 1);  // 32 sampling steps and the release
}

// A mask over the 512 ids allowing `ids`, as the scheduler sends it (little-endian words).
std::string MaskAllowing(const std::vector<int32_t>& ids) {
  std::string m(64, '\0');
  for (int32_t t : ids) m[static_cast<size_t>(t / 8)] |= static_cast<char>(1 << (t % 8));
  return m;
}

// StepEntry.allowed_tokens: the draw keeps to the mask; greedy takes the best allowed token (the
// golden's own token while it is allowed, the only allowed one otherwise).
TEST_F(WorkerExecutorTest, AllowedTokensBoundTheDraw) {
  for (const std::vector<int32_t>& allowed :
       {std::vector<int32_t>{7, kGolden[0]}, std::vector<int32_t>{7}, std::vector<int32_t>{511}}) {
    auto ex = MakeExecutor();
    TestSeq s(1, kPrompt, GreedyParams());
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    AddStart(&plan, &s);
    AddEntry(&plan, &s, 1 << 20, &pool_);
    plan.mutable_entries(0)->set_allowed_tokens(MaskAllowing(allowed));
    v1::StepResult result;
    ExpectOk(*ex, plan, &result);
    ASSERT_EQ(result.samples_size(), 1);
    EXPECT_EQ(result.samples(0).token_id(), allowed.size() == 2 ? kGolden[0] : allowed[0]);
  }
}

// StepEntry.mask_follows: the mask comes in the next message, read after the forward pass.
TEST_F(WorkerExecutorTest, MasksThatFollowThePlanBoundTheDraw) {
  // The masks message read_next gives: for step + step_offset, one entry for `live_id` with
  // `mask` (or none: the stream ends).
  struct Case {
    std::string what;
    bool stream_ends = false;
    uint64_t step_offset = 0;
    uint64_t live_id = 1;
    std::string mask;
    StatusCode code = StatusCode::kOk;
    int32_t token = 0;  // when OK
  };
  const std::vector<Case> cases = {
      {.what = "mask allowing 7", .mask = MaskAllowing({7}), .token = 7},
      {.what = "empty mask: every token", .token = kGolden[0]},
      {.what = "stream ended", .stream_ends = true, .code = StatusCode::kUnavailable},
      {.what = "another step's masks", .step_offset = 1, .code = StatusCode::kInternal},
      {.what = "another sequence", .live_id = 2, .code = StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    auto ex = MakeExecutor();
    TestSeq s(1, kPrompt, GreedyParams());
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    AddStart(&plan, &s);
    AddEntry(&plan, &s, 1 << 20, &pool_);
    plan.mutable_entries(0)->set_mask_follows(true);
    v1::StepResult result;
    int reads = 0;
    const Status st = ex->Execute(plan, &result, [&](v1::StepPlan* m) {
      ++reads;
      if (c.stream_ends) return false;
      m->set_masks_for_step(plan.step_id() + c.step_offset);
      v1::StepEntry* e = m->add_entries();
      e->set_live_id(c.live_id);
      e->set_allowed_tokens(c.mask);
      return true;
    });
    EXPECT_EQ(reads, 1) << c.what;
    EXPECT_EQ(st.code(), c.code) << c.what << ": " << st.ToString();
    if (st.ok()) {
      ASSERT_EQ(result.samples_size(), 1) << c.what;
      EXPECT_EQ(result.samples(0).token_id(), c.token) << c.what;
    }
  }
}

TEST_F(WorkerExecutorTest, ChunkedPrefillGivesTheSameIds) {
  auto ex = MakeExecutor();
  TestSeq s(1, kPrompt, GreedyParams());
  RunTogether(*ex, {&s}, 32, 2, &pool_, &step_id_);  // prompt in chunks of 2, 2, 1
  EXPECT_EQ(s.Generated(), kGolden);
}

TEST_F(WorkerExecutorTest, SequencesInOneStepMatchEachAlone) {
  const std::vector<int32_t> other = {1, 403, 407, 261, 378, 432, 383, 286, 261};
  auto ex = MakeExecutor();
  TestSeq a_alone(1, kPrompt, GreedyParams());
  RunTogether(*ex, {&a_alone}, 16, 3, &pool_, &step_id_);
  TestSeq b_alone(2, {1, 298, 315, 421}, GreedyParams());
  RunTogether(*ex, {&b_alone}, 16, 3, &pool_, &step_id_);
  TestSeq c_alone(3, other, SeededParams(7));
  RunTogether(*ex, {&c_alone}, 16, 3, &pool_, &step_id_);

  TestSeq a(11, kPrompt, GreedyParams()), b(12, {1, 298, 315, 421}, GreedyParams());
  TestSeq c(13, other, SeededParams(7));
  RunTogether(*ex, {&a, &b, &c}, 16, 3, &pool_, &step_id_);
  EXPECT_EQ(a.Generated(), a_alone.Generated());
  EXPECT_EQ(b.Generated(), b_alone.Generated());
  EXPECT_EQ(c.Generated(), c_alone.Generated());
  EXPECT_EQ(a.Generated(), std::vector<int32_t>(kGolden.begin(), kGolden.begin() + 16));
}

TEST_F(WorkerExecutorTest, SeededSamplingEqualsTheOfflineEngine) {
  const std::vector<int32_t> expected = EngineTokens(SeededEngineParams(42, 20), 3);
  ASSERT_EQ(expected.size(), 20u);
  auto ex = MakeExecutor();
  TestSeq s(1, kPrompt, SeededParams(42));
  s.sample_index = 3;
  RunTogether(*ex, {&s}, 20, 1 << 20, &pool_, &step_id_);
  EXPECT_EQ(s.Generated(), expected);
}

// A penalty window longer than the context covers the whole context: the same tokens as the
// offline engine's window 0. (The sampler sizes its window buffer by the window: 2^31 - 1 entries
// would be 16 GiB.)
TEST_F(WorkerExecutorTest, PenaltyWindowPastTheContextIsTheWholeContext) {
  const std::vector<int32_t> expected = EngineTokens(SeededEngineParams(42, 20), 0);
  ASSERT_EQ(expected.size(), 20u);
  auto ex = MakeExecutor();
  v1::WorkerSamplingParams params = SeededParams(42);
  params.set_penalty_window(std::numeric_limits<int32_t>::max());
  TestSeq s(1, kPrompt, params);
  RunTogether(*ex, {&s}, 20, 1 << 20, &pool_, &step_id_);
  EXPECT_EQ(s.Generated(), expected);
}

// Preempted after 8 tokens, then restarted with prompt + those 8 tokens under a new live id: the
// RNG counter and the penalty counts continue, so the output equals the uninterrupted one.
TEST_F(WorkerExecutorTest, RestartAfterPreemptionContinuesTheSameSample) {
  const std::vector<int32_t> expected = EngineTokens(SeededEngineParams(9, 20), 1);
  auto ex = MakeExecutor();
  TestSeq first(1, kPrompt, SeededParams(9));
  first.sample_index = 1;
  RunTogether(*ex, {&first}, 8, 1 << 20, &pool_, &step_id_);  // ends with the release
  ASSERT_EQ(first.Generated().size(), 8u);

  TestSeq again(2, first.tokens, SeededParams(9));
  again.sample_index = 1;
  again.num_prompt = static_cast<int64_t>(kPrompt.size());
  RunTogether(*ex, {&again}, 20, 1 << 20, &pool_, &step_id_);
  EXPECT_EQ(again.Generated(), expected);
}

// A restart that keeps its computed pages (num_cached_tokens), released and started again under
// the same id in one plan.
TEST_F(WorkerExecutorTest, RestartWithCachedPagesInTheSamePlan) {
  const std::vector<int32_t> expected = EngineTokens(SeededEngineParams(5, 16), 0);
  auto ex = MakeExecutor();
  TestSeq s(1, kPrompt, SeededParams(5));
  v1::StepResult result;
  while (s.Generated().size() < 8) {
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    if (!s.started) AddStart(&plan, &s);
    AddEntry(&plan, &s, 1 << 20, &pool_);
    ExpectOk(*ex, plan, &result);
    Accept(result, {&s});
  }
  ASSERT_EQ(s.num_computed, 12);  // 13 known tokens; the last sampled one is not fed yet
  v1::StepPlan plan;
  plan.set_step_id(step_id_++);
  plan.add_release(s.id);
  AddStart(&plan, &s);  // num_cached_tokens = 12: three full pages are reused
  EXPECT_EQ(plan.start(0).num_cached_tokens(), 12);
  AddEntry(&plan, &s, 1 << 20, &pool_);
  ExpectOk(*ex, plan, &result);
  Accept(result, {&s});
  RunTogether(*ex, {&s}, 16, 1 << 20, &pool_, &step_id_);
  EXPECT_EQ(s.Generated(), expected);
}

// A second sequence that starts on the first one's full prompt page (a prefix-cache hit).
TEST_F(WorkerExecutorTest, SharedPrefixPageIsCountedOnceAndReused) {
  auto ex = MakeExecutor();
  TestSeq a(1, kPrompt, GreedyParams());
  v1::StepPlan plan;
  plan.set_step_id(step_id_++);
  AddStart(&plan, &a);
  AddEntry(&plan, &a, 1 << 20, &pool_);  // pages 0, 1
  v1::StepResult result;
  ExpectOk(*ex, plan, &result);
  ASSERT_EQ(result.samples_size(), 1);
  EXPECT_EQ(result.samples(0).token_id(), kGolden[0]);
  EXPECT_EQ(ex->counters().pages_in_use, 2);

  TestSeq b(2, kPrompt, GreedyParams());
  b.pages = {a.pages[0]};
  b.num_computed = 4;  // positions 0..3 already sit in page 0
  plan.Clear();
  plan.set_step_id(step_id_++);
  AddStart(&plan, &b);
  AddEntry(&plan, &b, 1 << 20, &pool_);
  ExpectOk(*ex, plan, &result);
  ASSERT_EQ(result.samples_size(), 1);
  EXPECT_EQ(result.samples(0).token_id(), kGolden[0]);
  EXPECT_EQ(ex->counters().live_sequences, 2);
  EXPECT_EQ(ex->counters().pages_in_use, 3);  // page 0 is shared

  plan.Clear();
  plan.set_step_id(step_id_++);
  plan.add_release(a.id);
  ExpectOk(*ex, plan, &result);
  EXPECT_EQ(ex->counters().pages_in_use, 2);  // b still holds page 0
  plan.Clear();
  plan.set_step_id(step_id_++);
  plan.add_release(b.id);
  ExpectOk(*ex, plan, &result);
  EXPECT_EQ(ex->counters().live_sequences, 0);
  EXPECT_EQ(ex->counters().pages_in_use, 0);
}

TEST_F(WorkerExecutorTest, LogprobsMatchTheOfflineEngine) {
  SamplingParams ep = SeededEngineParams(11, 6);
  ep.return_logprob = true;
  ep.logprobs = 3;
  Engine engine(MakeBackend(), EngineOptions{});
  GenerationRequest req;
  req.prompt = kPrompt;
  req.params = ep;
  ASSERT_TRUE(engine.Submit(req).ok());
  auto want = engine.RunToCompletion();
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  const GenerationResult& w = (*want)[0];

  auto ex = MakeExecutor();
  v1::WorkerSamplingParams p = SeededParams(11);
  p.set_return_logprob(true);
  p.set_top_logprobs(3);
  TestSeq s(1, kPrompt, p);
  std::vector<v1::SampledToken> got;
  v1::StepResult result;
  while (s.Generated().size() < 6) {
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    if (!s.started) AddStart(&plan, &s);
    AddEntry(&plan, &s, 1 << 20, &pool_);
    ExpectOk(*ex, plan, &result);
    Accept(result, {&s});
    got.push_back(result.samples(0));
  }
  ASSERT_EQ(w.tokens.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(got[i].token_id(), w.tokens[i]) << i;
    EXPECT_FLOAT_EQ(got[i].logprob(), w.logprobs[i]) << i;
    ASSERT_EQ(got[i].top_size(), 3) << i;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(got[i].top(k).token_id(), w.top[i][k].id) << i << "/" << k;
      EXPECT_FLOAT_EQ(got[i].top(k).logprob(), w.top[i][k].logprob) << i << "/" << k;
    }
  }
}

// --- Prompt scoring ----------------------------------------------------------------------------

// A 12-token prompt: "Once upon a time" and the first 7 tokens llama.cpp continues it with.
std::vector<int32_t> ScoringPrompt() {
  std::vector<int32_t> p = kPrompt;
  p.insert(p.end(), kGolden.begin(), kGolden.begin() + 7);
  return p;
}

// Runs `s` (with s->score_from set) in chunks of `chunk` tokens until it has sampled one token, or
// for `max_steps` steps; returns the prompt scores received, checking each names `s`.
std::vector<v1::PromptTokenScore> RunScoring(WorkerExecutor& ex, TestSeq* s, int64_t chunk,
                                             PagePool* pool, uint64_t* step_id,
                                             int max_steps = 1 << 20) {
  std::vector<v1::PromptTokenScore> got;
  for (int step = 0; step < max_steps && s->Generated().empty(); ++step) {
    v1::StepPlan plan;
    plan.set_step_id((*step_id)++);
    if (!s->started) AddStart(&plan, s);
    AddEntry(&plan, s, chunk, pool);
    v1::StepResult result;
    ExpectOk(ex, plan, &result);
    Accept(result, {s});
    for (const v1::PromptTokenScore& score : result.prompt_scores()) {
      EXPECT_EQ(score.live_id(), s->id);
      got.push_back(score);
    }
  }
  return got;
}

void ReleaseSeq(WorkerExecutor& ex, const TestSeq& s, uint64_t* step_id) {
  v1::StepPlan plan;
  plan.set_step_id((*step_id)++);
  plan.add_release(s.id);
  v1::StepResult result;
  ExpectOk(ex, plan, &result);
}

v1::WorkerSamplingParams RawTop3() {
  v1::WorkerSamplingParams p = GreedyParams();
  p.set_return_logprob(true);
  p.set_top_logprobs(3);
  p.set_logprobs_mode(v1::LOGPROBS_MODE_RAW);
  return p;
}

// Each raw prompt score equals the raw logprob (and top 3) the sampler reports for the same token
// drawn after the same prefix: a sequence whose prompt is the prefix, with a logit bias that
// forces that token (raw logprobs are taken before the bias).
TEST_F(WorkerExecutorTest, RawPromptScoresEqualTheLogprobOfTheSameTokenDrawn) {
  const std::vector<int32_t> prompt = ScoringPrompt();
  auto ex = MakeExecutor();
  TestSeq s(1, prompt, RawTop3());
  s.score_from = 1;
  // Chunks of 3: rows 0-2, 3-5, 6-8 score three tokens each; the last chunk scores rows 9 and 10
  // and samples after row 11 (3 logits rows, within max_batch 4).
  const std::vector<v1::PromptTokenScore> got = RunScoring(*ex, &s, 3, &pool_, &step_id_);
  ASSERT_EQ(got.size(), prompt.size() - 1);
  ASSERT_EQ(s.Generated().size(), 1u);
  EXPECT_EQ(s.Generated()[0], kGolden[7]);  // scoring leaves the draw alone
  ReleaseSeq(*ex, s, &step_id_);
  EXPECT_EQ(ex->counters().live_sequences, 0);

  for (size_t i = 1; i < prompt.size(); ++i) {
    const v1::PromptTokenScore& score = got[i - 1];
    EXPECT_EQ(score.position(), static_cast<int32_t>(i));
    v1::WorkerSamplingParams forced = RawTop3();
    (*forced.mutable_logit_bias())[prompt[i]] = 100.0f;
    TestSeq ref(100 + i, std::vector<int32_t>(prompt.begin(), prompt.begin() + i), forced);
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    AddStart(&plan, &ref);
    AddEntry(&plan, &ref, 1 << 20, &pool_);
    v1::StepResult result;
    ExpectOk(*ex, plan, &result);
    ASSERT_EQ(result.samples_size(), 1);
    const v1::SampledToken& drawn = result.samples(0);
    ASSERT_EQ(drawn.token_id(), prompt[i]) << "the bias must force the prompt token";
    EXPECT_NEAR(score.logprob(), drawn.logprob(), 1e-5) << "position " << i;
    ASSERT_EQ(score.top_size(), 3) << i;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(score.top(k).token_id(), drawn.top(k).token_id()) << i << "/" << k;
      EXPECT_NEAR(score.top(k).logprob(), drawn.top(k).logprob(), 1e-5) << i << "/" << k;
    }
    ReleaseSeq(*ex, ref, &step_id_);
  }
}

// Processed scores (temperature, repetition penalty over the prefix) do not depend on how the
// prefill is chunked or batched, and a restart with score_from past the scores already delivered
// sends each remaining position once, equal to the uninterrupted run's.
TEST_F(WorkerExecutorTest, PromptScoresSurviveChunkingBatchingAndRestarts) {
  const std::vector<int32_t> prompt = ScoringPrompt();
  v1::WorkerSamplingParams p = RawTop3();
  p.set_logprobs_mode(v1::LOGPROBS_MODE_PROCESSED);
  p.set_temperature(0.7f);
  p.set_repetition_penalty(1.3f);
  p.set_top_logprobs(2);
  auto ex = MakeExecutor();

  TestSeq whole(1, prompt, p);
  whole.score_from = 2;
  const std::vector<v1::PromptTokenScore> want = RunScoring(*ex, &whole, 3, &pool_, &step_id_);
  ASSERT_EQ(want.size(), prompt.size() - 2);
  ReleaseSeq(*ex, whole, &step_id_);

  // Chunks of 2 next to a decoding sequence that does not score.
  TestSeq scored(2, prompt, p), other(3, kPrompt, GreedyParams());
  scored.score_from = 2;
  std::vector<v1::PromptTokenScore> batched;
  for (;;) {
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    for (TestSeq* t : {&scored, &other}) {
      if (!t->started) AddStart(&plan, t);
      AddEntry(&plan, t, 2, &pool_);
    }
    v1::StepResult result;
    ExpectOk(*ex, plan, &result);
    Accept(result, {&scored, &other});
    for (const v1::PromptTokenScore& score : result.prompt_scores()) {
      EXPECT_EQ(score.live_id(), scored.id);
      batched.push_back(score);
    }
    if (!scored.Generated().empty()) break;
  }
  ReleaseSeq(*ex, scored, &step_id_);
  ReleaseSeq(*ex, other, &step_id_);
  ASSERT_EQ(batched.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(batched[i].position(), want[i].position());
    EXPECT_NEAR(batched[i].logprob(), want[i].logprob(), 1e-5) << want[i].position();
    ASSERT_EQ(batched[i].top_size(), 2);
    EXPECT_EQ(batched[i].top(0).token_id(), want[i].top(0).token_id());
  }

  // Two chunks of 3 (positions 2..6 scored), then a restart under a new id from score_from 7.
  TestSeq first(4, prompt, p);
  first.score_from = 2;
  const std::vector<v1::PromptTokenScore> part = RunScoring(*ex, &first, 3, &pool_, &step_id_, 2);
  ASSERT_EQ(part.size(), 5u);
  EXPECT_EQ(part.back().position(), 6);
  ReleaseSeq(*ex, first, &step_id_);
  TestSeq again(5, prompt, p);
  again.score_from = 7;
  const std::vector<v1::PromptTokenScore> rest = RunScoring(*ex, &again, 4, &pool_, &step_id_);
  ASSERT_EQ(part.size() + rest.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const v1::PromptTokenScore& got = i < part.size() ? part[i] : rest[i - part.size()];
    EXPECT_EQ(got.position(), want[i].position());
    EXPECT_NEAR(got.logprob(), want[i].logprob(), 1e-5) << want[i].position();
  }
  EXPECT_EQ(again.Generated(), whole.Generated());
}

// --- Refused plans -----------------------------------------------------------------------------

struct BadPlan {
  const char* what;
  std::function<void(v1::StepPlan*)> build;
  std::string expect;  // substring of the error message
};

// A valid start of a new sequence `id` on pages `pages` with its whole prompt fed in one entry.
void ValidStart(v1::StepPlan* plan, uint64_t id, const std::vector<int32_t>& pages) {
  v1::SequenceStart* s = plan->add_start();
  s->set_live_id(id);
  *s->mutable_params() = GreedyParams();
  for (int32_t t : kPrompt) s->add_tokens(t);
  s->set_num_prompt_tokens(static_cast<int32_t>(kPrompt.size()));
  for (int32_t p : pages) s->add_pages(p);
  v1::StepEntry* e = plan->add_entries();
  e->set_live_id(id);
  e->set_start_position(0);
  e->set_num_tokens(static_cast<int32_t>(kPrompt.size()));
  e->set_sample(true);
}

// The decode entry that is valid for sequence 1 after its first step (5 computed, 6 known, pages
// 0 and 1 hold 8 slots).
v1::StepEntry* Decode1(v1::StepPlan* plan) {
  v1::StepEntry* e = plan->add_entries();
  e->set_live_id(1);
  e->set_start_position(5);
  e->set_num_tokens(1);
  e->set_sample(true);
  return e;
}

std::vector<BadPlan> BadPlans() {
  using P = v1::StepPlan*;
  // A valid new sequence 7 on pages 20 and 21, returned for one change.
  auto start7 = [](P p) {
    ValidStart(p, 7, {20, 21});
    return p->mutable_start(0);
  };
  return {
      {"release unknown", [](P p) { p->add_release(99); }, "release[0]: sequence 99 is not live"},
      {"release twice",
       [](P p) {
         p->add_release(1);
         p->add_release(1);
       },
       "release[1]"},
      {"start live id",
       [](P p) {
         ValidStart(p, 1, {20, 21});
       },
       "start[0].live_id"},
      {"start twice",
       [=](P p) {
         const v1::SequenceStart copy = *start7(p);
         *p->add_start() = copy;
       },
       "start[1].live_id: sequence 7 starts twice"},
      {"no tokens", [=](P p) { start7(p)->clear_tokens(); }, "start[0].tokens"},
      {"token id >= vocab", [=](P p) { start7(p)->set_tokens(2, 512); }, "start[0].tokens[2]"},
      {"negative token id", [=](P p) { start7(p)->set_tokens(0, -1); }, "start[0].tokens[0]"},
      {"prompt length 0", [=](P p) { start7(p)->set_num_prompt_tokens(0); },
       "start[0].num_prompt_tokens"},
      {"prompt longer than tokens", [=](P p) { start7(p)->set_num_prompt_tokens(6); },
       "start[0].num_prompt_tokens"},
      {"all tokens cached", [=](P p) { start7(p)->set_num_cached_tokens(5); },
       "start[0].num_cached_tokens"},
      {"negative cached", [=](P p) { start7(p)->set_num_cached_tokens(-1); },
       "start[0].num_cached_tokens"},
      {"start page out of range",
       [](P p) {
         ValidStart(p, 7, {20, 9999});
       },
       "start[0].pages[1]: page 9999 out of range [0, 600)"},
      {"cached tokens without pages",
       [](P p) {
         ValidStart(p, 7, {});
         p->mutable_start(0)->set_num_cached_tokens(4);
         v1::StepEntry* e = p->mutable_entries(0);
         e->set_start_position(4);
         e->set_num_tokens(1);
         e->add_new_pages(20);
         e->add_new_pages(21);
       },
       "start[0].pages: 0 pages hold 0 tokens"},
      {"top_p 0", [=](P p) { start7(p)->mutable_params()->set_top_p(0); },
       "start[0].params: top_p"},
      {"top_logprobs 21", [=](P p) { start7(p)->mutable_params()->set_top_logprobs(21); },
       "start[0].params: top_logprobs"},
      {"logit bias id", [=](P p) { (*start7(p)->mutable_params()->mutable_logit_bias())[600] = 1; },
       "start[0].params: logit_bias: key = 600"},
      {"unknown logprobs mode",
       [=](P p) {
         start7(p)->mutable_params()->set_logprobs_mode(static_cast<v1::LogprobsMode>(7));
       },
       "start[0].params: logprobs_mode"},
      {"entry of unknown seq", [](P p) { Decode1(p)->set_live_id(42); },
       "entries[0].live_id: sequence 42 is not live"},
      {"entry of released seq",
       [](P p) {
         p->add_release(1);
         Decode1(p);
       },
       "entries[0].live_id"},
      {"same seq twice",
       [](P p) {
         Decode1(p);
         Decode1(p);
       },
       "entries[1].live_id"},
      {"start_position behind", [](P p) { Decode1(p)->set_start_position(4); },
       "entries[0].start_position"},
      {"num_tokens 0", [](P p) { Decode1(p)->set_num_tokens(0); }, "entries[0].num_tokens"},
      {"beyond known tokens", [](P p) { Decode1(p)->set_num_tokens(2); }, "entries[0].num_tokens"},
      {"new page out of range",
       [=](P p) {
         start7(p);
         Decode1(p)->add_new_pages(9999);
       },
       "entries[1].new_pages[0]: page 9999 out of range [0, 600)"},
      {"negative new page", [](P p) { Decode1(p)->add_new_pages(-1); }, "entries[0].new_pages[0]"},
      {"too few pages", [](P p) { ValidStart(p, 7, {20}); }, "entries[0].new_pages"},
      {"sample mid-prompt",
       [=](P p) {
         start7(p);
         p->mutable_entries(0)->set_num_tokens(3);
       },
       "entries[0].sample"},
      {"too many entries",
       [](P p) {
         for (int i = 0; i < kMaxBatch; ++i) ValidStart(p, 10 + i, {20 + 2 * i, 21 + 2 * i});
         Decode1(p);
       },
       "entries: 5 entries exceed max_batch 4"},
      {"mask of the wrong size",
       [](P p) { Decode1(p)->set_allowed_tokens(std::string(60, '\xff')); },
       "entries[0].allowed_tokens: has 60 bytes; a mask over 512 tokens has 64"},
      {"mask allowing nothing", [](P p) { Decode1(p)->set_allowed_tokens(std::string(64, '\0')); },
       "entries[0].allowed_tokens: allows no token"},
      {"mask on an entry that does not sample",
       [=](P p) {
         start7(p);
         p->mutable_entries(0)->set_num_tokens(3);
         p->mutable_entries(0)->set_sample(false);
         p->mutable_entries(0)->set_allowed_tokens(std::string(64, '\xff'));
       },
       "entries[0].allowed_tokens: is set on an entry that does not sample"},
      {"mask_follows with a mask",
       [](P p) {
         v1::StepEntry* e = Decode1(p);
         e->set_allowed_tokens(std::string(64, '\xff'));
         e->set_mask_follows(true);
       },
       "entries[0].mask_follows: is set with allowed_tokens"},
      {"a masks message", [](P p) { p->set_masks_for_step(3); },
       "masks_for_step: a mask message (for step 3) is not a step"},
      {"score_from at the prompt end", [=](P p) { start7(p)->set_score_from(5); },
       "start[0].score_from: 5 out of range [1, 5)"},
      {"negative score_from", [=](P p) { start7(p)->set_score_from(-1); }, "start[0].score_from"},
      {"score_from inside the cached prefix",
       [](P p) {
         ValidStart(p, 7, {20, 21});
         p->mutable_start(0)->set_num_cached_tokens(4);
         p->mutable_start(0)->set_score_from(4);
         p->mutable_entries(0)->set_start_position(4);
         p->mutable_entries(0)->set_num_tokens(1);
       },
       "start[0].score_from: 4 out of range [5, 5)"},
      {"scored rows past max_batch",
       [=](P p) { start7(p)->set_score_from(1); },  // 4 scored rows + the sample row
       "entries: 1 sampling entries and 4 scored prompt rows (start.score_from) need 5 logits "
       "rows, more than max_batch 4"},
      {"too many tokens",
       [](P p) {
         ValidStart(p, 7, {});
         v1::SequenceStart* s = p->mutable_start(0);
         s->clear_tokens();
         for (int i = 0; i < kMaxBatchTokens + 1; ++i) s->add_tokens(1);
         s->set_num_prompt_tokens(kMaxBatchTokens + 1);
         p->mutable_entries(0)->set_num_tokens(kMaxBatchTokens + 1);
         for (int i = 0; i < 17; ++i) p->mutable_entries(0)->add_new_pages(100 + i);
       },
       "entries: 65 tokens exceed max_batch_tokens 64"},
      {"prompt beyond context",
       [=](P p) {
         v1::SequenceStart* s = start7(p);
         for (int i = 0; i < kContext; ++i) s->add_tokens(1);
       },
       "start[0].tokens: 2053 tokens exceed the context of 2048"},
  };
}

// return_sampling_mask: each SampledToken of a sequence that asks carries its mask. With top_k 4
// and raw logprobs (no penalties: the top-k order is the raw logits' order) the mask is the 4
// top_logprobs ids, ascending; a sequence that does not ask in the same step gets none. A greedy
// sequence that asks is refused naming the field.
TEST_F(WorkerExecutorTest, SampledTokensCarryTheirSamplingMask) {
  auto ex = MakeExecutor();
  v1::WorkerSamplingParams p;
  p.set_temperature(1.0f);
  p.set_top_k(4);
  p.set_top_p(1.0f);
  p.set_repetition_penalty(1.0f);
  p.set_seed(5);
  p.set_ignore_eos(true);
  p.set_top_logprobs(4);
  p.set_return_logprob(true);
  v1::WorkerSamplingParams asks = p;
  asks.set_return_sampling_mask(true);
  TestSeq masked(1, kPrompt, asks);
  TestSeq plain(2, kPrompt, p);
  for (int step = 0; step < 5; ++step) {
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    for (TestSeq* s : {&masked, &plain}) {
      if (!s->started) AddStart(&plan, s);
      AddEntry(&plan, s, 1 << 20, &pool_);
    }
    v1::StepResult result;
    ExpectOk(*ex, plan, &result);
    Accept(result, {&masked, &plain});
    ASSERT_EQ(result.samples_size(), 2);
    const v1::SampledToken& t = result.samples(0);
    ASSERT_TRUE(t.has_sampling_mask()) << step;
    std::vector<int32_t> top;
    for (const v1::TokenLogprob& alt : t.top()) top.push_back(alt.token_id());
    std::sort(top.begin(), top.end());
    EXPECT_EQ(t.sampling_mask().count(), 4) << step;
    EXPECT_EQ(std::vector<int32_t>(t.sampling_mask().token_ids().begin(),
                                   t.sampling_mask().token_ids().end()),
              top)
        << step;
    EXPECT_TRUE(std::binary_search(top.begin(), top.end(), t.token_id())) << step;
    EXPECT_FALSE(result.samples(1).has_sampling_mask()) << step;
  }

  v1::WorkerSamplingParams greedy = GreedyParams();
  greedy.set_return_sampling_mask(true);
  TestSeq g(3, kPrompt, greedy);
  v1::StepPlan plan;
  plan.set_step_id(step_id_++);
  AddStart(&plan, &g);
  AddEntry(&plan, &g, 1 << 20, &pool_);
  v1::StepResult result;
  const Status st = ex->Execute(plan, &result);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("return_sampling_mask needs temperature"), std::string::npos)
      << st.ToString();
}

TEST_F(WorkerExecutorTest, InvalidPlansAreRefusedAndLeaveTheStateUntouched) {
  auto ex = MakeExecutor();
  TestSeq s(1, kPrompt, GreedyParams());
  v1::StepPlan first;
  first.set_step_id(step_id_++);
  AddStart(&first, &s);
  AddEntry(&first, &s, 1 << 20, &pool_);  // pages 0 and 1
  v1::StepResult result;
  ExpectOk(*ex, first, &result);
  Accept(result, {&s});
  const WorkerExecutor::Counters before = ex->counters();
  ASSERT_EQ(before.live_sequences, 1);
  ASSERT_EQ(before.pages_in_use, 2);

  for (const BadPlan& bad : BadPlans()) {
    v1::StepPlan plan;
    plan.set_step_id(step_id_++);
    bad.build(&plan);
    const Status st = ex->Execute(plan, &result);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad.what << ": " << st.ToString();
    EXPECT_NE(st.message().find(bad.expect), std::string::npos)
        << bad.what << ": expected '" << bad.expect << "' in '" << st.message() << "'";
    const WorkerExecutor::Counters now = ex->counters();
    EXPECT_EQ(now.live_sequences, before.live_sequences) << bad.what;
    EXPECT_EQ(now.pages_in_use, before.pages_in_use) << bad.what;
    EXPECT_EQ(now.steps, before.steps) << bad.what;
  }

  // The sequence continues exactly where it was: its state survived every refused plan.
  RunTogether(*ex, {&s}, 8, 1 << 20, &pool_, &step_id_);
  EXPECT_EQ(s.Generated(), std::vector<int32_t>(kGolden.begin(), kGolden.begin() + 8));
  EXPECT_EQ(ex->counters().live_sequences, 0);
  EXPECT_EQ(ex->counters().pages_in_use, 0);
}

// Positions stop at the model's context: the token sampled at the last position is returned, but
// feeding it would go past the context.
TEST_F(WorkerExecutorTest, EntriesStopAtTheContextEnd) {
  auto ex = MakeExecutor();
  TestSeq s(1, std::vector<int32_t>(kContext, 1), GreedyParams());
  for (int64_t i = 0; i < kContext / kPageSize; ++i) s.pages.push_back(pool_.Take());
  s.num_computed = kContext - 1;  // as if cached: only the last position is computed here
  v1::StepPlan plan;
  plan.set_step_id(step_id_++);
  AddStart(&plan, &s);
  AddEntry(&plan, &s, 1, &pool_);
  v1::StepResult result;
  ExpectOk(*ex, plan, &result);
  ASSERT_EQ(result.samples_size(), 1);
  Accept(result, {&s});

  plan.Clear();
  plan.set_step_id(step_id_++);
  AddEntry(&plan, &s, 1, &pool_);
  const Status st = ex->Execute(plan, &result);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("entries[0].num_tokens: positions [2048, 2049) go past the context"),
            std::string::npos)
      << st.message();
}

TEST_F(WorkerExecutorTest, ResetDropsEverySequence) {
  auto ex = MakeExecutor();
  TestSeq a(1, kPrompt, GreedyParams()), b(2, {1, 298}, GreedyParams());
  v1::StepPlan plan;
  plan.set_step_id(step_id_++);
  AddStart(&plan, &a);
  AddEntry(&plan, &a, 1 << 20, &pool_);
  AddStart(&plan, &b);
  AddEntry(&plan, &b, 1 << 20, &pool_);
  v1::StepResult result;
  ExpectOk(*ex, plan, &result);
  EXPECT_EQ(result.samples_size(), 2);
  EXPECT_EQ(ex->counters().live_sequences, 2);
  EXPECT_EQ(ex->counters().pages_in_use, 3);
  ex->Reset();
  EXPECT_EQ(ex->counters().live_sequences, 0);
  EXPECT_EQ(ex->counters().pages_in_use, 0);
  // The ids are free again.
  TestSeq again(1, kPrompt, GreedyParams());
  RunTogether(*ex, {&again}, 2, 1 << 20, &pool_, &step_id_);
  EXPECT_EQ(again.Generated(), std::vector<int32_t>(kGolden.begin(), kGolden.begin() + 2));
}

// --- The instant runner ------------------------------------------------------------------------

TEST_F(WorkerExecutorTest, InstantRunnerValidatesTheSameAndReturnsOrdinaryTokens) {
  // stories260K: 0 <unk>, 1 <s>, 2 </s>, 3..258 byte tokens, 259..511 ordinary pieces.
  std::vector<int32_t> ordinary;
  for (int32_t id = 259; id < 512; ++id) ordinary.push_back(id);
  auto make = [&] {
    RunnerLimits limits{.num_pages = kNumPages,
                        .page_size = kPageSize,
                        .max_batch_tokens = kMaxBatchTokens,
                        .max_sample_rows = kMaxBatch};
    auto runner = MakeInstantRunner(file_->config(), limits, ordinary);
    EXPECT_TRUE(runner.ok()) << runner.status().ToString();
    return std::make_unique<WorkerExecutor>(std::move(*runner));
  };
  auto ex1 = make();
  auto ex2 = make();
  EXPECT_EQ(ex1->runner().name(), "instant");

  v1::WorkerSamplingParams p = GreedyParams();
  p.add_eos_token_ids(2);
  for (int32_t id = 259; id < 300; ++id) p.add_stop_token_ids(id);
  std::vector<std::vector<int32_t>> runs;
  for (WorkerExecutor* ex : {ex1.get(), ex2.get()}) {
    PagePool pool;
    uint64_t step = 1;
    TestSeq a(1, kPrompt, p), b(2, {1, 2, 3}, p);
    RunTogether(*ex, {&a, &b}, 12, 2, &pool, &step);
    for (int32_t t : a.Generated()) EXPECT_TRUE(t >= 300 && t < 512) << t;
    for (int32_t t : b.Generated()) EXPECT_TRUE(t >= 300 && t < 512) << t;
    EXPECT_NE(a.Generated(), b.Generated());
    runs.push_back(a.Generated());
    EXPECT_EQ(ex->counters().pages_in_use, 0);
  }
  EXPECT_EQ(runs[0], runs[1]);  // deterministic

  v1::StepPlan bad;
  ValidStart(&bad, 7, {20, 9999});
  v1::StepResult result;
  const Status st = ex1->Execute(bad, &result);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("start[0].pages[1]: page 9999 out of range [0, 600)"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace astr

namespace astr {
namespace {

// Window page tables (RunnerLimits::kv_window_tables, window 4, two tables): a start and each
// new page carry their window ids, page-major; the worker lets go of a page's window ids once its
// next query's window has passed it (pages_in_use counts them until then), as the scheduler does;
// a plan without them, or whose window starts after its first query's, is refused naming the
// field.
TEST_F(WorkerExecutorTest, WindowPagesAreValidatedAndLetGoBehindTheWindow) {
  RunnerLimits limits{.num_pages = kNumPages,
                      .page_size = kPageSize,
                      .max_batch_tokens = kMaxBatchTokens,
                      .max_sample_rows = kMaxBatch,
                      .kv_window_tables = 2,
                      .kv_window_tokens = 4};
  std::vector<int32_t> ordinary;
  for (int32_t id = 259; id < 512; ++id) ordinary.push_back(id);
  auto runner = MakeInstantRunner(file_->config(), limits, ordinary);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  WorkerExecutor ex(std::move(*runner));
  v1::StepResult result;
  auto refused = [&](const v1::StepPlan& plan, const std::string& expect) {
    const Status st = ex.Execute(plan, &result);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(expect), std::string::npos) << st.message();
  };
  uint64_t step = 1;
  {
    v1::StepPlan plan;
    plan.set_step_id(step++);
    ValidStart(&plan, 7, {20, 21});  // 5 prompt tokens on pages 20, 21; no window ids
    refused(plan, "start[0].window_pages: 0 page ids, expected 4");
    for (int32_t p : {30, 31, 32, 33}) plan.mutable_start(0)->add_window_pages(p);
    plan.mutable_start(0)->set_window_first_page(1);  // its first query (position 0) reads page 0
    refused(plan, "start[0].window_first_page: 1 out of range [0, 0]");
    plan.mutable_start(0)->set_window_first_page(0);
    plan.mutable_start(0)->set_window_pages(3, 600);
    refused(plan, "start[0].window_pages[3]: page 600 out of range");
    plan.mutable_start(0)->set_window_pages(3, 33);
    ASSERT_TRUE(ex.Execute(plan, &result).ok());
    EXPECT_EQ(ex.counters().pages_in_use, 6);
  }
  auto decode = [&](int32_t position, std::vector<int32_t> new_pages,
                    std::vector<int32_t> new_window) {
    v1::StepPlan plan;
    plan.set_step_id(step++);
    v1::StepEntry* e = plan.add_entries();
    e->set_live_id(7);
    e->set_start_position(position);
    e->set_num_tokens(1);
    e->set_sample(true);
    for (int32_t p : new_pages) e->add_new_pages(p);
    for (int32_t p : new_window) e->add_new_window_pages(p);
    return plan;
  };
  // Positions 5 and 6 read the window from position 2 and 3: page 0 still.
  for (int32_t pos : {5, 6}) {
    ASSERT_TRUE(ex.Execute(decode(pos, {}, {}), &result).ok());
    EXPECT_EQ(ex.counters().pages_in_use, 6) << pos;
  }
  // Its next query (position 7) reads from 4 on: page 0's window ids (30, 31) are let go with
  // the next plan, even one in which the sequence has no entry.
  v1::StepPlan idle;
  idle.set_step_id(step++);
  ASSERT_TRUE(ex.Execute(idle, &result).ok());
  EXPECT_EQ(ex.counters().pages_in_use, 4);
  ASSERT_TRUE(ex.Execute(decode(7, {}, {}), &result).ok());
  EXPECT_EQ(ex.counters().pages_in_use, 4);
  // Position 8 needs page 2 and its window ids.
  refused(decode(8, {22}, {}), "entries[0].new_window_pages: 0 page ids, expected 2");
  ASSERT_TRUE(ex.Execute(decode(8, {22}, {34, 35}), &result).ok());
  EXPECT_EQ(ex.counters().pages_in_use, 7);
  v1::StepPlan end;
  end.set_step_id(step++);
  end.add_release(7);
  ASSERT_TRUE(ex.Execute(end, &result).ok());
  EXPECT_EQ(ex.counters().pages_in_use, 0);
}

}  // namespace
}  // namespace astr
