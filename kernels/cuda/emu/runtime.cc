// The emulated CUDA runtime: the subset of libcudart that astr uses, answering from a device
// profile (docs/cuda.md, "The emulated device"). Streams execute in order on their own thread and
// start only when the host waits for them (a synchronize, a query, a synchronous copy), so a host
// read of an asynchronous device-to-host copy before the stream is synchronized always sees the
// old bytes, as it can on hardware. Graph capture records every stream-ordered operation by value;
// a launch replays them.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/emu/emu.h"
#include "kernels/cuda/emu/executor.h"
#include "kernels/cuda/emu/ipc_handle.h"
#include "kernels/cuda/emu/profiles.h"

namespace astr::emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
std::atomic<int> g_sticky{cudaSuccess};
std::mutex g_fault_mu;
std::string g_last_fault;

cudaError_t Fail(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// ---- Failure injection ----------------------------------------------------------------------

struct Injection {
  int count = 0;
  cudaError_t error = cudaErrorUnknown;
  int skip = 0;  // calls that still succeed first
};
std::mutex g_inject_mu;
std::map<std::string, Injection>& Injections() {
  static auto* m = [] {
    auto* m = new std::map<std::string, Injection>();
    // ASTR_CUDA_EMU_FAIL=api:count[:code[:skip]],...
    if (const char* env = std::getenv("ASTR_CUDA_EMU_FAIL"); env != nullptr) {
      std::string s = env;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t end = s.find(',', pos);
        if (end == std::string::npos) end = s.size();
        const std::string item = s.substr(pos, end - pos);
        const size_t c1 = item.find(':');
        if (c1 != std::string::npos) {
          const size_t c2 = item.find(':', c1 + 1);
          Injection inj;
          inj.count = std::atoi(item.substr(c1 + 1, c2 - c1 - 1).c_str());
          if (c2 != std::string::npos) {
            inj.error = static_cast<cudaError_t>(std::atoi(item.substr(c2 + 1).c_str()));
            const size_t c3 = item.find(':', c2 + 1);
            if (c3 != std::string::npos) inj.skip = std::atoi(item.substr(c3 + 1).c_str());
          }
          (*m)[item.substr(0, c1)] = inj;
        }
        pos = end + 1;
      }
    }
    return m;
  }();
  return *m;
}
cudaError_t Injected(const char* api) {
  std::lock_guard<std::mutex> lock(g_inject_mu);
  auto& m = Injections();
  auto it = m.find(api);
  if (it == m.end() || it->second.count <= 0) return cudaSuccess;
  if (it->second.skip > 0) {
    --it->second.skip;
    return cudaSuccess;
  }
  --it->second.count;
  return it->second.error;
}

// ---- Memory ---------------------------------------------------------------------------------

struct Memory {
  std::shared_mutex mu;
  std::map<uintptr_t, size_t> device;  // base -> bytes
  std::map<uintptr_t, size_t> pinned;
  // Buffers of other processes opened by cudaIpcOpenMemHandle (also in `device`): the pointer
  // handed out -> its mapping and the mapping's length.
  std::map<uintptr_t, std::pair<void*, size_t>> ipc;
  size_t used = 0;
};
Memory& Mem() {
  static auto* m = new Memory();
  return *m;
}

bool InRange(const std::map<uintptr_t, size_t>& m, const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second && a + n >= a;
}

bool IsPinned(const void* p, size_t n) {
  Memory& m = Mem();
  std::shared_lock<std::shared_mutex> lock(m.mu);
  return InRange(m.pinned, p, n);
}

size_t PoisonLimit() {
  static const size_t limit = [] {
    const char* v = std::getenv("ASTR_CUDA_EMU_POISON_MB");
    return (v != nullptr ? static_cast<size_t>(std::atoll(v)) : size_t{256}) << 20;
  }();
  return limit;
}

// ---- Streams --------------------------------------------------------------------------------

struct GraphImpl {
  std::vector<std::function<void()>> nodes;
};

