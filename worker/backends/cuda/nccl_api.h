// The part of NCCL's C ABI that astr uses (nccl.h; unchanged since NCCL 2.4), declared here so
// that the CUDA plugin builds without NCCL's headers and loads libnccl only when a weight-update
// group is made (docs/rl.md "NCCL broadcast"). The emulated NCCL (kernels/cuda/emu/nccl_emu.cc)
// exports the same symbols with these signatures.
#pragma once

#include <cstddef>

namespace astr::nccl {

constexpr int kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct UniqueId {
  char internal[kUniqueIdBytes];
};
using Comm = void*;    // ncclComm_t
using Stream = void*;  // cudaStream_t

// ncclResult_t
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

// ncclDataType_t: the ones astr receives.
constexpr int kUint8 = 1;
constexpr int kFloat16 = 6;
constexpr int kFloat32 = 7;
constexpr int kBfloat16 = 9;
// ncclRedOp_t
constexpr int kSum = 0;

extern "C" {
using GetVersionFn = int (*)(int* version);
using GetUniqueIdFn = int (*)(UniqueId* id);
using CommInitRankFn = int (*)(Comm* comm, int nranks, UniqueId id, int rank);
using BroadcastFn = int (*)(const void* sendbuff, void* recvbuff, size_t count, int datatype,
                            int root, Comm comm, Stream stream);
using AllReduceFn = int (*)(const void* sendbuff, void* recvbuff, size_t count, int datatype,
                            int op, Comm comm, Stream stream);
using CommAbortFn = int (*)(Comm comm);
using CommDestroyFn = int (*)(Comm comm);
using CommGetAsyncErrorFn = int (*)(Comm comm, int* async_error);
using GetErrorStringFn = const char* (*)(int result);
using GetLastErrorFn = const char* (*)(Comm comm);
}

}  // namespace astr::nccl
