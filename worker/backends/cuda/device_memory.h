// Device memory for the CUDA backend. Every allocation the backend makes goes through
// DeviceAllocator, which counts them: the tests check that the count does not move during decode
// steps (the decode hot loop allocates nothing). Buffers are freed by destruction, and so is the
// pinned host memory of PinnedMemory.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/base/status.h"

namespace astr::cuda {

// "what: <cudaGetErrorString>" as an INTERNAL status (RESOURCE_EXHAUSTED for out of memory).
Status CudaStatus(cudaError_t err, const std::string& what);

#define ASTR_CUDA_RETURN_IF_ERROR(expr, what)                                                 \
  do {                                                                                        \
    cudaError_t astr_cuda_err_ = (expr);                                                      \
    if (astr_cuda_err_ != cudaSuccess) return ::astr::cuda::CudaStatus(astr_cuda_err_, what); \
  } while (0)

// One device allocation; cudaFree on destruction.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // `bytes` at `ptr` that another owner frees (a ReleasableArena's piece): not freed here.
  static DeviceMemory View(void* ptr, size_t bytes) {
    DeviceMemory m;
    m.ptr_ = ptr;
    m.bytes_ = bytes;
    m.owned_ = false;
    return m;
  }

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  friend class DeviceAllocator;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool owned_ = true;
};

class DeviceAllocator {
 public:
  // cudaMalloc of `bytes` (at least 1); `what` names the buffer in the error.
  static StatusOr<DeviceMemory> Allocate(size_t bytes, const std::string& what);
  // Allocations made through Allocate since the process started, and bytes currently held.
  static int64_t allocations() { return allocations_.load(); }
  static int64_t bytes_in_use() { return bytes_in_use_.load(); }

 private:
  friend class DeviceMemory;
  static std::atomic<int64_t> allocations_;
  static std::atomic<int64_t> bytes_in_use_;
};

// Page-locked host memory (cudaMallocHost), which copies to and from the device can run
// asynchronously from; cudaFreeHost on destruction.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory();
  PinnedMemory(PinnedMemory&& other) noexcept;
  PinnedMemory& operator=(PinnedMemory&& other) noexcept;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  // `bytes` (at least 1) of pinned host memory; `what` names the buffer in the error.
  static StatusOr<PinnedMemory> Allocate(size_t bytes, const std::string& what);

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace astr::cuda
