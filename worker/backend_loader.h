// Picks and creates the backend: the CPU backend (always built) or the CUDA backend, a plugin
// library (lib/libastr_backend_cuda.so) loaded with dlopen() only when it is asked for or a GPU may
// be present, so a CPU-only machine needs no CUDA libraries.
//
//   auto  the CUDA backend when the plugin loads and a CUDA device is usable; else the CPU backend,
//         and `note` says why CUDA was not used (the caller logs it)
//   cpu   the CPU backend
//   cuda  the CUDA backend, or an error saying why it cannot run (never a silent fallback)
#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "worker/backend.h"

namespace astr {

enum class BackendKind { kAuto, kCpu, kCuda };

// "auto", "cpu" or "cuda"; the error names `source` (e.g. "--backend (from ASTR_BACKEND)").
StatusOr<BackendKind> ParseBackendKind(const std::string& value, const std::string& source);
const char* BackendKindName(BackendKind kind);

// The backend a binary was asked for: `flag_value` when --backend was given, else $ASTR_BACKEND
// when set, else "auto". *source names where it came from ("--backend" or
// "--backend (from ASTR_BACKEND)"), for error messages.
std::string RequestedBackend(const std::string& flag_value, bool flag_given, std::string* source);

// True if the NVIDIA kernel driver is present (/dev/nvidiactl or /proc/driver/nvidia): without it
// no CUDA device can exist, and the plugin is not even loaded.
bool NvidiaDriverPresent();

// Why the CUDA backend cannot run here, or "" if it may: not built, no NVIDIA driver, the plugin
// failed to load (its dlerror), or no usable device (the CUDA runtime's error). Loads the plugin
// (once per process) when the driver is present.
std::string CudaUnavailableReason();
// The CUDA device the plugin probed ("NVIDIA H200", "emulated sm_90 (H200 profile)"); "" when the
// plugin is not loaded or no device is usable. Loads the plugin like CudaUnavailableReason.
std::string CudaDeviceName();

// Creates the backend of `kind`. For kAuto, *note (if non-null) gets the reason the CPU backend was
// chosen ("" when CUDA was).
StatusOr<std::unique_ptr<Backend>> CreateBackend(const model::ModelFile& file,
                                                 const BackendOptions& options, BackendKind kind,
                                                 std::string* note = nullptr);

// The plugin's C entry points (worker/backends/cuda/plugin.cc). The ABI value changes whenever the
// types passed across (BackendOptions, ModelFile, Backend) change shape.
inline constexpr int kCudaPluginAbi = 2;
using CudaPluginAbiFn = int (*)();
// Fills why[0..why_size) and returns 0 if no device is usable; else the device count.
using CudaPluginProbeFn = int (*)(char* why, int why_size);
// Creates the backend; on failure returns null and fills error[0..error_size).
using CudaPluginCreateFn = Backend* (*)(const model::ModelFile* file, const BackendOptions* options,
                                        char* error, int error_size);

}  // namespace astr
