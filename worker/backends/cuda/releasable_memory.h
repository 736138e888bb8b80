// Device memory that can be given back and taken again at the same addresses (ReleaseMemory /
// ResumeMemory, docs/rl.md "Releasing GPU memory"): a range of virtual addresses is reserved once
// and physical memory is mapped into it in chunks (the driver's virtual memory management,
// cuMemAddressReserve / cuMemCreate / cuMemMap, reached through cudaGetDriverEntryPoint so nothing
// links libcuda). Release unmaps and frees the physical memory, keeping the addresses; Restore
// maps new physical memory there. Every pointer into the arena, including those captured in CUDA
// graphs, stays valid; the contents after Restore are undefined until the owner rewrites them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace astr::cuda {

class ReleasableArena {
 public:
  // Reserves `reserve_bytes` of addresses on the current device. UNIMPLEMENTED when the driver
  // has no virtual memory management (the caller then allocates with cudaMalloc).
  static StatusOr<std::unique_ptr<ReleasableArena>> Create(size_t reserve_bytes, std::string what);
  ~ReleasableArena();
  ReleasableArena(const ReleasableArena&) = delete;
  ReleasableArena& operator=(const ReleasableArena&) = delete;

  // `bytes` at a 256-byte aligned address after the previous ones, mapping memory as needed.
  // RESOURCE_EXHAUSTED when the device is out of memory or the reservation is full.
  StatusOr<void*> Take(size_t bytes);
  // Unmaps and frees every chunk (after synchronizing the device); returns the bytes freed.
  StatusOr<size_t> Release();
  // Maps physical memory again at the same addresses; returns the bytes mapped.
  StatusOr<size_t> Restore();

  // The first byte (Take's first piece starts here).
  void* base() const { return reinterpret_cast<void*>(base_); }
  bool released() const { return released_; }
  size_t mapped_bytes() const { return mapped_; }
  size_t used_bytes() const { return used_; }
  const std::string& what() const { return what_; }

 private:
  struct Chunk {
    size_t offset = 0, bytes = 0;
    unsigned long long handle = 0;
  };
  ReleasableArena() = default;
  Status MapChunk(Chunk* chunk);

  std::string what_;
  int device_ = 0;
  uintptr_t base_ = 0;
  size_t reserved_ = 0, granularity_ = 0;
  size_t used_ = 0, mapped_ = 0;
  bool released_ = false;
  std::vector<Chunk> chunks_;
};

}  // namespace astr::cuda
