#include "scheduler/fair_share.h"

#include <gtest/gtest.h>

namespace astr::sched {
namespace {

TEST(FairShareTest, CountsWeightedTokensPerClient) {
  FairShare f;
  const int32_t a = f.Join("peer a");
  const int32_t b = f.Join("peer b");
  EXPECT_NE(a, b);
  EXPECT_EQ(f.Join("peer a"), a);  // a second request of the same client
  f.Charge(a, 10, 3);
  EXPECT_EQ(f.Counter(a), 10 * FairShare::kInputWeight + 3 * FairShare::kOutputWeight);
  EXPECT_EQ(f.Counter(b), 0);
  EXPECT_EQ(f.active_clients(), 2);
}

TEST(FairShareTest, ReturningClientIsLiftedToTheActiveMinimum) {
  FairShare f;
  const int32_t a = f.Join("a");
  const int32_t b = f.Join("b");
  f.Charge(a, 100, 0);
  f.Charge(b, 40, 0);
  // c arrives while a (100) and b (40) are active: it starts at 40, not 0, so it cannot claim
  // the service it did not ask for.
  const int32_t c = f.Join("c");
  EXPECT_EQ(f.Counter(c), 40);
  // b leaves and comes back later: its old credit is gone, it starts at the minimum then.
  f.Leave(b);
  f.Charge(c, 80, 0);  // c: 120
  const int32_t b2 = f.Join("b");
  EXPECT_EQ(f.Counter(b2), 100);
  EXPECT_EQ(f.active_clients(), 3);
}

TEST(FairShareTest, ClientsAreForgottenWhenTheirLastRequestCloses) {
  FairShare f;
  const int32_t a = f.Join("a");
  f.Join("a");
  f.Leave(a);
  EXPECT_EQ(f.active_clients(), 1);
  f.Leave(a);
  EXPECT_EQ(f.active_clients(), 0);
  EXPECT_EQ(f.Counter(a), 0);
  // Leaving twice, or an unknown id, changes nothing.
  f.Leave(a);
  f.Leave(-1);
  f.Charge(-1, 5, 5);
  EXPECT_EQ(f.active_clients(), 0);
  // The first client after an idle spell starts at 0.
  EXPECT_EQ(f.Counter(f.Join("z")), 0);
}

}  // namespace
}  // namespace astr::sched