struct StreamImpl {
  explicit StreamImpl(bool b) : blocking(b) {
    worker = std::thread([this] { Loop(); });
  }
  ~StreamImpl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || (released > done && !ops.empty()); });
      if (ops.empty() || released <= done) return;  // stop
      std::function<void()> op = std::move(ops.front());
      ops.pop_front();
      lock.unlock();
      if (g_sticky.load() == cudaSuccess) op();
      lock.lock();
      ++done;
      done_cv.notify_all();
    }
  }
  // Appends to the queue; returns the op's sequence number.
  uint64_t Push(std::function<void()> op) {
    std::lock_guard<std::mutex> lock(mu);
    ops.push_back(std::move(op));
    return ++enqueued;
  }
  void WaitFor(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mu);
    if (released < seq) {
      released = std::max(released, enqueued);
      cv.notify_all();
    }
    done_cv.wait(lock, [&] { return done >= seq; });
  }
  void Sync() {
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(mu);
      seq = enqueued;
    }
    WaitFor(seq);
  }
  bool Idle() {
    std::lock_guard<std::mutex> lock(mu);
    released = enqueued;
    cv.notify_all();
    return done >= enqueued;
  }

  const bool blocking;
  std::mutex mu;
  std::condition_variable cv, done_cv;
  std::deque<std::function<void()>> ops;
  uint64_t enqueued = 0, released = 0, done = 0;
  bool stop = false;
  std::thread worker;
  // Capture (guarded by g_streams_mu).
  bool capturing = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  std::unique_ptr<GraphImpl> graph;
  bool invalidated = false;
};

std::mutex g_streams_mu;
// Held shared while a call walks a copy of the stream list waiting on each stream, and exclusively
// while cudaStreamDestroy frees one: a stream another thread destroys meanwhile is never waited on
// after it is gone.
std::shared_mutex g_stream_lifetime_mu;
std::set<StreamImpl*>& Streams() {
  static auto* s = new std::set<StreamImpl*>();
  return *s;
}
StreamImpl* Legacy() {
  static StreamImpl* s = [] {
    auto* l = new StreamImpl(true);
    std::lock_guard<std::mutex> lock(g_streams_mu);
    Streams().insert(l);
    return l;
  }();
  return s;
}

StreamImpl* Resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return Legacy();
  return reinterpret_cast<StreamImpl*>(s);
}

bool Known(StreamImpl* s) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  return Streams().count(s) != 0;
}

std::vector<StreamImpl*> AllStreams() {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  return {Streams().begin(), Streams().end()};
}

void SyncAll() {
  std::shared_lock<std::shared_mutex> alive(g_stream_lifetime_mu);
  for (StreamImpl* s : AllStreams()) s->Sync();
}

// Whether a capture forbids "potentially unsafe" calls (cudaMalloc, synchronous copies) on this
// thread: a global-mode capture anywhere, or a thread-local one on this thread. Such a call fails
// and invalidates those captures, as the real runtime does.
bool UnsafeCallProhibited() {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  bool prohibited = false;
  for (StreamImpl* s : Streams()) {
    if (!s->capturing) continue;
    if (s->mode == cudaStreamCaptureModeGlobal ||
        (s->mode == cudaStreamCaptureModeThreadLocal &&
         s->capture_thread == std::this_thread::get_id())) {
      s->invalidated = true;
      prohibited = true;
    }
  }
  return prohibited;
}

// Whether any stream is capturing; every such capture is invalidated (a device-wide synchronize
// would wait for them all).
bool AnyCapture() {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  bool any = false;
  for (StreamImpl* s : Streams()) {
    if (s->capturing) {
      s->invalidated = true;
      any = true;
    }
  }
  return any;
}

// Enqueues a stream-ordered operation, or records it into the stream's capture. The legacy
// default stream and blocking streams order against each other (the host waits here).
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> op, uint64_t* seq = nullptr) {
  StreamImpl* s = Resolve(stream);
  if (s != Legacy() && !Known(s)) return cudaErrorInvalidResourceHandle;
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    if (s->capturing) {
      s->graph->nodes.push_back(std::move(op));
      if (seq != nullptr) *seq = 0;
      return cudaSuccess;
    }
  }
  if (s == Legacy()) {
    std::shared_lock<std::shared_mutex> alive(g_stream_lifetime_mu);
    for (StreamImpl* o : AllStreams()) {
      if (o != s && o->blocking) o->Sync();
    }
  } else if (s->blocking) {
    Legacy()->Sync();
  }
  const uint64_t n = s->Push(std::move(op));
  if (seq != nullptr) *seq = n;
  return cudaSuccess;
}

cudaError_t CheckCapture(StreamImpl* s) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  if (s->capturing) {
    s->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  return cudaSuccess;
}

// ---- Events ---------------------------------------------------------------------------------

struct EventImpl {
  std::mutex mu;
  StreamImpl* stream = nullptr;
  uint64_t seq = 0;
  bool timing = true;
  std::shared_ptr<std::chrono::steady_clock::time_point> when;
};

// ---- Kernels --------------------------------------------------------------------------------

std::mutex g_func_mu;
std::map<const void*, int>& MaxDynamicSmem() {
  static auto* m = new std::map<const void*, int>();
  return *m;
}

