// PlanWeightBuckets as a table: tensor sizes and bucket size in, the expected buckets of
// (tensor, offset, bytes) chunks out, written out by hand.
#include "astr/weight_buckets.h"

#include <gtest/gtest.h>

namespace astr::client {
namespace {

struct Case {
  const char* what;
  std::vector<int64_t> tensor_bytes;
  int64_t bucket_bytes;
  std::vector<WeightBucket> buckets;
};

TEST(WeightBucketsTest, Table) {
  const Case cases[] = {
      {"nothing to send", {}, 10, {}},
      {"one small tensor", {4}, 10, {{{0, 0, 4}}}},
      {"small tensors share a bucket", {3, 4, 3}, 10, {{{0, 0, 3}, {1, 0, 4}, {2, 0, 3}}}},
      {"exact fit, then a new bucket", {10, 1}, 10, {{{0, 0, 10}}, {{1, 0, 1}}}},
      {"a large tensor spans buckets", {25}, 10, {{{0, 0, 10}}, {{0, 10, 10}}, {{0, 20, 5}}}},
      {"a tensor continues in the next bucket",
       {6, 7, 2},
       10,
       {{{0, 0, 6}, {1, 0, 4}}, {{1, 4, 3}, {2, 0, 2}}}},
      {"empty tensors get no chunk", {0, 5, 0}, 10, {{{1, 0, 5}}}},
      {"one-byte buckets", {2, 1}, 1, {{{0, 0, 1}}, {{0, 1, 1}}, {{1, 0, 1}}}},
  };
  for (const Case& c : cases) {
    auto plan = PlanWeightBuckets(c.tensor_bytes, c.bucket_bytes);
    ASSERT_TRUE(plan.ok()) << c.what << ": " << plan.status().ToString();
    EXPECT_EQ(*plan, c.buckets) << c.what;
  }
}

TEST(WeightBucketsTest, RefusesANonPositiveBucketOrANegativeSize) {
  const std::vector<int64_t> sizes = {1};
  EXPECT_EQ(PlanWeightBuckets(sizes, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanWeightBuckets(sizes, -4).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int64_t> negative = {3, -1};
  EXPECT_EQ(PlanWeightBuckets(negative, 8).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace astr::client
