// The finish rule the scheduler loop and the offline engine share, as a table of (token, counts)
// -> decision. The expectations follow the rule's contract in finish_rule.h: EOS, then a stop id,
// both only past min_tokens, then the length (max_tokens or the context).
#include "common/base/finish_rule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace astr {
namespace {

const std::vector<int32_t> kEos = {2, 7};
const std::vector<int32_t> kStops = {5, 7};  // 7 is both an EOS and a stop id

StopConditions Conditions(int32_t min_tokens, bool ignore_eos) {
  return {.eos_token_ids = kEos,
          .stop_token_ids = kStops,
          .ignore_eos = ignore_eos,
          .min_tokens = min_tokens,
          .max_tokens = 4,
          .max_context_tokens = 10};
}

struct Case {
  std::string name;
  StopConditions conditions;
  int32_t token;
  int64_t num_generated;
  int64_t num_tokens;
  FinishReason reason;
  int32_t stop_token_id;
};

TEST(FinishRuleTest, DecisionTable) {
  using R = FinishReason;
  const std::vector<Case> cases = {
      {"plain token", Conditions(0, false), 9, 1, 4, R::kNone, -1},
      {"eos", Conditions(0, false), 2, 1, 4, R::kEos, -1},
      {"eos ignored", Conditions(0, true), 2, 1, 4, R::kNone, -1},
      {"stop id", Conditions(0, false), 5, 1, 4, R::kStop, 5},
      {"eos and stop id: eos wins", Conditions(0, false), 7, 1, 4, R::kEos, -1},
      {"eos and stop id, eos ignored: stop", Conditions(0, true), 7, 1, 4, R::kStop, 7},
      {"eos within min_tokens", Conditions(2, false), 2, 2, 5, R::kNone, -1},
      {"stop id within min_tokens", Conditions(2, false), 5, 2, 5, R::kNone, -1},
      {"stop id just past min_tokens", Conditions(2, false), 5, 3, 6, R::kStop, 5},
      {"max_tokens reached", Conditions(0, false), 9, 4, 7, R::kLength, -1},
      {"stop id at max_tokens: stop wins", Conditions(0, false), 5, 4, 7, R::kStop, 5},
      {"context full", Conditions(0, false), 9, 2, 10, R::kLength, -1},
      {"within min_tokens at max_tokens", Conditions(4, false), 2, 4, 7, R::kLength, -1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const FinishDecision d = DecideFinish(c.conditions, c.token, c.num_generated, c.num_tokens);
    EXPECT_EQ(d.reason, c.reason) << FinishReasonName(d.reason);
    EXPECT_EQ(d.stop_token_id, c.stop_token_id);
  }
}

TEST(FinishRuleTest, NoContextLimitWhenUnknown) {
  StopConditions c{.max_tokens = 100, .max_context_tokens = 0};
  EXPECT_FALSE(ReachedLength(c, 5, 1'000'000));
  EXPECT_TRUE(ReachedLength(c, 100, 200));
}

TEST(FinishRuleTest, StopTokensAreStopIdsAndEosUnlessIgnored) {
  EXPECT_TRUE(IsStopToken(Conditions(0, false), 2));
  EXPECT_TRUE(IsStopToken(Conditions(0, false), 5));
  EXPECT_FALSE(IsStopToken(Conditions(0, false), 9));
  EXPECT_FALSE(IsStopToken(Conditions(0, true), 2));
  EXPECT_TRUE(IsStopToken(Conditions(0, true), 7));  // still a stop id
}

TEST(FinishRuleTest, ReasonNames) {
  EXPECT_STREQ(FinishReasonName(FinishReason::kNone), "none");
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(FinishReason::kEos), "eos");
  EXPECT_STREQ(FinishReasonName(FinishReason::kAbort), "abort");
}

}  // namespace
}  // namespace astr