void RecordFault(const std::string& text, cudaError_t code) {
  int expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, code);
  std::lock_guard<std::mutex> lock(g_fault_mu);
  g_last_fault = text;
  std::fprintf(stderr, "astr cuda-emu: %s (%s)\n", text.c_str(), cudaGetErrorString(code));
}

}  // namespace

// Bumped by every cudaFree: a thread's cached allocation is only trusted while it is unchanged.
std::atomic<uint64_t> g_free_generation{0};

bool IsDeviceRange(const void* p, size_t n) {
  thread_local uintptr_t cached_base = 0, cached_end = 0;
  thread_local uint64_t cached_generation = 0;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint64_t generation = g_free_generation.load(std::memory_order_acquire);
  if (a >= cached_base && a + n <= cached_end && generation == cached_generation) return true;
  Memory& m = Mem();
  std::shared_lock<std::shared_mutex> lock(m.mu);
  auto it = m.device.upper_bound(a);
  if (it == m.device.begin()) return false;
  --it;
  if (a < it->first || a + n > it->first + it->second) return false;
  cached_base = it->first;
  cached_end = it->first + it->second;
  cached_generation = generation;
  return true;
}

void EnqueueKernel(const LaunchConfig& c, std::function<void()> body) {
  if (cudaError_t e = static_cast<cudaError_t>(g_sticky.load()); e != cudaSuccess) {
    Fail(e);
    return;
  }
  const Profile& p = CurrentProfile();
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64 ||
      c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 0x7fffffffu ||
      c.grid.y > 65535 || c.grid.z > 65535) {
    Fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (c.smem > 48 * 1024) {
    int allowed = 48 * 1024;
    {
      std::lock_guard<std::mutex> lock(g_func_mu);
      auto it = MaxDynamicSmem().find(c.func);
      if (it != MaxDynamicSmem().end()) allowed = it->second;
    }
    if (c.smem > static_cast<size_t>(allowed) || c.smem > p.smem_optin) {
      Fail(cudaErrorInvalidValue);
      return;
    }
  }
  auto config = std::make_shared<const LaunchConfig>(c);
  auto fn = std::make_shared<const std::function<void()>>(std::move(body));
  const cudaError_t e = Enqueue(c.stream, [config, fn] {
    KernelRun run;
    run.config = *config;
    run.body = *fn;
    ExecuteKernel(run);
    if (run.failed.load()) RecordFault(run.fault, run.fault_code);
  });
  if (e != cudaSuccess) Fail(e);
}

cudaError_t EnqueueHostOp(cudaStream_t stream, std::function<void()> op) {
  if (cudaError_t e = static_cast<cudaError_t>(g_sticky.load()); e != cudaSuccess) return e;
  return Enqueue(stream, std::move(op));
}

cudaError_t StickyError() { return static_cast<cudaError_t>(g_sticky.load()); }

std::string LastKernelFault() {
  std::lock_guard<std::mutex> lock(g_fault_mu);
  return g_last_fault;
}

void InjectFailure(const std::string& api, int count, cudaError_t error, int skip) {
  std::lock_guard<std::mutex> lock(g_inject_mu);
  Injections()[api] = Injection{count, error, skip};
}

}  // namespace astr::emu

using astr::emu::EventImpl;
using astr::emu::Fail;
using astr::emu::GraphImpl;
using astr::emu::StreamImpl;
namespace emu = astr::emu;

#define EMU_STICKY()                                                                            \
  do {                                                                                          \
    if (cudaError_t sticky_ = emu::StickyError(); sticky_ != cudaSuccess) return Fail(sticky_); \
  } while (0)
#define EMU_INJECT(api)                                                                \
  do {                                                                                 \
    if (cudaError_t inj_ = emu::Injected(api); inj_ != cudaSuccess) return Fail(inj_); \
  } while (0)

