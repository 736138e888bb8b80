#include "kernels/cuda/emu/executor.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "common/model/tensor_dtype.h"

namespace astr::emu {

// Defined in runtime.cc: whether [p, p + n) lies inside one device allocation.
bool IsDeviceRange(const void* p, size_t n);

namespace {

namespace ctx = boost::context;

constexpr size_t kPage = 4096;
constexpr size_t kSmemArena = 256 * 1024;  // above every profile's opt-in limit (227 KB)

size_t EnvSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const long long x = std::atoll(v);
  return x > 0 ? static_cast<size_t>(x) : fallback;
}

// ---- Guard pages ------------------------------------------------------------------------------
// Shared memory and every fiber stack sit next to PROT_NONE pages. A touch of one is reported
// (which kernel, what was overrun) before the process dies: a shared-memory overrun in a kernel
// fails the test that ran it, as it would fault on a GPU.

struct Guard {
  uintptr_t begin, end;
  int kind;  // 0: below shared memory, 1: above shared memory, 2: a fiber stack
};
constexpr int kMaxGuards = 1 << 16;
Guard g_guards[kMaxGuards];
std::atomic<int> g_num_guards{0};
struct sigaction g_old_segv;

void AddGuard(void* p, size_t n, int kind) {
  const int i = g_num_guards.fetch_add(1);
  if (i >= kMaxGuards) return;
  g_guards[i] = {reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + n, kind};
}

void OnSegv(int sig, siginfo_t* info, void* uctx) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  const int n = std::min(g_num_guards.load(), kMaxGuards);
  for (int i = 0; i < n; ++i) {
    if (a >= g_guards[i].begin && a < g_guards[i].end) {
      static const char* const kWhat[] = {
          "astr cuda-emu: shared memory access below the block's dynamic shared memory\n",
          "astr cuda-emu: shared memory access past the end of the block's dynamic shared "
          "memory (the launch's size)\n",
          "astr cuda-emu: a fiber's stack overflowed (raise ASTR_CUDA_EMU_STACK_KB)\n"};
      const char* what = kWhat[g_guards[i].kind];
      ssize_t ignored = write(2, what, std::strlen(what));
      (void)ignored;
      if (tls_block != nullptr) {
        // Not async-signal-safe in general, but the process is about to die anyway.
        const uint3& b = BlockIdx();
        std::fprintf(stderr, "astr cuda-emu: in block (%u,%u,%u)%s\n", b.x, b.y, b.z,
                     tls_lane != nullptr ? "" : " (scheduler)");
      }
      break;
    }
  }
  sigaction(SIGSEGV, &g_old_segv, nullptr);  // the default action (or the previous handler)
  (void)sig;
  (void)uctx;
}

void InstallSegvHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSegv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
  });
}

void* MapWithGuards(size_t bytes, int below_kind, int above_kind) {
  const size_t total = bytes + 2 * kPage;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "astr cuda-emu: mmap of %zu bytes failed\n", total);
    std::abort();
  }
  char* c = static_cast<char*>(p);
  mprotect(c, kPage, PROT_NONE);
  mprotect(c + kPage + bytes, kPage, PROT_NONE);
  if (below_kind >= 0) AddGuard(c, kPage, below_kind);
  if (above_kind >= 0) AddGuard(c + kPage + bytes, kPage, above_kind);
  return c + kPage;
}

// ---- Lanes, warps, blocks -------------------------------------------------------------------

enum class State : uint8_t { kRunnable, kWaitBlock, kWaitWarp, kDone };
enum Kind : int { kNone = 0, kShfl, kLdMatrix, kLdMatrixTrans, kMma, kSyncWarp };
const char* KindName(int k) {
  switch (k) {
    case kShfl:
      return "__shfl_xor_sync";
    case kLdMatrix:
      return "ldmatrix.x4";
    case kLdMatrixTrans:
      return "ldmatrix.x4.trans";
    case kMma:
      return "mma.sync.m16n8k16";
    case kSyncWarp:
      return "__syncwarp";
  }
  return "?";
}

struct LaneAbort {};

