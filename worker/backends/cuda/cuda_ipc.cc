#include "worker/backends/cuda/cuda_ipc.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "worker/backends/cuda/device_memory.h"

namespace astr::cuda {
namespace {

class CudaIpcBuffer final : public IpcBuffer {
 public:
  CudaIpcBuffer(void* device, uint64_t bytes)
      : device_(static_cast<uint8_t*>(device)), bytes_(bytes) {}
  ~CudaIpcBuffer() override {
    if (cudaIpcCloseMemHandle(device_) != cudaSuccess) cudaGetLastError();
  }

  Status Read(uint64_t offset, std::span<uint8_t> out) override {
    if (offset > bytes_ || out.size() > bytes_ - offset) {
      return OutOfRangeError("CUDA IPC buffer: bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset + out.size()) + ") of " +
                             std::to_string(bytes_));
    }
    if (out.empty()) return OkStatus();
    ASTR_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(out.data(), device_ + offset, out.size(), cudaMemcpyDeviceToHost),
        "copying from a CUDA IPC buffer to the host");
    return OkStatus();
  }

 private:
  uint8_t* const device_;
  const uint64_t bytes_;
};

}  // namespace

StatusOr<std::unique_ptr<IpcBuffer>> OpenCudaIpcBuffer(const std::string& handle, uint64_t bytes) {
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof(h)) {
    return InvalidArgumentError("handle: " + std::to_string(handle.size()) +
                                " bytes, a cudaIpcMemHandle_t has " + std::to_string(sizeof(h)));
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  void* device = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&device, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return InvalidArgumentError(std::string("handle: cudaIpcOpenMemHandle: ") +
                                cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                                "); the buffer must be a live cudaMalloc allocation of a process "
                                "on this machine, with cudaIpcGetMemHandle of its base");
  }
  return std::unique_ptr<IpcBuffer>(new CudaIpcBuffer(device, bytes));
}

}  // namespace astr::cuda
