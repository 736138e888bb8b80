// The CUDA backend's side of an NCCL weight-update group (docs/rl.md "NCCL broadcast"): libnccl is
// dlopen()ed when the first group is made (never at start, so a machine without NCCL serves), from
// ASTR_NCCL_LIBRARY or else libnccl.so.2 (the emulated plugin: lib/libastr_nccl_emu.so beside it).
// Each broadcast lands in one device buffer, is copied to the host and handed to the worker's
// staging, which checks and commits it like any other update.
#pragma once

#include <memory>

#include "common/base/status.h"
#include "worker/backend.h"

namespace astr::cuda {

// Joins the group of `spec` on device memory of the current device. FAILED_PRECONDITION when
// libnccl cannot be loaded (naming the path and dlerror); UNAVAILABLE when joining fails or times
// out.
StatusOr<std::unique_ptr<WeightReceiver>> JoinNcclWeightGroup(const WeightGroupSpec& spec);

}  // namespace astr::cuda
