// astr-test-cuda-ipc-export BYTES: the trainer's side of a CUDA IPC check, in a process of its own
// (a handle cannot be opened by the process that made it). Allocates BYTES of device memory, fills
// byte i with IpcPattern(i), prints the cudaIpcMemHandle_t of the allocation in hex on one line,
// then keeps the allocation until its stdin closes, frees it and exits 0. Built against libcudart
// (astr-test-cuda-ipc-export) and against the emulated device's trainer library
// (astr-test-cuda-ipc-export-emu, lib/libastr_cuda_ipc_emu.so); used by cuda_ipc_cases.cc.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/gpu/cuda_ipc_pattern.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--help") == 0) {
    std::printf(
        "Usage: astr-test-cuda-ipc-export%s BYTES\n\n"
        "The other process of the op table's cuda_ipc_read cases (tests/gpu/cuda_ipc_cases.cc):\n"
        "allocates BYTES of device memory, fills it with a known pattern, prints the buffer's\n"
        "cudaIpcMemHandle_t in hex on one line, and frees it and exits 0 once its stdin closes.\n",
        std::strstr(argv[0], "-emu") != nullptr ? "-emu" : "");
    return 0;
  }
  if (argc != 2 || std::strtoull(argv[1], nullptr, 10) == 0) {
    std::fprintf(stderr, "usage: %s BYTES (see --help)\n", argv[0]);
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = astr::gputest::IpcPattern(i);
  void* device = nullptr;
  cudaError_t e = cudaMalloc(&device, bytes);
  if (e == cudaSuccess) e = cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice);
  cudaIpcMemHandle_t handle;
  if (e == cudaSuccess) e = cudaIpcGetMemHandle(&handle, device);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", argv[0], cudaGetErrorString(e));
    return 1;
  }
  const auto* raw = reinterpret_cast<const unsigned char*>(&handle);
  for (size_t i = 0; i < sizeof(handle); ++i) std::printf("%02x", raw[i]);
  std::printf("\n");
  std::fflush(stdout);
  while (std::fgetc(stdin) != EOF) {
  }
  cudaFree(device);
  return 0;
}