extern "C" {

// ---- Errors and versions ----------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  if (cudaError_t s = emu::StickyError(); s != cudaSuccess) return s;
  const cudaError_t e = emu::t_last_error;
  emu::t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  if (cudaError_t s = emu::StickyError(); s != cudaSuccess) return s;
  return emu::t_last_error;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define EMU_NAME(x) \
  case x:           \
    return #x;
    EMU_NAME(cudaSuccess)
    EMU_NAME(cudaErrorInvalidValue)
    EMU_NAME(cudaErrorMemoryAllocation)
    EMU_NAME(cudaErrorInvalidConfiguration)
    EMU_NAME(cudaErrorInvalidDevicePointer)
    EMU_NAME(cudaErrorInvalidDevice)
    EMU_NAME(cudaErrorInvalidResourceHandle)
    EMU_NAME(cudaErrorNotReady)
    EMU_NAME(cudaErrorIllegalAddress)
    EMU_NAME(cudaErrorMisalignedAddress)
    EMU_NAME(cudaErrorLaunchFailure)
    EMU_NAME(cudaErrorStreamCaptureUnsupported)
    EMU_NAME(cudaErrorStreamCaptureInvalidated)
    EMU_NAME(cudaErrorStreamCaptureImplicit)
    EMU_NAME(cudaErrorIllegalState)
    EMU_NAME(cudaErrorNotSupported)
    EMU_NAME(cudaErrorMapBufferObjectFailed)
    EMU_NAME(cudaErrorUnknown)
#undef EMU_NAME
    default:
      return "cudaErrorUnrecognized";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorMapBufferObjectFailed:
      return "mapping of buffer object failed";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorNotSupported:
      return "operation not supported";
    default:
      return "unknown error";
  }
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return Fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  if (v == nullptr) return Fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

// ---- Device ------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Fail(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : Fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Fail(cudaErrorInvalidValue);
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  const emu::Profile& p = emu::CurrentProfile();
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "%s", p.display_name.c_str());
  prop->totalGlobalMem = p.total_mem;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = p.smem_optin;
  prop->sharedMemPerMultiprocessor = p.smem_per_sm;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsPerMultiProcessor = p.max_threads_per_sm;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = p.sms;
  prop->major = p.major;
  prop->minor = p.minor;
  prop->l2CacheSize = p.l2_bytes;
  prop->memoryBusWidth = p.bus_width;
  prop->totalConstMem = 65536;
  prop->unifiedAddressing = 1;
  prop->concurrentKernels = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Fail(cudaErrorInvalidValue);
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  const emu::Profile& p = emu::CurrentProfile();
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = p.sms;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.smem_optin);
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = 48 * 1024;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.smem_per_sm);
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    case cudaDevAttrL2CacheSize:
      *value = p.l2_bytes;
      return cudaSuccess;
    default:
      return Fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaDeviceSynchronize(void) {
  EMU_STICKY();
  if (emu::AnyCapture()) return Fail(cudaErrorStreamCaptureUnsupported);
  emu::SyncAll();
  EMU_STICKY();
  return cudaSuccess;
}

// Ends the "context": waits for every stream and clears the sticky error, so that a test can go on
// after a deliberate kernel fault. Allocations stay (the emulator has one process-wide context).
cudaError_t cudaDeviceReset(void) {
  emu::SyncAll();
  emu::g_sticky.store(cudaSuccess);
  emu::t_last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  EMU_STICKY();
  if (func == nullptr) return Fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > emu::CurrentProfile().smem_optin) {
      return Fail(cudaErrorInvalidValue);
    }
    std::lock_guard<std::mutex> lock(emu::g_func_mu);
    emu::MaxDynamicSmem()[func] = value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return Fail(cudaErrorInvalidValue);
}

// ---- Memory ----------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t size) {
  EMU_STICKY();
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (emu::UnsafeCallProhibited()) return Fail(cudaErrorStreamCaptureUnsupported);
  EMU_INJECT("cudaMalloc");
  if (size == 0) return cudaSuccess;
  const size_t rounded = (size + 255) / 256 * 256;
  emu::Memory& m = emu::Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    if (m.used + rounded > emu::UsableMemory()) return Fail(cudaErrorMemoryAllocation);
    m.used += rounded;
  }
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    m.used -= rounded;
    return Fail(cudaErrorMemoryAllocation);
  }
  // Fresh device memory holds garbage: NaN bytes here, so a read of a byte nobody wrote shows.
  if (rounded <= emu::PoisonLimit()) std::memset(p, 0xFF, rounded);
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    m.device[reinterpret_cast<uintptr_t>(p)] = rounded;
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  EMU_STICKY();
  if (ptr == nullptr) return cudaSuccess;
  if (emu::UnsafeCallProhibited()) return Fail(cudaErrorStreamCaptureUnsupported);
  emu::SyncAll();  // cudaFree synchronizes the device
  emu::Memory& m = emu::Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    auto it = m.device.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == m.device.end() || m.ipc.count(it->first)) return Fail(cudaErrorInvalidValue);
    m.used -= it->second;
    m.device.erase(it);
    emu::g_free_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  EMU_STICKY();
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (emu::UnsafeCallProhibited()) return Fail(cudaErrorStreamCaptureUnsupported);
  EMU_INJECT("cudaMallocHost");
  const size_t rounded = (std::max<size_t>(size, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, rounded);  // fresh pinned memory holds garbage too
  emu::Memory& m = emu::Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    m.pinned[reinterpret_cast<uintptr_t>(p)] = rounded;
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  return cudaMallocHost(ptr, size);
}

