#include "scheduler/worker_fit.h"

#include <gtest/gtest.h>

namespace astr::sched {
namespace {

v1::InfoResponse Info(const std::string& hash, int64_t version, int64_t pages, int32_t page_size) {
  v1::InfoResponse info;
  info.set_content_hash(hash);
  info.set_model_path("/m/" + hash);
  info.set_weight_version(version);
  info.set_num_pages(pages);
  info.set_page_size(page_size);
  return info;
}

bool Says(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

TEST(WorkerFitTest, SameModelVersionAndAUsablePoolFit) {
  const v1::InfoResponse first = Info("aa", 3, 64, 16);
  const PoolIdentity pool = PoolOf(first);
  EXPECT_TRUE(CheckWorkerFits("w0", first, pool).ok());
  // Another worker may have another pool size: each worker has its own pages.
  EXPECT_TRUE(CheckWorkerFits("w1", Info("aa", 3, 512, 32), pool).ok());
  // A pool that knows no model yet takes any model at its version.
  EXPECT_TRUE(CheckWorkerFits("w2", Info("bb", 0, 8, 16), PoolIdentity{}).ok());
}

TEST(WorkerFitTest, EachMismatchIsNamed) {
  const PoolIdentity pool = PoolOf(Info("aa", 3, 64, 16));
  const Status model = CheckWorkerFits("w1", Info("bb", 3, 64, 16), pool);
  EXPECT_EQ(model.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Says(model, "worker w1 serves model hash bb (/m/bb)") &&
              Says(model, "the pool serves model hash aa (/m/aa)"))
      << model.message();
  const Status version = CheckWorkerFits("w1", Info("aa", 2, 64, 16), pool);
  EXPECT_TRUE(Says(version, "serves weight version 2, the pool serves version 3"))
      << version.message();
  const Status empty = CheckWorkerFits("w1", Info("aa", 3, 0, 16), pool);
  EXPECT_TRUE(Says(empty, "reports a KV pool of 0 pages of 16 tokens")) << empty.message();
}

TEST(WorkerFitTest, AReconnectMustKeepItsPool) {
  const v1::InfoResponse joined = Info("aa", 3, 64, 16);
  PoolIdentity pool = PoolOf(joined);
  pool.previous = &joined;
  EXPECT_TRUE(CheckWorkerFits("w0", Info("aa", 3, 64, 16), pool).ok());
  const Status smaller = CheckWorkerFits("w0", Info("aa", 3, 32, 16), pool);
  EXPECT_TRUE(Says(smaller, "came back with a KV pool of 32 pages of 16 tokens, not its 64"))
      << smaller.message();
  // Its pages grouped otherwise (window page tables): the planner's sequences hold other lists.
  v1::InfoResponse grouped = Info("aa", 3, 64, 16);
  grouped.set_kv_window_tables(2);
  grouped.set_kv_window_tokens(512);
  const Status regrouped = CheckWorkerFits("w0", grouped, pool);
  EXPECT_TRUE(Says(regrouped, "came back with 2 window page tables of 512 tokens, not its 0 of 0"))
      << regrouped.message();
  // It missed a weight update while it was away.
  pool.weight_version = 4;
  EXPECT_FALSE(CheckWorkerFits("w0", Info("aa", 3, 64, 16), pool).ok());
}

}  // namespace
}  // namespace astr::sched
