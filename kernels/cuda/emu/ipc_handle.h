// The emulated device's CUDA IPC handles (docs/cuda.md "The emulated device"): what
// cudaIpcGetMemHandle of the trainer-side library (ipc_emu.cc, lib/libastr_cuda_ipc_emu.so) writes
// into a cudaIpcMemHandle_t and the emulated runtime's cudaIpcOpenMemHandle (runtime.cc) reads.
// Emulated device memory that can be shared is a memfd: another process of the same user opens it
// as /proc/PID/fd/FD and maps it, as the driver maps a real buffer into a second context.
#pragma once

#include <cstdint>
#include <cstring>

namespace astr::emu {

struct IpcHandle {
  char magic[8];    // kIpcMagic
  int32_t pid;      // the exporting process
  int32_t fd;       // its memfd holding the allocation
  uint64_t bytes;   // the allocation's size
  uint64_t offset;  // of the exported pointer from the allocation's start
  char reserved[32];
};
static_assert(sizeof(IpcHandle) == 64, "a cudaIpcMemHandle_t is 64 bytes");

inline constexpr char kIpcMagic[8] = {'a', 's', 't', 'r', 'i', 'p', 'c', '1'};

inline bool IsIpcHandle(const IpcHandle& h) {
  return std::memcmp(h.magic, kIpcMagic, sizeof(kIpcMagic)) == 0 && h.pid > 0 && h.fd >= 0 &&
         h.bytes > 0 && h.offset < h.bytes;
}

}  // namespace astr::emu
