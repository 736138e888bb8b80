// scheduler/step_plan: the plain plan's wire form (every field of worker.proto's StepPlan that
// the planner sets), and its reuse across steps (nothing of an earlier step leaks into a later
// one; kept buffers are handed out again).
#include "scheduler/step_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "astr/v1/worker.pb.h"

namespace astr::sched {
namespace {

std::vector<int32_t> Ints(const google::protobuf::RepeatedField<int32_t>& r) {
  return {r.begin(), r.end()};
}

TEST(StepPlanTest, ToProtoWritesEveryField) {
  SamplingParams params;
  params.temperature = 0.5f;
  params.seed = 99;
  PlannedStep step;
  step.step_id = 12;
  step.release = {3, 4};
  PlannedStart& s = step.AddStart();
  s.live_id = 7;
  s.params = &params;
  s.sample_index = 2;
  s.tokens = {1, 2, 3, 4};
  s.num_prompt_tokens = 3;
  s.num_cached_tokens = 2;
  s.pages = {5, 6};
  s.score_from = 1;
  PlannedEntry& e = step.AddEntry();
  e.live_id = 7;
  e.start_position = 2;
  e.num_tokens = 2;
  e.new_pages = {6};
  e.sample = true;
  e.allowed_tokens = std::string("\x0f\x00", 2);
  PlannedEntry& late = step.AddEntry();
  late.live_id = 8;
  late.num_tokens = 1;
  late.sample = true;
  late.mask_follows = true;

  v1::StepPlan wire;
  ToProto(step, &wire);
  EXPECT_EQ(wire.step_id(), 12u);
  EXPECT_EQ(std::vector<uint64_t>(wire.release().begin(), wire.release().end()),
            (std::vector<uint64_t>{3, 4}));
  ASSERT_EQ(wire.start_size(), 1);
  const v1::SequenceStart& ws = wire.start(0);
  EXPECT_EQ(ws.live_id(), 7u);
  EXPECT_EQ(ws.params().temperature(), 0.5f);
  EXPECT_EQ(ws.params().seed(), 99u);
  EXPECT_EQ(ws.sample_index(), 2u);
  EXPECT_EQ(Ints(ws.tokens()), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(ws.num_prompt_tokens(), 3);
  EXPECT_EQ(ws.num_cached_tokens(), 2);
  EXPECT_EQ(Ints(ws.pages()), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(ws.score_from(), 1);
  ASSERT_EQ(wire.entries_size(), 2);
  EXPECT_EQ(wire.entries(0).live_id(), 7u);
  EXPECT_EQ(wire.entries(0).start_position(), 2);
  EXPECT_EQ(wire.entries(0).num_tokens(), 2);
  EXPECT_EQ(Ints(wire.entries(0).new_pages()), (std::vector<int32_t>{6}));
  EXPECT_TRUE(wire.entries(0).sample());
  EXPECT_FALSE(wire.entries(0).mask_follows());
  EXPECT_EQ(wire.entries(0).allowed_tokens(), std::string("\x0f\x00", 2));
  EXPECT_TRUE(wire.entries(1).mask_follows());
  EXPECT_TRUE(wire.entries(1).allowed_tokens().empty());
  EXPECT_EQ(wire.masks_for_step(), 0u);
}

TEST(StepPlanTest, AReusedStepCarriesNothingOfTheLastOne) {
  PlannedStep step;
  step.step_id = 1;
  step.release = {9};
  PlannedEntry& first = step.AddEntry();
  first.live_id = 1;
  first.new_pages = {1, 2, 3};
  first.sample = true;
  first.mask_follows = true;
  first.allowed_tokens = "mask";
  const int32_t* kept_pages = first.new_pages.data();  // (`first` is not used past the next Add)
  step.AddEntry().live_id = 2;
  step.AddStart().tokens = {1, 2};

  step.Clear();
  EXPECT_TRUE(step.entries().empty());
  EXPECT_TRUE(step.starts().empty());
  EXPECT_TRUE(step.release.empty());
  step.masks_for_step = 5;
  PlannedEntry& again = step.AddEntry();  // the first element, handed out again
  EXPECT_EQ(again.live_id, 0u);
  EXPECT_TRUE(again.new_pages.empty());
  EXPECT_FALSE(again.sample);
  EXPECT_FALSE(again.mask_follows);
  EXPECT_TRUE(again.allowed_tokens.empty());
  again.new_pages.push_back(4);
  EXPECT_EQ(again.new_pages.data(), kept_pages);  // its buffer was kept: no allocation

  v1::StepPlan wire;
  ToProto(step, &wire);
  EXPECT_EQ(wire.entries_size(), 1);
  EXPECT_EQ(wire.start_size(), 0);
  EXPECT_EQ(wire.masks_for_step(), 5u);
  EXPECT_EQ(wire.release_size(), 0);
}

}  // namespace
}  // namespace astr::sched
