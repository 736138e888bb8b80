#include "scheduler/front/task_pool.h"

#include <exception>
#include <utility>

#include "common/base/logging.h"

namespace astr::front {

TaskPool::TaskPool(int threads) {
  if (threads < 1) threads = 1;
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TaskPool::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void TaskPool::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop_ and nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      // The last line of defence: the tasks of the fronts catch their own exceptions and answer
      // their call; one that does not must not take the process down.
      LOG(ERROR) << "a scheduler task threw: " << e.what();
    }
    task = nullptr;  // captured state is released outside the lock
    lock.lock();
  }
}

}  // namespace astr::front