// ASTR_CUDA_EMU_STATS=1: counts printed at exit (blocks run, fiber resumes, rendezvous).
std::atomic<int64_t> g_blocks{0}, g_resumes{0}, g_rendezvous{0};
struct StatsPrinter {
  ~StatsPrinter() {
    if (std::getenv("ASTR_CUDA_EMU_STATS") == nullptr) return;
    std::fprintf(stderr, "astr cuda-emu: %lld blocks, %lld fiber resumes, %lld warp rendezvous\n",
                 static_cast<long long>(g_blocks.load()), static_cast<long long>(g_resumes.load()),
                 static_cast<long long>(g_rendezvous.load()));
  }
} g_stats_printer;

struct CpCopy {
  uint32_t dst;
  const void* src;
  int bytes;
  int group;
};

struct Worker;

}  // namespace

struct Lane {
  uint3 idx{};
  int linear = 0, warp = 0, lane = 0;
  State state = State::kRunnable;
  ctx::fiber fiber;
  ctx::fiber sink;
  // Collective operands and results.
  uint32_t in[10] = {};
  uint32_t out[4] = {};
  uint64_t in64 = 0, out64 = 0;
  unsigned last_mask = 0;  // the mask of this lane's last warp collective (diagnostics)
  // cp.async: copies issued and not landed; the open (uncommitted) group is `committed`.
  std::vector<CpCopy> copies;
  int committed = 0;
};

namespace {
struct WarpSlot {
  int kind = kNone;
  unsigned mask = 0;
  int arrived = 0;
  unsigned existing = 0;  // lanes the warp has (a block's last warp may be partial)
};
}  // namespace

struct Block {
  uint3 idx{};
  dim3 dim, grid;
  int n = 0;
  unsigned char* smem = nullptr;
  size_t smem_size = 0;
  std::vector<Lane> lanes;
  std::vector<WarpSlot> warps;
  int bar_arrived = 0;
  int done = 0;
  KernelRun* run = nullptr;
  bool fault = false;
  std::string fault_text;
  cudaError_t fault_code = cudaSuccess;
  Worker* worker = nullptr;
};

__thread Lane* tls_lane = nullptr;
__thread Block* tls_block = nullptr;

namespace {

struct Worker {
  std::vector<ctx::stack_context> free_stacks;
  size_t stack_bytes = 0;
  size_t stacks_made = 0;
  unsigned char* arena_end = nullptr;  // the dynamic shared memory ends here (a guard page after)
  Block block;
};

// Stacks come from the worker's free list (guard page below each), so a block's fibers cost no
// mmap after the first blocks.
struct PooledStack {
  Worker* w;
  ctx::stack_context allocate() {
    if (!w->free_stacks.empty()) {
      ctx::stack_context s = w->free_stacks.back();
      w->free_stacks.pop_back();
      return s;
    }
    void* base = MapWithGuards(w->stack_bytes, 2, -1);
    // Stack tops at page-aligned addresses would all fall into the same cache sets (every fiber's
    // hot frames then evict each other's); offsetting each by a different multiple of 64 bytes
    // spreads them.
    const size_t color = (w->stacks_made++ % 64) * 64;
    ctx::stack_context s;
    s.size = w->stack_bytes - color;
    s.sp = static_cast<char*>(base) + w->stack_bytes - color;
    return s;
  }
  void deallocate(ctx::stack_context& s) noexcept { w->free_stacks.push_back(s); }
};

std::string Describe(const Block& b, const Lane* l) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "kernel %s, block (%u,%u,%u)", b.run->config.name, b.idx.x,
                b.idx.y, b.idx.z);
  std::string s = buf;
  if (l != nullptr) {
    std::snprintf(buf, sizeof(buf), ", thread (%u,%u,%u) (warp %d lane %d)", l->idx.x, l->idx.y,
                  l->idx.z, l->warp, l->lane);
    s += buf;
  }
  return s;
}

void SetFault(Block& b, const std::string& text, cudaError_t code) {
  if (b.fault) return;
  b.fault = true;
  b.fault_text = text;
  b.fault_code = code;
}

