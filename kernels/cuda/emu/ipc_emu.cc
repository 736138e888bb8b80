// The trainer side of the emulated device's CUDA IPC (docs/cuda.md "The emulated device"): the
// few libcudart calls a trainer makes to share device buffers with the workers, built as
// lib/libastr_cuda_ipc_emu.so. The Python SDK loads it through ASTR_CUDART_LIBRARY exactly as it
// loads libcudart.so (WeightSync(transport="ipc")), so the whole CUDA IPC path runs in CI.
//
// The subset, with libcudart's signatures: cudaMalloc (a memfd of the size, mapped shared),
// cudaFree, cudaMemcpy (any direction: the emulated device's memory is host memory),
// cudaIpcGetMemHandle (ipc_handle.h: this process's pid, the memfd, the offset of the pointer),
// cudaDeviceSynchronize, cudaGetErrorString. A worker's emulated runtime opens the handle
// (cudaIpcOpenMemHandle maps /proc/PID/fd/FD); it stays valid until cudaFree, as with CUDA.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "kernels/cuda/emu/ipc_handle.h"

namespace {

// libcudart's codes for what this subset can answer.
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kMemoryAllocation = 2;

struct Allocation {
  int fd = -1;
  size_t bytes = 0;
};

std::mutex g_mu;
std::map<uintptr_t, Allocation>& Allocations() {
  static auto* m = new std::map<uintptr_t, Allocation>();
  return *m;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return kInvalidValue;
  *ptr = nullptr;
  if (bytes == 0) return kSuccess;
  const int fd = memfd_create("astr-cuda-ipc-emu", MFD_CLOEXEC);
  if (fd < 0) return kMemoryAllocation;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return kMemoryAllocation;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return kMemoryAllocation;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  Allocations()[reinterpret_cast<uintptr_t>(p)] = {fd, bytes};
  *ptr = p;
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaFree(void* ptr) {
  if (ptr == nullptr) return kSuccess;
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Allocations().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == Allocations().end()) return kInvalidValue;
    a = it->second;
    Allocations().erase(it);
  }
  munmap(ptr, a.bytes);
  close(a.fd);
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaMemcpy(void* dst, const void* src, size_t bytes,
                                                      int /*kind*/) {
  if (bytes != 0 && (dst == nullptr || src == nullptr)) return kInvalidValue;
  std::memmove(dst, src, bytes);
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaDeviceSynchronize() { return kSuccess; }

__attribute__((visibility("default"))) int cudaIpcGetMemHandle(void* handle, void* ptr) {
  if (handle == nullptr) return kInvalidValue;
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Allocations().upper_bound(p);
  if (it == Allocations().begin()) return kInvalidValue;
  --it;
  if (p >= it->first + it->second.bytes) return kInvalidValue;
  astr::emu::IpcHandle h;
  std::memcpy(h.magic, astr::emu::kIpcMagic, sizeof(h.magic));
  h.pid = static_cast<int32_t>(getpid());
  h.fd = it->second.fd;
  h.bytes = it->second.bytes;
  h.offset = p - it->first;
  std::memset(h.reserved, 0, sizeof(h.reserved));
  std::memcpy(handle, &h, sizeof(h));
  return kSuccess;
}

__attribute__((visibility("default"))) const char* cudaGetErrorString(int error) {
  switch (error) {
    case kSuccess:
      return "no error";
    case kInvalidValue:
      return "invalid argument";
    case kMemoryAllocation:
      return "out of memory";
    default:
      return "unrecognized error code";
  }
}

}  // extern "C"