cudaError_t cudaFreeHost(void* ptr) {
  EMU_STICKY();
  if (ptr == nullptr) return cudaSuccess;
  emu::SyncAll();
  emu::Memory& m = emu::Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    auto it = m.pinned.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == m.pinned.end()) return Fail(cudaErrorInvalidValue);
    m.pinned.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

// ---- CUDA IPC: opening another process's buffer (ipc_handle.h) ----------------------------------

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  // The emulated runtime's own allocations are not shareable; a trainer exports its buffers
  // through lib/libastr_cuda_ipc_emu.so.
  (void)handle;
  (void)ptr;
  return Fail(cudaErrorNotSupported);
}

cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int) {
  EMU_STICKY();
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  EMU_INJECT("cudaIpcOpenMemHandle");
  emu::IpcHandle h;
  static_assert(sizeof(h) == sizeof(handle));
  std::memcpy(&h, &handle, sizeof(h));
  if (!emu::IsIpcHandle(h)) return Fail(cudaErrorInvalidResourceHandle);
  // As the driver: a process cannot open its own handle.
  if (h.pid == getpid()) return Fail(cudaErrorInvalidValue);
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Fail(cudaErrorInvalidResourceHandle);  // the exporter is gone
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < h.bytes) {
    close(fd);
    return Fail(cudaErrorInvalidResourceHandle);
  }
  void* map = mmap(nullptr, h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return Fail(cudaErrorMapBufferObjectFailed);
  unsigned char* p = static_cast<unsigned char*>(map) + h.offset;
  emu::Memory& m = emu::Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    m.device[reinterpret_cast<uintptr_t>(p)] = h.bytes - h.offset;
    m.ipc[reinterpret_cast<uintptr_t>(p)] = {map, h.bytes};
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* ptr) {
  EMU_STICKY();
  emu::SyncAll();  // the device's work on it ends first
  std::pair<void*, size_t> mapping;
  emu::Memory& m = emu::Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    auto it = m.ipc.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == m.ipc.end()) return Fail(cudaErrorInvalidValue);
    mapping = it->second;
    m.ipc.erase(it);
    m.device.erase(reinterpret_cast<uintptr_t>(ptr));
    emu::g_free_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  munmap(mapping.first, mapping.second);
  return cudaSuccess;
}

}  // extern "C"

