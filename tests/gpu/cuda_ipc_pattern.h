// The bytes astr-test-cuda-ipc-export writes (cuda_ipc_export.cc) and cuda_ipc_cases.cc expects.
#pragma once

#include <cstdint>

namespace astr::gputest {

inline uint8_t IpcPattern(uint64_t i) { return static_cast<uint8_t>((i * 131 + 7) ^ (i >> 9)); }

}  // namespace astr::gputest
