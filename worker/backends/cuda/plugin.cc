// The CUDA backend plugin's C entry points (see worker/backend_loader.h). Built as
// lib/libastr_backend_cuda.so; the worker dlopen()s it only when CUDA may be usable.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "worker/backend_loader.h"
#include "worker/backends/cuda/cuda_backend.h"

namespace {

void Fill(char* out, int size, const std::string& text) {
  if (out == nullptr || size <= 0) return;
  std::snprintf(out, static_cast<size_t>(size), "%s", text.c_str());
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int astr_cuda_plugin_abi() { return astr::kCudaPluginAbi; }

__attribute__((visibility("default"))) int astr_cuda_plugin_probe(char* why, int why_size) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    Fill(why, why_size, cudaGetErrorString(err));
    return 0;
  }
  if (count == 0) {
    Fill(why, why_size, "the CUDA runtime sees no device");
    return 0;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    Fill(why, why_size, "cudaGetDeviceProperties failed");
    return 0;
  }
  if (prop.major < 8) {
    Fill(why, why_size,
         std::string(prop.name) + " has compute capability " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor) + "; the CUDA backend needs 8.0 or newer (bf16 MMA)");
    return 0;
  }
  Fill(why, why_size, prop.name);  // the device it will use
  return count;
}

// 1 when this plugin runs on the emulated device (kernels/cuda/emu, the CPU running the GPU
// kernels): `--backend auto` never picks it. Optional for the loader (absent: 0).
__attribute__((visibility("default"))) int astr_cuda_plugin_emulated() {
#if defined(ASTR_CUDA_EMU)
  return 1;
#else
  return 0;
#endif
}

__attribute__((visibility("default"))) astr::Backend* astr_cuda_plugin_create(
    const astr::model::ModelFile* file, const astr::BackendOptions* options, char* error,
    int error_size) {
  try {
    auto backend = astr::cuda::CudaBackend::Create(*file, *options);
    if (!backend.ok()) {
      Fill(error, error_size, backend.status().message());
      return nullptr;
    }
    return backend->release();
  } catch (const std::exception& e) {
    Fill(error, error_size, std::string("exception: ") + e.what());
    return nullptr;
  }
}

}  // extern "C"
