#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace astr::cpu {
namespace {

TEST(ThreadPoolTest, RunsOnEveryThreadOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int rep = 0; rep < 1000; ++rep) {
      std::vector<std::atomic<int>> hits(threads);
      pool.Run([&](int t, int nt) {
        EXPECT_EQ(nt, threads);
        hits[t].fetch_add(1);
      });
      for (int t = 0; t < threads; ++t) ASSERT_EQ(hits[t].load(), 1) << "thread " << t;
    }
  }
}

TEST(ThreadPoolTest, SurvivesSleepAndWake) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  for (int rep = 0; rep < 5; ++rep) {
    pool.Run([&](int t, int) { sum.fetch_add(t + 1); });
    // Long enough for the worker to stop spinning and sleep on the futex.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(sum.load(), 5 * 3);
}

TEST(ThreadPoolTest, ParallelForCoversRangeStaticallyAndDeterministically) {
  ThreadPool pool(2);
  for (int64_t n : {0, 1, 7, 100, 1001}) {
    for (int64_t grain : {1, 16, 2000}) {
      std::vector<int> count(n, 0);
      std::vector<std::pair<int64_t, int64_t>> ranges1, ranges2;
      std::mutex mu;
      auto record = [&](std::vector<std::pair<int64_t, int64_t>>* out) {
        return [&, out](int64_t b, int64_t e) {
          std::lock_guard<std::mutex> lock(mu);
          out->push_back({b, e});
          for (int64_t i = b; i < e; ++i) ++count[i];
        };
      };
      ParallelFor(&pool, n, grain, record(&ranges1));
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(count[i], 1) << "n=" << n << " i=" << i;
      ParallelFor(&pool, n, grain, record(&ranges2));
      std::sort(ranges1.begin(), ranges1.end());
      std::sort(ranges2.begin(), ranges2.end());
      EXPECT_EQ(ranges1, ranges2);
      if (n > 0 && n <= grain) {
        EXPECT_EQ(ranges1.size(), 1u);
      }
    }
  }
  int64_t total = 0;
  ParallelFor(nullptr, 10, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total, 10);
}

TEST(ThreadPoolTest, DestroysCleanlyWhileIdleOrFresh) {
  { ThreadPool fresh(4); }
  {
    ThreadPool used(2);
    used.Run([](int, int) {});
  }
  SUCCEED();
}

}  // namespace
}  // namespace astr::cpu
