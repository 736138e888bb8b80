#include "worker/backend_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#include "common/base/logging.h"
#include "common/model/model_file.h"

#ifndef ASTR_HAVE_CUDA_BUILD
#define ASTR_HAVE_CUDA_BUILD 0
#endif

namespace astr {
namespace {

struct CudaPlugin {
  std::string unavailable;  // "" when usable
  CudaPluginCreateFn create = nullptr;
  bool emulated = false;  // the emulated device (kernels/cuda/emu): never chosen by auto
  std::string device;     // the device's name, as the probe reports it
};

// <directory of this executable>/../lib/<plugin>, or $ASTR_CUDA_PLUGIN.
std::string PluginPath() {
  const char* env = std::getenv("ASTR_CUDA_PLUGIN");
  if (env != nullptr && *env != '\0') return env;
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return ASTR_CUDA_PLUGIN_NAME;
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/../lib/" ASTR_CUDA_PLUGIN_NAME;
}

CudaPlugin LoadPlugin() {
  CudaPlugin p;
  if (!ASTR_HAVE_CUDA_BUILD && std::getenv("ASTR_CUDA_PLUGIN") == nullptr) {
    p.unavailable = "this build has no CUDA backend (built without nvcc)";
    return p;
  }
  if (!NvidiaDriverPresent() && std::getenv("ASTR_CUDA_PLUGIN") == nullptr) {
    p.unavailable = "no NVIDIA driver on this machine (/dev/nvidiactl missing)";
    return p;
  }
  const std::string path = PluginPath();
  // The plugin stays loaded for the life of the process: backends it creates run its code.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    p.unavailable = "cannot load the CUDA backend plugin: " + std::string(err ? err : path);
    return p;
  }
  auto abi = reinterpret_cast<CudaPluginAbiFn>(dlsym(handle, "astr_cuda_plugin_abi"));
  auto probe = reinterpret_cast<CudaPluginProbeFn>(dlsym(handle, "astr_cuda_plugin_probe"));
  auto create = reinterpret_cast<CudaPluginCreateFn>(dlsym(handle, "astr_cuda_plugin_create"));
  if (abi == nullptr || probe == nullptr || create == nullptr) {
    p.unavailable = path + " is not an astr CUDA backend plugin (entry points missing)";
    return p;
  }
  if (abi() != kCudaPluginAbi) {
    p.unavailable = path + " was built for another astr version (plugin ABI " +
                    std::to_string(abi()) + ", expected " + std::to_string(kCudaPluginAbi) + ")";
    return p;
  }
  char why[512] = {0};
  if (probe(why, sizeof(why)) <= 0) {
    p.unavailable = std::string("no usable CUDA device: ") + why;
    return p;
  }
  p.device = why;
  using EmulatedFn = int (*)();
  auto emulated = reinterpret_cast<EmulatedFn>(dlsym(handle, "astr_cuda_plugin_emulated"));
  p.emulated = emulated != nullptr && emulated() != 0;
  p.create = create;
  return p;
}

const CudaPlugin& Plugin() {
  static const CudaPlugin plugin = LoadPlugin();
  return plugin;
}

}  // namespace

bool NvidiaDriverPresent() {
  // Loading the plugin (and cuBLAS with it) without a driver would only cost start-up time.
  return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
}

StatusOr<BackendKind> ParseBackendKind(const std::string& value, const std::string& source) {
  if (value == "auto") return BackendKind::kAuto;
  if (value == "cpu") return BackendKind::kCpu;
  if (value == "cuda") return BackendKind::kCuda;
  return InvalidArgumentError(source + ": '" + value + "' is not one of auto, cpu, cuda");
}

const char* BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "?";
}

std::string RequestedBackend(const std::string& flag_value, bool flag_given, std::string* source) {
  if (flag_given) {
    *source = "--backend";
    return flag_value;
  }
  *source = "--backend (from ASTR_BACKEND)";
  const char* env = std::getenv("ASTR_BACKEND");
  return env != nullptr && *env != '\0' ? env : "auto";
}

std::string CudaUnavailableReason() { return Plugin().unavailable; }

std::string CudaDeviceName() { return Plugin().unavailable.empty() ? Plugin().device : ""; }

StatusOr<std::unique_ptr<Backend>> CreateBackend(const model::ModelFile& file,
                                                 const BackendOptions& options, BackendKind kind,
                                                 std::string* note) {
  if (note != nullptr) note->clear();
  if (kind == BackendKind::kCpu) return CreateCpuBackend(file, options);
  const CudaPlugin& plugin = Plugin();
  if (!plugin.unavailable.empty()) {
    if (kind == BackendKind::kCuda) {
      return FailedPreconditionError("the CUDA backend cannot run: " + plugin.unavailable);
    }
    if (note != nullptr) *note = plugin.unavailable;
    return CreateCpuBackend(file, options);
  }
  if (plugin.emulated) {
    if (kind == BackendKind::kAuto) {
      // The emulator runs the GPU kernels on the CPU, for tests: never a silent choice.
      if (note != nullptr) {
        *note = "ASTR_CUDA_PLUGIN names the emulated device (" + plugin.device +
                "); --backend auto never uses it (pass --backend cuda)";
      }
      return CreateCpuBackend(file, options);
    }
    LOG(WARNING) << "CUDA backend on the " << plugin.device
                 << ": the CPU runs the GPU kernels (for tests, not for serving)";
  }
  char error[1024] = {0};
  Backend* backend = plugin.create(&file, &options, error, sizeof(error));
  if (backend == nullptr) {
    // A usable device that fails to take the model (out of memory, unsupported shape) is an error
    // for auto too: silently serving from the CPU on a GPU machine would hide it.
    return FailedPreconditionError(std::string("creating the CUDA backend: ") + error);
  }
  return std::unique_ptr<Backend>(backend);
}

}  // namespace astr