[[noreturn]] void Fault(const std::string& what, cudaError_t code = cudaErrorLaunchFailure) {
  Block* b = tls_block;
  Lane* l = tls_lane;
  if (b == nullptr || l == nullptr) {
    std::fprintf(stderr, "astr cuda-emu: %s (outside a kernel)\n", what.c_str());
    std::abort();
  }
  SetFault(*b, Describe(*b, l) + ": " + what, code);
  throw LaneAbort{};
}

void Yield(Lane& l) {
  l.sink = std::move(l.sink).resume();
  if (tls_block->fault) throw LaneAbort{};
}

Lane& Self() {
  if (tls_lane == nullptr) {
    std::fprintf(stderr, "astr cuda-emu: a device function was called outside a kernel\n");
    std::abort();
  }
  return *tls_lane;
}

uint32_t Load32(const Block& b, uint32_t off) {
  uint32_t v;
  std::memcpy(&v, b.smem + off, 4);
  return v;
}
uint16_t Load16(const Block& b, uint32_t off) {
  uint16_t v;
  std::memcpy(&v, b.smem + off, 2);
  return v;
}

// Computes a completed collective's results for every lane in the mask.
void Resolve(Block& b, int warp, const WarpSlot& slot) {
  Lane* lanes = &b.lanes[static_cast<size_t>(warp) * 32];
  const int count = std::min(32, b.n - warp * 32);
  switch (slot.kind) {
    case kShfl:
      for (int l = 0; l < count; ++l) {
        if (!(slot.mask >> l & 1)) continue;
        const int width = static_cast<int>(lanes[l].in[1]);
        const int src = l ^ static_cast<int>(lanes[l].in[0]);
        const int seg = l & ~(width - 1);
        if (src < seg || src >= seg + width || src >= count) {
          lanes[l].out64 = lanes[l].in64;  // out of the segment: the lane's own value
        } else if (!(slot.mask >> src & 1)) {
          tls_lane = &lanes[l];
          Fault("__shfl_xor_sync reads lane " + std::to_string(src) + ", which is not in the mask");
        } else {
          lanes[l].out64 = lanes[src].in64;
        }
      }
      break;
    case kLdMatrix:
    case kLdMatrixTrans: {
      const bool trans = slot.kind == kLdMatrixTrans;
      for (int l = 0; l < 32; ++l) {
        for (int i = 0; i < 4; ++i) {
          if (!trans) {
            lanes[l].out[i] = Load32(b, lanes[8 * i + (l >> 2)].in[0] + 4 * (l & 3));
          } else {
            const int col = l >> 2, r0 = 2 * (l & 3);
            const uint32_t lo = Load16(b, lanes[8 * i + r0].in[0] + 2 * col);
            const uint32_t hi = Load16(b, lanes[8 * i + r0 + 1].in[0] + 2 * col);
            lanes[l].out[i] = lo | (hi << 16);
          }
        }
      }
      break;
    }
    case kMma: {
      // The PTX ISA's fragment layouts (g = lane / 4, t = lane % 4).
      float A[16][16], B[16][8], C[16][8];
      auto lo = [](uint32_t w) { return model::Bf16ToF32(static_cast<uint16_t>(w & 0xFFFF)); };
      auto hi = [](uint32_t w) { return model::Bf16ToF32(static_cast<uint16_t>(w >> 16)); };
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        const uint32_t* in = lanes[l].in;
        A[g][2 * t] = lo(in[0]), A[g][2 * t + 1] = hi(in[0]);
        A[g + 8][2 * t] = lo(in[1]), A[g + 8][2 * t + 1] = hi(in[1]);
        A[g][2 * t + 8] = lo(in[2]), A[g][2 * t + 9] = hi(in[2]);
        A[g + 8][2 * t + 8] = lo(in[3]), A[g + 8][2 * t + 9] = hi(in[3]);
        B[2 * t][g] = lo(in[4]), B[2 * t + 1][g] = hi(in[4]);
        B[2 * t + 8][g] = lo(in[5]), B[2 * t + 9][g] = hi(in[5]);
        float c[4];
        std::memcpy(c, in + 6, sizeof(c));
        C[g][2 * t] = c[0], C[g][2 * t + 1] = c[1];
        C[g + 8][2 * t] = c[2], C[g + 8][2 * t + 1] = c[3];
      }
      // Products of bf16 are exact in f32; the sum of the 16 products and the accumulator is
      // rounded once (a tensor core's internal order and precision are not specified).
      float D[16][8];
      for (int m = 0; m < 16; ++m) {
        for (int n = 0; n < 8; ++n) {
          double acc = 0.0;
          for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[m][k] * B[k][n]);
          D[m][n] = static_cast<float>(acc + static_cast<double>(C[m][n]));
        }
      }
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        const float d[4] = {D[g][2 * t], D[g][2 * t + 1], D[g + 8][2 * t], D[g + 8][2 * t + 1]};
        std::memcpy(lanes[l].out, d, sizeof(d));
      }
      break;
    }
    case kSyncWarp:
      break;
  }
}

