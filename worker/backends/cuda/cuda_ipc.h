// The CUDA backend's side of CUDA IPC weight updates (docs/rl.md "CUDA IPC"): a trainer on the same
// machine shares its device buffers by cudaIpcGetMemHandle; the backend opens each one, copies the
// update's bytes to the host piece by piece, and the worker's staging checks and commits them like
// any other update.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/base/status.h"
#include "worker/backend.h"

namespace astr::cuda {

// Opens the buffer of `handle` (a cudaIpcMemHandle_t, 64 bytes) on the current device, `bytes` of
// which Read may read. INVALID_ARGUMENT for a handle of another size or one the driver refuses (a
// buffer that was freed, a process that is gone, another machine's handle).
StatusOr<std::unique_ptr<IpcBuffer>> OpenCudaIpcBuffer(const std::string& handle, uint64_t bytes);

}  // namespace astr::cuda
