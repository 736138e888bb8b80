// The scheduler's policies alone: the step cost model's fit and token budget, and cache-aware
// routing.
#include "scheduler/policies.h"

#include <gtest/gtest.h>

#include <vector>

#include "scheduler/batch_planner.h"

namespace astr::sched {
namespace {

constexpr int64_t kMs = 1000000;  // ns

// Steps that cost 10 ms + 2 ms per token, at varied token counts: the fit finds both terms.
TEST(StepCostModelTest, FitsFixedAndPerTokenCostFromStepTimings) {
  StepCostModel m;
  EXPECT_FALSE(m.calibrated());
  for (int i = 0; i < 40; ++i) {
    const int64_t tokens = 1 + (i * 37) % 300;
    m.Observe(tokens, (10 + 2 * tokens) * kMs);
  }
  ASSERT_TRUE(m.calibrated());
  EXPECT_NEAR(m.fixed_ms(), 10.0, 1e-6);
  EXPECT_NEAR(m.per_token_ms(), 2.0, 1e-9);
  EXPECT_NEAR(m.PredictMs(100), 210.0, 1e-6);
}

// Identical token counts (steady decode) cannot separate the terms: all of it is per token.
TEST(StepCostModelTest, ConstantTokenCountsFallBackToPerTokenOnly) {
  StepCostModel m;
  for (int i = 0; i < 10; ++i) m.Observe(64, 128 * kMs);
  EXPECT_EQ(m.fixed_ms(), 0.0);
  EXPECT_NEAR(m.per_token_ms(), 2.0, 1e-9);
}

TEST(StepCostModelTest, BudgetBoundsStepsWithDecodeRowsOnly) {
  StepCostModel uncalibrated;
  EXPECT_EQ(uncalibrated.Budget(64, 0, 2048), 2048);
  StepCostModel m;  // auto: 3x the decode rows' own step
  for (int i = 0; i < 40; ++i) {
    const int64_t tokens = 1 + (i * 37) % 300;
    m.Observe(tokens, (10 + 2 * tokens) * kMs);
  }
  EXPECT_EQ(m.Budget(0, 0, 2048), 2048);  // no decode row waits on this step
  // 64 rows: t(64) = 138 ms, target 414 ms: (414 - 10) / 2 = 202 tokens.
  EXPECT_EQ(m.Budget(64, 0, 2048), 202);
  // 4 rows: t(4) = 18 ms, target 54 ms -> 22 tokens, below the floor of 4 + 64.
  EXPECT_EQ(m.Budget(4, 0, 2048), 68);
  EXPECT_EQ(m.Budget(64, 0, 100), 100);  // never above max_tokens
  // 128 sequences wait for 64 decoding: the auto target doubles, 828 ms -> 409 tokens.
  EXPECT_EQ(m.Budget(64, 128, 2048), 409);
  EXPECT_EQ(m.Budget(64, 32, 2048), 202);  // fewer waiting than decoding: no change
  StepCostModel fixed(250);  // --max-step-ms 250: (250 - 10) / 2 = 120 tokens
  StepCostModel off(-1);
  for (int i = 0; i < 40; ++i) {
    const int64_t tokens = 1 + (i * 37) % 300;
    fixed.Observe(tokens, (10 + 2 * tokens) * kMs);
    off.Observe(tokens, (10 + 2 * tokens) * kMs);
  }
  EXPECT_EQ(fixed.Budget(32, 100, 2048), 120);  // a fixed target ignores the queue
  EXPECT_EQ(off.Budget(64, 0, 2048), 2048);
}

// The planner holds a step with decode rows to the budget: A decodes, B's 300-token prompt is
// prefilled in budget-sized chunks beside it instead of one 512-token chunk.
TEST(StepCostModelTest, ThePlannerSpreadsPrefillOverBoundedSteps) {
  StepCostModel m(50);  // 50 ms: (50 - 10) / 2 = 20 tokens, floor 1 + 64
  for (int i = 0; i < 40; ++i) {
    const int64_t tokens = 1 + (i * 37) % 300;
    m.Observe(tokens, (10 + 2 * tokens) * kMs);
  }
  WorkerQueues q(256, 16);
  BatchPlanner planner({.max_tokens = 2048, .max_sequences = 8, .prefill_chunk = 512});
  planner.set_cost_model(&m);
  auto make = [](uint64_t key, int prompt) {
    auto r = std::make_unique<RequestState>();
    r->key = key;
    r->req.prompt.assign(prompt, 7);
    r->req.max_tokens = 50;
    r->open_samples = 1;
    auto seq = std::make_unique<Sequence>();
    seq->request = r.get();
    r->samples.push_back(std::move(seq));
    return r;
  };
  auto a = make(1, 8);
  auto b = make(2, 300);
  q.Enqueue(a->samples[0].get());
  PlannedStep plan;
  PlanOutcome out;
  planner.Plan(&q, 1, Clock::now(), &plan, &out);  // A alone: no decode row yet, unbounded
  EXPECT_EQ(out.token_budget, 2048);
  a->samples[0]->in_flight = 0;
  a->samples[0]->generated.push_back(1);
  q.Enqueue(b->samples[0].get());
  planner.Plan(&q, 2, Clock::now(), &plan, &out);
  EXPECT_EQ(out.token_budget, 65);
  ASSERT_EQ(plan.entries().size(), 2u);
  EXPECT_EQ(plan.entries()[0].num_tokens, 1);   // A's decode row first
  EXPECT_EQ(plan.entries()[1].num_tokens, 64);  // B's first chunk: what the budget leaves
  q.running.clear();
}

WorkerLoad Load(int64_t sequences, int64_t cached) {
  return WorkerLoad{.accepting = true,
                    .sequences = sequences,
                    .tokens = sequences * 10,
                    .capacity_tokens = 1 << 20,
                    .cached_tokens = cached};
}

TEST(RouterTest, PrefersTheLongestCachedPrefixWithinTheSlack) {
  const Router router(8);
  // Worker 1 holds 64 cached tokens of the sequence and has 5 more sequences than worker 0.
  std::vector<WorkerLoad> w = {Load(10, 0), Load(15, 64), Load(12, 32)};
  EXPECT_EQ(router.Pick(w, 100), 1);
  w[1].sequences = 19;  // 9 over the least loaded: past the slack; worker 2 (32 cached) is within
  EXPECT_EQ(router.Pick(w, 100), 2);
  w[2].sequences = 19;
  EXPECT_EQ(router.Pick(w, 100), 0);  // both too far behind: the least loaded
  w[1].accepting = false;             // a cached worker that does not accept is never chosen
  w[1].sequences = 10;
  EXPECT_EQ(router.Pick(w, 100), 0);
  const std::vector<WorkerLoad> equal = {Load(3, 16), Load(3, 48)};
  EXPECT_EQ(Router(0).Pick(equal, 100), 1);  // equal loads: the longer cached prefix wins
  const std::vector<WorkerLoad> unequal = {Load(2, 0), Load(3, 48)};
  EXPECT_EQ(Router(0).Pick(unequal, 100), 0);
}

}  // namespace
}  // namespace astr::sched