// The rendezvous of the lanes in `mask` at one collective. Returns in every lane once all of them
// have arrived (their results in Lane::out / out64).
void Rendezvous(int kind, unsigned mask) {
  Lane& l = Self();
  Block& b = *tls_block;
  WarpSlot& w = b.warps[l.warp];
  char buf[160];
  if (!(mask >> l.lane & 1)) {
    std::snprintf(buf, sizeof(buf), "%s with mask 0x%08x, which does not name the calling lane",
                  KindName(kind), mask);
    Fault(buf);
  }
  if ((mask & ~w.existing) != 0) {
    std::snprintf(buf, sizeof(buf),
                  "%s with mask 0x%08x names lanes the warp does not have (0x%08x)", KindName(kind),
                  mask, w.existing);
    Fault(buf);
  }
  if ((kind == kLdMatrix || kind == kLdMatrixTrans || kind == kMma) && mask != 0xffffffffu) {
    Fault(std::string(KindName(kind)) + " needs all 32 lanes of the warp");
  }
  if (w.arrived == 0) {
    w.kind = kind;
    w.mask = mask;
  } else if (w.kind != kind || w.mask != mask) {
    std::snprintf(buf, sizeof(buf),
                  "warp collective mismatch: this lane calls %s with mask 0x%08x while other "
                  "lanes of its warp wait in %s with mask 0x%08x",
                  KindName(kind), mask, KindName(w.kind), w.mask);
    Fault(buf);
  }
  l.last_mask = mask;
  if (++w.arrived < __builtin_popcount(mask)) {
    l.state = State::kWaitWarp;
    Yield(l);
    return;
  }
  g_rendezvous.fetch_add(1, std::memory_order_relaxed);
  const WarpSlot done = w;
  w.kind = kNone;
  w.arrived = 0;
  Resolve(b, l.warp, done);
  Lane* lanes = &b.lanes[static_cast<size_t>(l.warp) * 32];
  for (int i = 0; i < 32 && l.warp * 32 + i < b.n; ++i) {
    if ((done.mask >> i & 1) && lanes[i].state == State::kWaitWarp) {
      lanes[i].state = State::kRunnable;
    }
  }
}

