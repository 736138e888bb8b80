// The fronts' task pool: every posted task runs, on the pool's threads, and a task that throws (a
// bug the fronts' own guards missed) does not end the process or stop the pool.
#include "scheduler/front/task_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

namespace astr::front {
namespace {

TEST(TaskPool, RunsEveryTaskBeforeItIsDestroyed) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(2);
    EXPECT_EQ(pool.threads(), 2);
    for (int i = 0; i < 1000; ++i) pool.Post([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(TaskPool, ATaskThatThrowsDoesNotStopThePool) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(1);  // one thread: the tasks after the throw run on the thread that saw it
    pool.Post([] { throw std::runtime_error("planted"); });
    for (int i = 0; i < 10; ++i) pool.Post([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace astr::front
