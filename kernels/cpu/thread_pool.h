// A fixed set of worker threads for the kernels' parallel regions.
//
// A decode step runs ~100-200 short parallel regions (one per GEMM), so waking the workers must
// cost well under a microsecond: idle workers spin on a generation counter (with _mm_pause) for a
// while after each region and only then sleep on a futex. Threads are not pinned.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace astr::cpu {

class ThreadPool {
 public:
  // num_threads counts the calling thread: ThreadPool(2) starts one worker. Values < 1 mean 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // wakes and joins the workers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Runs fn(thread, num_threads) on every thread, the caller being thread 0, and returns when all
  // have finished. One caller at a time; fn must not call Run on the same pool.
  void Run(const std::function<void(int thread, int num_threads)>& fn);

 private:
  void WorkerLoop(int thread);

  const int num_threads_;
  std::vector<std::thread> workers_;
  // Bumped once per region (and once at shutdown); workers wait for it to change.
  alignas(64) std::atomic<uint32_t> generation_{0};
  // Workers currently asleep on generation_ (so Run only issues a futex wake when someone sleeps).
  alignas(64) std::atomic<int> sleepers_{0};
  // Workers that have finished the current region.
  alignas(64) std::atomic<int> done_{0};
  const std::function<void(int, int)>* fn_ = nullptr;  // valid while a region runs
  bool stop_ = false;                                  // written before the final generation bump
};

// Calls fn(begin, end) over [0, n) split into at most pool->size() contiguous ranges of at least
// `grain` items. The split depends only on n, grain and the pool size (static, deterministic). A
// null pool, or n <= grain, runs fn(0, n) inline.
void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace astr::cpu