void Deadlock(Block& b) {
  // Nobody can run: a barrier or a collective waits for lanes that have exited (or that wait
  // elsewhere).
  int at_barrier = 0, exited = 0, at_warp = 0;
  const Lane* first_exited = nullptr;
  const Lane* first_warp = nullptr;
  for (const Lane& l : b.lanes) {
    if (l.state == State::kWaitBlock) ++at_barrier;
    if (l.state == State::kDone) {
      ++exited;
      if (first_exited == nullptr) first_exited = &l;
    }
    if (l.state == State::kWaitWarp) {
      ++at_warp;
      if (first_warp == nullptr) first_warp = &l;
    }
  }
  char buf[400];
  if (at_warp > 0) {
    const WarpSlot& w = b.warps[first_warp->warp];
    // A lane the waiting mask names that finished a collective under another mask: the lanes
    // disagree on the mask.
    const Lane* lanes = &b.lanes[static_cast<size_t>(first_warp->warp) * 32];
    for (int i = 0; i < 32 && first_warp->warp * 32 + i < b.n; ++i) {
      if ((w.mask >> i & 1) && lanes[i].state == State::kDone && lanes[i].last_mask != 0 &&
          lanes[i].last_mask != w.mask) {
        std::snprintf(buf, sizeof(buf),
                      "warp lanes disagree on the mask: lanes wait in %s with mask 0x%08x, lane "
                      "%d used mask 0x%08x and exited",
                      KindName(w.kind), w.mask, i, lanes[i].last_mask);
        SetFault(b, Describe(b, first_warp) + ": " + buf, cudaErrorLaunchFailure);
        return;
      }
    }
    std::snprintf(buf, sizeof(buf),
                  "%s (mask 0x%08x): %d of its %d lanes arrived; the others exited or wait at "
                  "__syncthreads (%d threads at a barrier, %d exited)",
                  KindName(w.kind), w.mask, w.arrived, __builtin_popcount(w.mask), at_barrier,
                  exited);
    SetFault(b, Describe(b, first_warp) + ": " + buf, cudaErrorLaunchFailure);
  } else {
    std::snprintf(buf, sizeof(buf),
                  "barrier error: __syncthreads() reached by %d of the block's %d threads; %d "
                  "exited without reaching it (first: thread (%u,%u,%u))",
                  at_barrier, b.n, exited, first_exited ? first_exited->idx.x : 0,
                  first_exited ? first_exited->idx.y : 0, first_exited ? first_exited->idx.z : 0);
    SetFault(b, Describe(b, nullptr) + ": " + buf, cudaErrorLaunchFailure);
  }
}

// ASTR_CUDA_EMU_ORDER: the order the block's fibers run in between synchronization points,
// "reverse" (default: warps last to first) or "forward". A correct kernel gives the same result in
// both; a missing barrier shows in one of them.
bool ReverseWarps() {
  static const bool reverse = [] {
    const char* v = std::getenv("ASTR_CUDA_EMU_ORDER");
    return v == nullptr || std::string(v) != "forward";
  }();
  return reverse;
}

void RunBlock(Worker& w, KernelRun& run, int64_t linear) {
  Block& b = w.block;
  const LaunchConfig& c = run.config;
  b.run = &run;
  b.grid = c.grid;
  b.dim = c.block;
  b.idx = {static_cast<unsigned>(linear % c.grid.x),
           static_cast<unsigned>((linear / c.grid.x) % c.grid.y),
           static_cast<unsigned>(linear / (static_cast<int64_t>(c.grid.x) * c.grid.y))};
  b.n = static_cast<int>(c.block.x * c.block.y * c.block.z);
  b.smem_size = c.smem;
  b.smem = w.arena_end - (c.smem + 15) / 16 * 16;
  std::memset(b.smem, 0xFF, c.smem);  // poison: NaN as bf16, f32 and f64
  b.bar_arrived = 0;
  b.done = 0;
  b.fault = false;
  b.fault_text.clear();
  if (b.lanes.size() < static_cast<size_t>(b.n)) b.lanes.resize(static_cast<size_t>(b.n));
  const int warps = (b.n + 31) / 32;
  b.warps.assign(static_cast<size_t>(warps), WarpSlot{});
  for (int i = 0; i < warps; ++i) {
    const int count = std::min(32, b.n - 32 * i);
    b.warps[i].existing = count == 32 ? 0xffffffffu : ((1u << count) - 1);
  }
  tls_block = &b;
  for (int i = 0; i < b.n; ++i) {
    Lane& l = b.lanes[i];
    l.idx = {static_cast<unsigned>(i % c.block.x),
             static_cast<unsigned>((i / c.block.x) % c.block.y),
             static_cast<unsigned>(i / (c.block.x * c.block.y))};
    l.linear = i;
    l.warp = i / 32;
    l.lane = i % 32;
    l.state = State::kRunnable;
    l.copies.clear();
    l.committed = 0;
    l.last_mask = 0;
    l.fiber = ctx::fiber(std::allocator_arg, PooledStack{&w}, [&l, &b](ctx::fiber&& sink) {
      l.sink = std::move(sink);
      try {
        b.run->body();
      } catch (const LaneAbort&) {
      }
      l.state = State::kDone;
      ++b.done;
      return std::move(l.sink);
    });
  }
  g_blocks.fetch_add(1, std::memory_order_relaxed);
  int64_t resumes = 0;
  const bool reverse = ReverseWarps();
  while (b.done < b.n && !b.fault) {
    bool progressed = false;
    for (int j = 0; j < b.n && !b.fault; ++j) {
      // Reverse: the last warp first (lanes in order within a warp), so that a thread reading
      // what a lower-numbered thread writes without a barrier between them reads it too early.
      const int i = reverse ? ((b.n - 1 - j) / 32) * 32 + (j % 32) : j;
      if (i >= b.n) continue;
      Lane& l = b.lanes[i];
      if (l.state != State::kRunnable) continue;
      tls_lane = &l;
      l.fiber = std::move(l.fiber).resume();
      tls_lane = nullptr;
      progressed = true;
      ++resumes;
    }
    if (!progressed && !b.fault && b.done < b.n) Deadlock(b);
  }
  g_resumes.fetch_add(resumes, std::memory_order_relaxed);
  // A fault leaves fibers suspended: unwind them (their stacks go back to the pool).
  for (int i = 0; i < b.n; ++i) {
    Lane& l = b.lanes[i];
    if (l.fiber) {
      tls_lane = &l;
      l.fiber = ctx::fiber();
      tls_lane = nullptr;
    }
  }
  tls_block = nullptr;
  if (b.fault) {
    std::lock_guard<std::mutex> lock(run.fault_mu);
    if (!run.failed.exchange(true)) {
      run.fault = b.fault_text;
      run.fault_code = b.fault_code;
    }
  }
}

