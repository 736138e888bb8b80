// scheduler/worker_pool: who may join (the compatibility rule, duplicates, a worker shutting down,
// exclusion after a deliberate drain), removal (the member leaves, its connection closes, its
// index is reused by the next joiner), the pool-wide limits, and the per-worker metrics children.
#include "scheduler/worker_pool.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/scheduler/fake_worker.h"

namespace astr::sched {
namespace {

using testing::FakeConnection;
using testing::FakeWorker;
using testing::FakeWorkerConfig;

class WorkerPoolTest : public ::testing::Test {
 protected:
  std::unique_ptr<WorkerConnection> Connect(const std::string& address, int64_t pages,
                                            int32_t context = 4096,
                                            const std::string& hash = "fake-model",
                                            bool draining = false) {
    FakeWorkerConfig c;
    c.address = address;
    c.num_pages = pages;
    c.page_size = 4;
    c.max_context_tokens = context;
    c.content_hash = hash;
    auto worker = std::make_shared<FakeWorker>(c);
    worker->set_draining(draining);
    workers_.push_back(worker);
    return std::make_unique<FakeConnection>(worker);
  }
  PoolIdentity Pool() const { return {"fake-model", "/models/fake.gguf", 0}; }

  SchedulerOptions options_;
  StepCapacity capacity_{options_};
  std::vector<std::shared_ptr<FakeWorker>> workers_;
};

TEST_F(WorkerPoolTest, JoinAppliesTheOneRuleAndRefusesDuplicatesAndLeavers) {
  WorkerPool pool(options_, capacity_);
  pool.AddInitial(Connect("a:1", 64));
  pool.RecomputeLimits();

  auto other_model = pool.Join(Connect("b:1", 64, 4096, "another-model"), Pool());
  EXPECT_EQ(other_model.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other_model.status().message().find("another-model"), std::string::npos)
      << other_model.status().message();

  auto duplicate = pool.Join(Connect("a:1", 64), Pool());
  EXPECT_EQ(duplicate.status().code(), StatusCode::kAlreadyExists);

  auto leaving = pool.Join(Connect("c:1", 64, 4096, "fake-model", /*draining=*/true), Pool());
  EXPECT_EQ(leaving.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(leaving.status().message().find("shutting down"), std::string::npos);

  pool.Exclude("d:1");
  EXPECT_TRUE(pool.Excluded("d:1"));
  auto excluded = pool.Join(Connect("d:1", 64), Pool());
  EXPECT_EQ(excluded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(excluded.status().message().find("drained on purpose"), std::string::npos);
  pool.Readmit("d:1");
  EXPECT_FALSE(pool.Excluded("d:1"));
  auto readmitted = pool.Join(Connect("d:1", 64), Pool());
  ASSERT_TRUE(readmitted.ok()) << readmitted.status().ToString();
  EXPECT_EQ((*readmitted)->address, "d:1");

  const std::vector<WorkerMember> members = pool.Members();
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].address, "a:1");
  EXPECT_EQ(members[1].address, "d:1");
  EXPECT_EQ(pool.Find("d:1"), *readmitted);
  EXPECT_EQ(pool.Find("b:1"), nullptr);
}

TEST_F(WorkerPoolTest, LimitsFollowTheMembersAndARemovedIndexIsReused) {
  WorkerPool pool(options_, capacity_);
  pool.AddInitial(Connect("a:1", 64, 4096));
  pool.RecomputeLimits();
  EXPECT_EQ(pool.max_pool_tokens(), 64 * 4);
  EXPECT_EQ(pool.max_context_tokens(), 4096);

  auto big = pool.Join(Connect("b:1", 256, 2048), Pool());
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(pool.max_pool_tokens(), 256 * 4);  // the largest pool
  EXPECT_EQ(pool.max_context_tokens(), 2048);  // the smallest context

  pool.Remove(*big);
  EXPECT_EQ((*big)->health, WorkerSlot::Health::kRemoved);
  EXPECT_EQ((*big)->conn, nullptr);  // no reconnector ran: closed at once
  EXPECT_EQ(pool.max_pool_tokens(), 64 * 4);
  EXPECT_EQ(pool.max_context_tokens(), 4096);
  ASSERT_EQ(pool.Members().size(), 1u);
  EXPECT_EQ(pool.slots().size(), 2u);  // the slot stays: sequences name workers by index

  auto again = pool.Join(Connect("c:1", 128), Pool());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(pool.slots().size(), 2u);  // index 1 reused
  EXPECT_EQ(pool.slots()[1].get(), *again);
}

TEST_F(WorkerPoolTest, EveryMemberHasMetricsChildrenUntilItLeaves) {
  WorkerPool pool(options_, capacity_);
  pool.AddInitial(Connect("a:1", 64));
  pool.RecomputeLimits();
  metrics::Registry registry;
  pool.RegisterMetrics(&registry, "fake");
  auto b = pool.Join(Connect("b:1", 32), Pool());
  ASSERT_TRUE(b.ok());
  std::string text = registry.Render();
  EXPECT_NE(text.find("astr:kv_pages_total{model=\"fake\",worker=\"a:1\"} 64"), std::string::npos)
      << text;
  EXPECT_NE(text.find("astr:kv_pages_total{model=\"fake\",worker=\"b:1\"} 32"), std::string::npos)
      << text;
  EXPECT_NE(text.find("astr:num_workers{model=\"fake\"} 2"), std::string::npos) << text;
  pool.Remove(*b);
  text = registry.Render();
  EXPECT_EQ(text.find("worker=\"b:1\""), std::string::npos) << text;
  EXPECT_NE(text.find("astr:num_workers{model=\"fake\"} 1"), std::string::npos) << text;
}

}  // namespace
}  // namespace astr::sched
