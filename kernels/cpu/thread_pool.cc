#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace astr::cpu {
namespace {

// ~50-100 us of spinning (pause is ~40-140 cycles): covers the gap between the GEMMs of one decode
// step, so workers rarely pay a futex wake (~5-10 us) mid-step, yet an idle server sleeps soon.
constexpr int kSpinIterations = 2000;

void FutexWait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  workers_.reserve(num_threads_ - 1);
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&generation_);
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  fn_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  // seq_cst bump then seq_cst sleepers_ load pairs with the worker's sleepers_ increment followed
  // by its re-check of generation_: either we see the sleeper and wake it, or it sees the new
  // generation.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&generation_);
  fn(0, num_threads_);
  const int workers = num_threads_ - 1;
  // Spin briefly, then yield: with more runnable threads than cores (other processes, a busy host)
  // a preempted worker can only finish if this thread gives up its core.
  for (int i = 0; done_.load(std::memory_order_acquire) != workers; ++i) {
    if (i < kSpinIterations) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int thread) {
  // The generation at construction (0), not a fresh load: Run or the destructor may already have
  // bumped it before this thread got scheduled, and that region must not be missed.
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      _mm_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      gen = generation_.load(std::memory_order_seq_cst);
      if (gen == seen) FutexWait(&generation_, seen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_) return;
    (*fn_)(thread, num_threads_);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t chunks = pool == nullptr ? 1 : std::min<int64_t>(pool->size(), max_chunks);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  pool->Run([&](int thread, int) {
    if (thread >= chunks) return;
    const int64_t begin = n * thread / chunks, end = n * (thread + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace astr::cpu
