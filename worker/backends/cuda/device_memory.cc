#include "worker/backends/cuda/device_memory.h"

#include <utility>

namespace astr::cuda {

std::atomic<int64_t> DeviceAllocator::allocations_{0};
std::atomic<int64_t> DeviceAllocator::bytes_in_use_{0};

Status CudaStatus(cudaError_t err, const std::string& what) {
  const std::string message = what + ": " + cudaGetErrorString(err);
  if (err == cudaErrorMemoryAllocation) return ResourceExhaustedError(message);
  return InternalError(message);
}

DeviceMemory::~DeviceMemory() {
  if (ptr_ != nullptr && owned_) {
    cudaFree(ptr_);
    DeviceAllocator::bytes_in_use_ -= static_cast<int64_t>(bytes_);
  }
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      owned_(std::exchange(other.owned_, true)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    DeviceMemory old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    owned_ = std::exchange(other.owned_, true);
  }
  return *this;
}

StatusOr<DeviceMemory> DeviceAllocator::Allocate(size_t bytes, const std::string& what) {
  DeviceMemory m;
  const size_t n = bytes == 0 ? 1 : bytes;
  ASTR_CUDA_RETURN_IF_ERROR(cudaMalloc(&m.ptr_, n),
                            "allocating " + std::to_string(n) + " bytes for " + what);
  m.bytes_ = n;
  allocations_ += 1;
  bytes_in_use_ += static_cast<int64_t>(n);
  return m;
}

PinnedMemory::~PinnedMemory() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

PinnedMemory::PinnedMemory(PinnedMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedMemory& PinnedMemory::operator=(PinnedMemory&& other) noexcept {
  if (this != &other) {
    PinnedMemory old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

StatusOr<PinnedMemory> PinnedMemory::Allocate(size_t bytes, const std::string& what) {
  PinnedMemory m;
  const size_t n = bytes == 0 ? 1 : bytes;
  ASTR_CUDA_RETURN_IF_ERROR(cudaMallocHost(&m.ptr_, n), "allocating " + std::to_string(n) +
                                                            " bytes of pinned memory for " + what);
  m.bytes_ = n;
  return m;
}

}  // namespace astr::cuda
