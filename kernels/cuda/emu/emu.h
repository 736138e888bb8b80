// The emulated CUDA device (docs/cuda.md, "The emulated device"): what the emulated kernels
// (device.h, ptx_emu.h) and the emulated runtime (runtime.cc, cublaslt.cc) share.
//
// A kernel launch runs its grid's blocks on a pool of OS threads (ASTR_CUDA_EMU_THREADS, default:
// the machine's cores). The threads of a block are cooperative fibers (Boost.Context) on one OS
// thread: a fiber runs until it reaches a synchronization point (__syncthreads, a warp collective)
// or returns, and the block's scheduler resumes the others. Barriers and warp collectives are
// rendezvous: a barrier that not every thread of the block reaches, or a collective whose lanes
// disagree on the operation or the mask, is a kernel error (a sticky cudaErrorLaunchFailure, with
// the kernel, block and thread on stderr), as compute-sanitizer's synccheck would report it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace astr::emu {

// ---- Launches -----------------------------------------------------------------------------

struct LaunchConfig {
  const void* func = nullptr;  // the kernel (for cudaFuncSetAttribute's limits)
  const char* name = "";       // the kernel's expression as written at the launch site
  dim3 grid;
  dim3 block;
  size_t smem = 0;  // dynamic shared memory, bytes
  cudaStream_t stream = nullptr;
};

// Validates the launch (block and grid extents, dynamic shared memory against the profile and the
// kernel's cudaFuncAttributeMaxDynamicSharedMemorySize) and enqueues it on the stream, or records
// it into the stream's capture. `body` runs one thread of the kernel (called once per thread, in
// its fiber). Errors are returned through cudaGetLastError, as for a <<<...>>> launch.
void EnqueueKernel(const LaunchConfig& config, std::function<void()> body);

// ---- Inside a kernel ----------------------------------------------------------------------

struct Lane;
struct Block;
extern __thread Lane* tls_lane;  // the emulated thread running on this OS thread
extern __thread Block* tls_block;

const uint3& ThreadIdx();
const uint3& BlockIdx();
const dim3& BlockDim();
const dim3& GridDim();

void SyncThreads();
void SyncWarp(unsigned mask);
// __shfl_xor_sync on up to 64 bits.
uint64_t ShflXor(unsigned mask, uint64_t bits, int lane_mask, int width);
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16; addr: a shared-memory offset (SharedOffset).
void LdMatrixX4(uint32_t (&r)[4], uint32_t addr, bool trans);
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d += a * b.
void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
// The block's dynamic shared memory (poisoned with 0xFF bytes, NaN, when the block starts).
unsigned char* DynamicShared();
// __cvta_generic_to_shared: the offset of p in the block's dynamic shared memory.
uint32_t SharedOffset(const void* p);
// cp.async.cg.shared.global [dst], [src], 16, src_bytes: recorded now, landed only when this
// thread waits for its group (cp.async.wait_group), never earlier.
void CpAsync16(uint32_t dst, const void* src, int src_bytes);
void CpAsyncCommit();
void CpAsyncWait(int pending);
// Ends the kernel with an error naming the thread (a device-side fault).
[[noreturn]] void KernelFault(const std::string& what);

// ---- Runtime services the kernels and cuBLASLt need -----------------------------------------

// Enqueues a host function on the stream (or records it into the stream's capture): the
// emulated cuBLASLt's matmuls. Returns the error a stream-ordered call would.
cudaError_t EnqueueHostOp(cudaStream_t stream, std::function<void()> op);
// The sticky error, if a kernel has faulted.
cudaError_t StickyError();

// ---- Test hooks ---------------------------------------------------------------------------

// The text of the last kernel fault ("" if none).
std::string LastKernelFault();
// After `skip` more successful calls, makes the next `count` calls of runtime function `api` (e.g.
// "cudaGraphUpload", "cudaMalloc") fail with `error` (also from the environment:
// ASTR_CUDA_EMU_FAIL=api:count[:error_code[:skip]],...).
void InjectFailure(const std::string& api, int count, cudaError_t error, int skip = 0);

}  // namespace astr::emu