// ---- The pool -------------------------------------------------------------------------------

struct Job {
  KernelRun* run = nullptr;
  int64_t completed = 0;
  std::condition_variable done_cv;
};

class Pool {
 public:
  Pool() {
    InstallSegvHandler();
    int n = static_cast<int>(EnvSize("ASTR_CUDA_EMU_THREADS", 0));
    if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    stack_bytes_ = EnvSize("ASTR_CUDA_EMU_STACK_KB", 64) * 1024;
    stack_bytes_ = (stack_bytes_ + kPage - 1) / kPage * kPage;
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()); }

  void Run(KernelRun& run) {
    Job job;
    job.run = &run;
    std::unique_lock<std::mutex> lock(mu_);
    jobs_.push_back(&job);
    cv_.notify_all();
    job.done_cv.wait(lock, [&] { return job.completed == run.num_blocks; });
  }

 private:
  void Loop() {
    Worker w;
    w.stack_bytes = stack_bytes_;
    w.arena_end = static_cast<unsigned char*>(MapWithGuards(kSmemArena, 0, 1)) + kSmemArena;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_
      Job* job = jobs_.front();
      KernelRun& run = *job->run;
      const int64_t blk = run.next_block++;
      if (run.next_block >= run.num_blocks) jobs_.pop_front();
      lock.unlock();
      if (!run.failed.load()) RunBlock(w, run, blk);
      lock.lock();
      if (++job->completed == run.num_blocks) job->done_cv.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> jobs_;
  bool stop_ = false;
  size_t stack_bytes_ = 0;
  std::vector<std::thread> threads_;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: kernels may run until exit
  return *pool;
}

}  // namespace

// ---- Entry points ---------------------------------------------------------------------------

void ExecuteKernel(KernelRun& run) {
  run.num_blocks = static_cast<int64_t>(run.config.grid.x) * run.config.grid.y * run.config.grid.z;
  if (run.num_blocks == 0) return;
  ThePool().Run(run);
}

int PoolThreads() { return ThePool().size(); }

const uint3& ThreadIdx() { return Self().idx; }
const uint3& BlockIdx() { return tls_block->idx; }
const dim3& BlockDim() { return tls_block->dim; }
const dim3& GridDim() { return tls_block->grid; }

