// Runs emulated kernel grids: the block pool (OS threads), each block's fibers and their
// rendezvous. Internal to the emulator (runtime.cc enqueues kernels; executor.cc runs them).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "kernels/cuda/emu/emu.h"

namespace astr::emu {

// One launch, shared by the OS threads that run its blocks.
struct KernelRun {
  LaunchConfig config;
  std::function<void()> body;
  std::atomic<int64_t> next_block{0};
  int64_t num_blocks = 0;
  std::atomic<bool> failed{false};
  std::mutex fault_mu;
  std::string fault;  // the first fault's text
  cudaError_t fault_code = cudaSuccess;
};

// Runs every block of the grid on the pool and returns when all are done. The first fault (if
// any) is in run.fault / run.fault_code; the remaining blocks are skipped.
void ExecuteKernel(KernelRun& run);

// The number of OS threads blocks run on.
int PoolThreads();

}  // namespace astr::emu