// ---- Virtual memory management (the driver's cuMem* calls, through cudaGetDriverEntryPoint) ----
//
// A reservation is an mmap of PROT_NONE pages; cuMemCreate counts physical memory against the
// profile; cuMemMap makes the range readable and writable (poisoned, like cudaMalloc) and a device
// allocation for the copy checks; cuMemUnmap drops the pages (MADV_DONTNEED) and makes the range
// PROT_NONE again, so a kernel that touches unmapped memory dies as it would fault on a GPU.
namespace astr::emu {
namespace {

constexpr size_t kGranularity = size_t{2} << 20;

// Reservations: base -> bytes. Mapped ranges of one reservation that touch are one device
// allocation for the copy checks (a buffer may span two chunks mapped one after the other).
std::map<uintptr_t, size_t>& Reservations() {
  static auto* r = new std::map<uintptr_t, size_t>();
  return *r;
}

// The reservation holding [a, a + n), or end(). Caller holds Mem().mu.
std::map<uintptr_t, size_t>::iterator ReservationOf(uintptr_t a, size_t n) {
  auto& r = Reservations();
  auto it = r.upper_bound(a);
  if (it == r.begin()) return r.end();
  --it;
  return a >= it->first && a + n <= it->first + it->second ? it : r.end();
}

struct PhysicalHandle {
  size_t bytes = 0;
  bool mapped = false;
};

CUresult EmuGranularity(size_t* granularity, const CUmemAllocationProp*,
                        CUmemAllocationGranularity_flags) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult EmuAddressReserve(CUdeviceptr* ptr, size_t size, size_t, CUdeviceptr, unsigned long long) {
  if (ptr == nullptr || size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  Memory& m = Mem();
  std::unique_lock<std::shared_mutex> lock(m.mu);
  Reservations()[reinterpret_cast<uintptr_t>(p)] = size;
  return CUDA_SUCCESS;
}

CUresult EmuAddressFree(CUdeviceptr ptr, size_t size) {
  {
    Memory& m = Mem();
    std::unique_lock<std::shared_mutex> lock(m.mu);
    auto it = Reservations().find(static_cast<uintptr_t>(ptr));
    if (it == Reservations().end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    Reservations().erase(it);
  }
  if (munmap(reinterpret_cast<void*>(ptr), size) != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult EmuCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp*,
                   unsigned long long) {
  if (handle == nullptr || size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (Injected("cuMemCreate") != cudaSuccess) return CUDA_ERROR_OUT_OF_MEMORY;
  Memory& m = Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    if (m.used + size > UsableMemory()) return CUDA_ERROR_OUT_OF_MEMORY;
    m.used += size;
  }
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(new PhysicalHandle{size, false});
  return CUDA_SUCCESS;
}

CUresult EmuRelease(CUmemGenericAllocationHandle handle) {
  auto* h = reinterpret_cast<PhysicalHandle*>(handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Memory& m = Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    m.used -= h->bytes;
  }
  delete h;
  return CUDA_SUCCESS;
}

CUresult EmuMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                unsigned long long) {
  auto* h = reinterpret_cast<PhysicalHandle*>(handle);
  if (h == nullptr || offset != 0 || size != h->bytes || h->mapped) return CUDA_ERROR_INVALID_VALUE;
  void* p = reinterpret_cast<void*>(ptr);
  if (mprotect(p, size, PROT_READ | PROT_WRITE) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (size <= PoisonLimit()) std::memset(p, 0xFF, size);
  h->mapped = true;
  Memory& m = Mem();
  std::unique_lock<std::shared_mutex> lock(m.mu);
  uintptr_t base = static_cast<uintptr_t>(ptr);
  size_t bytes = size;
  auto reservation = ReservationOf(base, bytes);
  const auto same = [&](uintptr_t a) {
    return reservation != Reservations().end() && a >= reservation->first &&
           a < reservation->first + reservation->second;
  };
  // Merge with the mapped ranges of the same reservation right before and after it.
  auto next = m.device.lower_bound(base);
  if (next != m.device.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == base && same(prev->first)) {
      base = prev->first;
      bytes += prev->second;
      m.device.erase(prev);
    }
  }
  next = m.device.lower_bound(static_cast<uintptr_t>(ptr));
  if (next != m.device.end() && next->first == static_cast<uintptr_t>(ptr) + size &&
      same(next->first)) {
    bytes += next->second;
    m.device.erase(next);
  }
  m.device[base] = bytes;
  return CUDA_SUCCESS;
}

CUresult EmuSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult EmuUnmap(CUdeviceptr ptr, size_t size) {
  SyncAll();
  Memory& m = Mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    // The mapped range holding [ptr, ptr + size) (merged with its neighbours): split around it.
    const uintptr_t a = static_cast<uintptr_t>(ptr);
    auto it = m.device.upper_bound(a);
    if (it == m.device.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    const uintptr_t lo = it->first, hi = it->first + it->second;
    if (a < lo || a + size > hi || ReservationOf(a, size) == Reservations().end()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    m.device.erase(it);
    if (lo < a) m.device[lo] = a - lo;
    if (a + size < hi) m.device[a + size] = hi - (a + size);
    g_free_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  void* p = reinterpret_cast<void*>(ptr);
  madvise(p, size, MADV_DONTNEED);
  mprotect(p, size, PROT_NONE);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace astr::emu

extern "C" {

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** func, unsigned int,
                                             unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || func == nullptr) return Fail(cudaErrorInvalidValue);
  static const std::map<std::string, void*> table = {
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&emu::EmuGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&emu::EmuAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&emu::EmuAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&emu::EmuCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&emu::EmuRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&emu::EmuMap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&emu::EmuSetAccess)},
      {"cuMemUnmap", reinterpret_cast<void*>(&emu::EmuUnmap)},
  };
  auto it = table.find(symbol);
  *func = it == table.end() ? nullptr : it->second;
  if (status != nullptr) {
    *status = it == table.end() ? cudaDriverEntryPointSymbolNotFound : cudaDriverEntryPointSuccess;
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  EMU_STICKY();
  if (free_bytes == nullptr || total == nullptr) return Fail(cudaErrorInvalidValue);
  emu::Memory& m = emu::Mem();
  std::shared_lock<std::shared_mutex> lock(m.mu);
  *total = emu::CurrentProfile().total_mem;
  *free_bytes = emu::UsableMemory() - m.used;
  return cudaSuccess;
}

}  // extern "C"

namespace astr::emu {
namespace {

// Validates a copy's device sides; resolves cudaMemcpyDefault.
cudaError_t CopyKind(void* dst, const void* src, size_t n, cudaMemcpyKind* kind) {
  const bool dst_dev = IsDeviceRange(dst, n), src_dev = IsDeviceRange(src, n);
  if (*kind == cudaMemcpyDefault) {
    *kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                    : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  switch (*kind) {
    case cudaMemcpyHostToDevice:
      return dst_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost:
      return src_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice:
      return dst_dev && src_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost:
      return cudaSuccess;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
}

cudaError_t MemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                        cudaStream_t stream, bool sync) {
  if (n == 0) return cudaSuccess;
  if (cudaError_t e = CopyKind(dst, src, n, &kind); e != cudaSuccess) return e;
  StreamImpl* s = Resolve(stream);
  if (s != Legacy() && !Known(s)) return cudaErrorInvalidResourceHandle;
  bool capturing;
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    capturing = s->capturing;
  }
  std::function<void()> op;
  bool wait = sync;
  if (kind == cudaMemcpyHostToDevice && !IsPinned(src, n)) {
    if (capturing) return CheckCapture(s);  // pageable memory cannot be captured
    // Pageable source: staged now, so the caller may reuse its buffer when the call returns.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
    op = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  } else {
    if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) && !IsPinned(dst, n)) {
      if (capturing) return CheckCapture(s);
      wait = true;  // to pageable memory: returns once the copy is done
    }
    op = [dst, src, n] { std::memmove(dst, src, n); };
  }
  uint64_t seq = 0;
  if (cudaError_t e = Enqueue(stream, std::move(op), &seq); e != cudaSuccess) return e;
  if (wait && seq != 0) {
    s->WaitFor(seq);
    if (cudaError_t e = StickyError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace astr::emu

extern "C" {

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  EMU_STICKY();
  if (emu::UnsafeCallProhibited()) return Fail(cudaErrorStreamCaptureUnsupported);
  return Fail(emu::MemcpyAsync(dst, src, n, kind, nullptr, /*sync=*/true));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  EMU_STICKY();
  return Fail(emu::MemcpyAsync(dst, src, n, kind, stream, /*sync=*/false));
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  EMU_STICKY();
  if (n == 0) return cudaSuccess;
  if (!emu::IsDeviceRange(p, n)) return Fail(cudaErrorInvalidValue);
  return Fail(emu::Enqueue(stream, [p, value, n] { std::memset(p, value, n); }));
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  EMU_STICKY();
  if (emu::UnsafeCallProhibited()) return Fail(cudaErrorStreamCaptureUnsupported);
  if (cudaError_t e = cudaMemsetAsync(p, value, n, nullptr); e != cudaSuccess) return e;
  emu::Legacy()->Sync();
  EMU_STICKY();
  return cudaSuccess;
}

// ---- Streams ----------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  EMU_STICKY();
  if (stream == nullptr) return Fail(cudaErrorInvalidValue);
  auto* s = new StreamImpl((flags & cudaStreamNonBlocking) == 0);
  {
    std::lock_guard<std::mutex> lock(emu::g_streams_mu);
    emu::Streams().insert(s);
  }
  *stream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  StreamImpl* s = emu::Resolve(stream);
  if (s == emu::Legacy() || !emu::Known(s)) return Fail(cudaErrorInvalidResourceHandle);
  s->Sync();
  std::unique_lock<std::shared_mutex> alive(emu::g_stream_lifetime_mu);
  {
    std::lock_guard<std::mutex> lock(emu::g_streams_mu);
    emu::Streams().erase(s);
  }
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  EMU_STICKY();
  StreamImpl* s = emu::Resolve(stream);
  if (s != emu::Legacy() && !emu::Known(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = emu::CheckCapture(s); e != cudaSuccess) return Fail(e);
  s->Sync();
  EMU_STICKY();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  EMU_STICKY();
  StreamImpl* s = emu::Resolve(stream);
  if (s != emu::Legacy() && !emu::Known(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = emu::CheckCapture(s); e != cudaSuccess) return Fail(e);
  return s->Idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  EMU_STICKY();
  StreamImpl* s = emu::Resolve(stream);
  if (s == emu::Legacy()) return Fail(cudaErrorStreamCaptureUnsupported);
  if (!emu::Known(s)) return Fail(cudaErrorInvalidResourceHandle);
  EMU_INJECT("cudaStreamBeginCapture");
  std::lock_guard<std::mutex> lock(emu::g_streams_mu);
  if (s->capturing) return Fail(cudaErrorIllegalState);
  s->capturing = true;
  s->mode = mode;
  s->capture_thread = std::this_thread::get_id();
  s->graph = std::make_unique<GraphImpl>();
  s->invalidated = false;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return Fail(cudaErrorInvalidValue);
  *graph = nullptr;
  StreamImpl* s = emu::Resolve(stream);
  if (s == emu::Legacy() || !emu::Known(s)) return Fail(cudaErrorInvalidResourceHandle);
  std::unique_ptr<GraphImpl> g;
  bool invalidated;
  {
    std::lock_guard<std::mutex> lock(emu::g_streams_mu);
    if (!s->capturing) return Fail(cudaErrorIllegalState);
    s->capturing = false;
    g = std::move(s->graph);
    invalidated = s->invalidated;
  }
  if (invalidated) return Fail(cudaErrorStreamCaptureInvalidated);
  *graph = reinterpret_cast<cudaGraph_t>(g.release());
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return Fail(cudaErrorInvalidValue);
  StreamImpl* s = emu::Resolve(stream);
  std::lock_guard<std::mutex> lock(emu::g_streams_mu);
  *status = !s->capturing    ? cudaStreamCaptureStatusNone
            : s->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// ---- Events -----------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  EMU_STICKY();
  if (event == nullptr) return Fail(cudaErrorInvalidValue);
  auto* e = new EventImpl();
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<EventImpl*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  EMU_STICKY();
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<EventImpl*>(event);
  auto when = std::make_shared<std::chrono::steady_clock::time_point>();
  uint64_t seq = 0;
  if (cudaError_t err = emu::Enqueue(
          stream, [when] { *when = std::chrono::steady_clock::now(); }, &seq);
      err != cudaSuccess) {
    return Fail(err);
  }
  std::lock_guard<std::mutex> lock(e->mu);
  e->stream = seq != 0 ? emu::Resolve(stream) : nullptr;
  e->seq = seq;
  e->when = when;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  EMU_STICKY();
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<EventImpl*>(event);
  StreamImpl* s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    s = e->stream;
    seq = e->seq;
  }
  if (s != nullptr) s->WaitFor(seq);
  EMU_STICKY();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  EMU_STICKY();
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<EventImpl*>(event);
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->stream == nullptr) return cudaSuccess;
  e->stream->Idle();
  std::lock_guard<std::mutex> slock(e->stream->mu);
  return e->stream->done >= e->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  EMU_STICKY();
  if (ms == nullptr || start == nullptr || end == nullptr) return Fail(cudaErrorInvalidValue);
  auto* a = reinterpret_cast<EventImpl*>(start);
  auto* b = reinterpret_cast<EventImpl*>(end);
  if (!a->timing || !b->timing || a->when == nullptr || b->when == nullptr) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess) {
    return Fail(cudaErrorNotReady);
  }
  *ms = std::chrono::duration<float, std::milli>(*b->when - *a->when).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  EMU_STICKY();
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<EventImpl*>(event);
  StreamImpl* other;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    other = e->stream;
    seq = e->seq;
  }
  if (other == nullptr) return cudaSuccess;
  return Fail(emu::Enqueue(stream, [other, seq] { other->WaitFor(seq); }));
}

// ---- Graphs -----------------------------------------------------------------------------------

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  EMU_STICKY();
  if (exec == nullptr || graph == nullptr) return Fail(cudaErrorInvalidValue);
  *exec = nullptr;
  EMU_INJECT("cudaGraphInstantiate");
  auto* g = new GraphImpl(*reinterpret_cast<GraphImpl*>(graph));
  *exec = reinterpret_cast<cudaGraphExec_t>(g);
  return cudaSuccess;
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  EMU_STICKY();
  if (exec == nullptr) return Fail(cudaErrorInvalidValue);
  StreamImpl* s = emu::Resolve(stream);
  if (s != emu::Legacy() && !emu::Known(s)) return Fail(cudaErrorInvalidResourceHandle);
  EMU_INJECT("cudaGraphUpload");
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  EMU_STICKY();
  if (exec == nullptr) return Fail(cudaErrorInvalidValue);
  EMU_INJECT("cudaGraphLaunch");
  for (const auto& node : reinterpret_cast<GraphImpl*>(exec)->nodes) {
    if (cudaError_t e = emu::Enqueue(stream, node); e != cudaSuccess) return Fail(e);
  }
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (exec == nullptr) return Fail(cudaErrorInvalidValue);
  emu::SyncAll();  // a replay in flight still runs its nodes
  delete reinterpret_cast<GraphImpl*>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == nullptr) return Fail(cudaErrorInvalidValue);
  delete reinterpret_cast<GraphImpl*>(graph);
  return cudaSuccess;
}

}  // extern "C"