void SyncThreads() {
  Lane& l = Self();
  Block& b = *tls_block;
  if (++b.bar_arrived < b.n) {
    l.state = State::kWaitBlock;
    Yield(l);
    return;
  }
  b.bar_arrived = 0;
  for (int i = 0; i < b.n; ++i) {
    if (b.lanes[i].state == State::kWaitBlock) b.lanes[i].state = State::kRunnable;
  }
}

void SyncWarp(unsigned mask) { Rendezvous(kSyncWarp, mask); }

uint64_t ShflXor(unsigned mask, uint64_t bits, int lane_mask, int width) {
  Lane& l = Self();
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    Fault("__shfl_xor_sync width " + std::to_string(width) + " is not a power of two <= 32");
  }
  l.in64 = bits;
  l.in[0] = static_cast<uint32_t>(lane_mask);
  l.in[1] = static_cast<uint32_t>(width);
  Rendezvous(kShfl, mask);
  return l.out64;
}

void LdMatrixX4(uint32_t (&r)[4], uint32_t addr, bool trans) {
  Lane& l = Self();
  const Block& b = *tls_block;
  if (addr % 16 != 0 || static_cast<size_t>(addr) + 16 > b.smem_size) {
    Fault(std::string(trans ? "ldmatrix.x4.trans" : "ldmatrix.x4") + ": row address " +
              std::to_string(addr) + " is not a 16-byte row inside the " +
              std::to_string(b.smem_size) + " bytes of dynamic shared memory",
          cudaErrorIllegalAddress);
  }
  l.in[0] = addr;
  Rendezvous(trans ? kLdMatrixTrans : kLdMatrix, 0xffffffffu);
  for (int i = 0; i < 4; ++i) r[i] = l.out[i];
}

void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Lane& l = Self();
  for (int i = 0; i < 4; ++i) l.in[i] = a[i];
  l.in[4] = b0;
  l.in[5] = b1;
  std::memcpy(l.in + 6, d, sizeof(d));
  Rendezvous(kMma, 0xffffffffu);
  std::memcpy(d, l.out, sizeof(d));
}

unsigned char* DynamicShared() { return tls_block->smem; }

uint32_t SharedOffset(const void* p) {
  const Block& b = *tls_block;
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < b.smem || c > b.smem + b.smem_size) {
    Self();
    Fault("a shared-memory address outside the block's dynamic shared memory",
          cudaErrorIllegalAddress);
  }
  return static_cast<uint32_t>(c - b.smem);
}

void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  Lane& l = Self();
  const Block& b = *tls_block;
  if (dst % 16 != 0 || static_cast<size_t>(dst) + 16 > b.smem_size) {
    Fault("cp.async writes 16 bytes at shared offset " + std::to_string(dst) + ", past the " +
              std::to_string(b.smem_size) + " bytes of dynamic shared memory",
          cudaErrorIllegalAddress);
  }
  if (src_bytes < 0 || src_bytes > 16) Fault("cp.async src-size " + std::to_string(src_bytes));
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) {
    Fault("cp.async from a global address that is not 16-byte aligned", cudaErrorMisalignedAddress);
  }
  if (src_bytes > 0 && !IsDeviceRange(src, static_cast<size_t>(src_bytes))) {
    Fault("cp.async reads global memory outside every device allocation", cudaErrorIllegalAddress);
  }
  l.copies.push_back({dst, src, src_bytes, l.committed});
}

void CpAsyncCommit() { ++Self().committed; }

void CpAsyncWait(int pending) {
  Lane& l = Self();
  Block& b = *tls_block;
  const int landed_below = l.committed - pending;  // groups < this must have landed
  size_t keep = 0;
  for (size_t i = 0; i < l.copies.size(); ++i) {
    const CpCopy& c = l.copies[i];
    if (c.group < landed_below) {
      if (c.bytes > 0) std::memcpy(b.smem + c.dst, c.src, static_cast<size_t>(c.bytes));
      if (c.bytes < 16) std::memset(b.smem + c.dst + c.bytes, 0, static_cast<size_t>(16 - c.bytes));
    } else {
      l.copies[keep++] = c;
    }
  }
  l.copies.resize(keep);
}

void KernelFault(const std::string& what) { Fault(what); }

}  // namespace astr::emu
