// A few threads that run the front's CPU work off gRPC's callback threads: parsing and validating
// requests, tokenizing, rendering chat templates, and turning scheduler events into responses.
// gRPC's callback threads must never block, and no call holds a thread while it waits: a call
// only occupies a pool thread while there is work for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace astr::front {

class TaskPool {
 public:
  // Starts `threads` (>= 1) threads.
  explicit TaskPool(int threads);
  // Runs every task already posted, then joins the threads.
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Queues `task`; it runs on one of the pool's threads. Thread-safe; never blocks on a task.
  void Post(std::function<void()> task);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace astr::front
