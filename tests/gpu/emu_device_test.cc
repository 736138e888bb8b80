// The emulated CUDA device's own semantics (kernels/cuda/emu), checked with small kernels written
// here: what it must catch (a barrier not every thread reaches, lanes that disagree, a read of a
// cp.async destination before its wait, launches past the shared-memory limit, unsafe calls during
// capture), and what it must compute (mma.sync and ldmatrix against a plain matrix product on the
// host, shuffles, graphs replaying their arguments by value, streams that run only when waited
// for). Compiled like the kernels: device.h force-included, ASTR_CUDA_EMU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/model/tensor_dtype.h"
#include "kernels/cuda/emu/emu.h"
#include "kernels/cuda/emu/profiles.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ptx.cuh"

namespace {

namespace model = astr::model;
using astr::cuda::ptx::CpAsync16;
using astr::cuda::ptx::CpAsyncCommit;
using astr::cuda::ptx::CpAsyncWait;
using astr::cuda::ptx::LdMatrixX4;
using astr::cuda::ptx::LdMatrixX4Trans;
using astr::cuda::ptx::Mma16816;
using astr::cuda::ptx::SmemAddr;

// Resets the sticky error a deliberate fault leaves behind.
class EmuDevice : public ::testing::Test {
 protected:
  void TearDown() override { cudaDeviceReset(); }
};

// ---- Barriers and collectives ------------------------------------------------------------------

__global__ void DivergentBarrier(int* out) {
  if (threadIdx.x < 40) __syncthreads();  // threads 40.. exit without reaching it
  if (threadIdx.x == 0) *out = 1;
}

TEST_F(EmuDevice, BarrierNotReachedByEveryThreadIsALaunchFailure) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
  ASTR_LAUNCH_KERNEL(DivergentBarrier, 1, 64, 0, nullptr)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);  // the launch itself is valid
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(astr::emu::LastKernelFault().find("barrier error"), std::string::npos)
      << astr::emu::LastKernelFault();
  EXPECT_NE(astr::emu::LastKernelFault().find("DivergentBarrier"), std::string::npos);
  // Sticky: every later call fails until the context is reset.
  EXPECT_EQ(cudaMemset(d, 0, 4), cudaErrorLaunchFailure);
  cudaDeviceReset();
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

__global__ void MaskDisagreement(float* out) {
  const unsigned mask = threadIdx.x < 16 ? 0x0000ffffu : 0xffffffffu;
  out[threadIdx.x] = __shfl_xor_sync(mask, 1.0f * threadIdx.x, 1);
}

TEST_F(EmuDevice, LanesThatDisagreeOnTheMaskFault) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 32 * sizeof(float)), cudaSuccess);
  ASTR_LAUNCH_KERNEL(MaskDisagreement, 1, 32, 0, nullptr)(d);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(astr::emu::LastKernelFault().find("disagree on the mask"), std::string::npos)
      << astr::emu::LastKernelFault();
  cudaDeviceReset();
  cudaFree(d);
}

__global__ void ExitedLaneInShuffle(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 2.0f, 1);
}

TEST_F(EmuDevice, AFullMaskShuffleWithAnExitedLaneFaults) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 32 * sizeof(float)), cudaSuccess);
  ASTR_LAUNCH_KERNEL(ExitedLaneInShuffle, 1, 32, 0, nullptr)(d);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(astr::emu::LastKernelFault().find("__shfl_xor_sync"), std::string::npos)
      << astr::emu::LastKernelFault();
  cudaDeviceReset();
  cudaFree(d);
}

template <typename T>
__global__ void ShuffleXor(const T* in, T* out, int lane_mask) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = __shfl_xor_sync(0xffffffffu, in[i], lane_mask);
}

template <typename T>
void CheckShuffle() {
  const int n = 128;
  std::vector<T> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<T>(i * 3 + 1);
  T *din = nullptr, *dout = nullptr;
  ASSERT_EQ(cudaMalloc(&din, n * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, n * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(din, in.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  for (int m : {1, 2, 16, 31}) {
    ASTR_LAUNCH_KERNEL(ShuffleXor<T>, 2, 64, 0, nullptr)(din, dout, m);
    ASSERT_EQ(cudaMemcpy(out.data(), dout, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < n; ++i) {
      const int src = (i & ~31) | ((i & 31) ^ m);
      ASSERT_EQ(out[i], in[src]) << "element " << i << " lane mask " << m;
    }
  }
  cudaFree(din);
  cudaFree(dout);
}

TEST_F(EmuDevice, ShuffleXorMovesFloatsDoublesAnd64BitIntegers) {
  CheckShuffle<float>();
  CheckShuffle<double>();
  CheckShuffle<uint64_t>();
}

// ---- Tensor-core fragments --------------------------------------------------------------------

// One warp: A [16][16] and B^T [8][16] (B[k][n] = Bt[n][k]) in shared memory through cp.async,
// fragments by ldmatrix (A: x4; B: x4 over two 8-column blocks), D = A B by two mma.sync.
__global__ void MmaTile(const uint16_t* a /*[16][16]*/, const uint16_t* bt /*[16][16]: two n8*/,
                        float* d /*[16][16]*/) {
  ASTR_DYNAMIC_SMEM(smem);
  auto* sa = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sb = sa + 16 * 16;
  const int lane = threadIdx.x;
  for (int i = lane; i < 32; i += 32) {  // 32 rows of 16 bytes each... two chunks per row
    CpAsync16(SmemAddr(sa + (i / 2) * 16 + (i % 2) * 8), a + (i / 2) * 16 + (i % 2) * 8, 16);
    CpAsync16(SmemAddr(sb + (i / 2) * 16 + (i % 2) * 8), bt + (i / 2) * 16 + (i % 2) * 8, 16);
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncwarp();
  const int mat = lane >> 3, mrow = lane & 7;
  uint32_t fa[4], fb[4];
  LdMatrixX4(fa, SmemAddr(sa + (mrow + (mat & 1) * 8) * 16 + (mat >> 1) * 8));
  // Bt rows are n, columns k: the non-transposed blocks are the B fragments.
  LdMatrixX4(fb, SmemAddr(sb + (mrow + (mat >> 1) * 8) * 16 + (mat & 1) * 8));
  float acc[2][4] = {};
  Mma16816(acc[0], fa, fb[0], fb[1]);
  Mma16816(acc[1], fa, fb[2], fb[3]);
  const int g = lane >> 2, t = lane & 3;
  for (int nb = 0; nb < 2; ++nb) {
    d[g * 16 + nb * 8 + 2 * t] = acc[nb][0];
    d[g * 16 + nb * 8 + 2 * t + 1] = acc[nb][1];
    d[(g + 8) * 16 + nb * 8 + 2 * t] = acc[nb][2];
    d[(g + 8) * 16 + nb * 8 + 2 * t + 1] = acc[nb][3];
  }
}

TEST_F(EmuDevice, MmaWithLdmatrixFragmentsIsTheMatrixProduct) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> a(256), bt(256);
  for (auto& x : a) x = model::F32ToBf16(u(rng));
  for (auto& x : bt) x = model::F32ToBf16(u(rng));
  uint16_t *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  ASSERT_EQ(cudaMalloc(&da, 512), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, 512), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dd, 1024), cudaSuccess);
  cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice);
  cudaMemcpy(db, bt.data(), 512, cudaMemcpyHostToDevice);
  ASTR_LAUNCH_KERNEL(MmaTile, 1, 32, 1024, nullptr)(da, db, dd);
  std::vector<float> d(256);
  ASSERT_EQ(cudaMemcpy(d.data(), dd, 1024, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      double want = 0.0;
      for (int k = 0; k < 16; ++k)
        want += double{model::Bf16ToF32(a[m * 16 + k])} * model::Bf16ToF32(bt[n * 16 + k]);
      EXPECT_NEAR(d[m * 16 + n], want, 1e-5) << "D[" << m << "][" << n << "]";
    }
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
}

// ldmatrix.trans: register i of lane l holds rows 2(l%4), +1 of column l/4 of matrix i.
__global__ void LdMatrixTransDump(const uint16_t* m /*[32][8]: four 8x8*/, uint32_t* out) {
  ASTR_DYNAMIC_SMEM(smem);
  auto* s = reinterpret_cast<uint16_t*>(smem);
  const int lane = threadIdx.x;
  for (int i = 0; i < 8; ++i) s[lane * 8 + i] = m[lane * 8 + i];
  __syncwarp();
  uint32_t r[4];
  LdMatrixX4Trans(r, SmemAddr(s + lane * 8));  // lane 8i + j: row j of matrix i
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

TEST_F(EmuDevice, LdMatrixTransHoldsTheTransposedFragment) {
  std::vector<uint16_t> m(256);
  for (int i = 0; i < 256; ++i) m[i] = static_cast<uint16_t>(i);
  uint16_t* dm = nullptr;
  uint32_t* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dm, 512), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, 512), cudaSuccess);
  cudaMemcpy(dm, m.data(), 512, cudaMemcpyHostToDevice);
  ASTR_LAUNCH_KERNEL(LdMatrixTransDump, 1, 32, 512, nullptr)(dm, dout);
  std::vector<uint32_t> out(128);
  ASSERT_EQ(cudaMemcpy(out.data(), dout, 512, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) {
      const int col = l / 4, r0 = 2 * (l % 4);
      const uint32_t want =
          m[(8 * i + r0) * 8 + col] | (uint32_t{m[(8 * i + r0 + 1) * 8 + col]} << 16);
      ASSERT_EQ(out[l * 4 + i], want) << "lane " << l << " register " << i;
    }
  }
  cudaFree(dm);
  cudaFree(dout);
}

// ---- Shared memory and cp.async ------------------------------------------------------------

// Reads its cp.async destination before and after the wait.
__global__ void ReadBeforeWait(const float* src, float* before, float* after) {
  ASTR_DYNAMIC_SMEM(smem);
  auto* s = reinterpret_cast<float*>(smem);
  CpAsync16(SmemAddr(s + 4 * threadIdx.x), src + 4 * threadIdx.x, 16);
  CpAsyncCommit();
  __syncthreads();  // a barrier does not land copies
  before[threadIdx.x] = s[4 * threadIdx.x];
  CpAsyncWait<0>();
  after[threadIdx.x] = s[4 * threadIdx.x];
}

TEST_F(EmuDevice, CpAsyncLandsOnlyAtItsWaitAndSharedMemoryStartsPoisoned) {
  std::vector<float> src(4 * 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  float *dsrc = nullptr, *dbefore = nullptr, *dafter = nullptr;
  ASSERT_EQ(cudaMalloc(&dsrc, src.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dbefore, 64 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dafter, 64 * 4), cudaSuccess);
  cudaMemcpy(dsrc, src.data(), src.size() * 4, cudaMemcpyHostToDevice);
  ASTR_LAUNCH_KERNEL(ReadBeforeWait, 1, 64, src.size() * 4, nullptr)(dsrc, dbefore, dafter);
  std::vector<float> before(64), after(64);
  cudaMemcpy(before.data(), dbefore, 256, cudaMemcpyDeviceToHost);
  cudaMemcpy(after.data(), dafter, 256, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 64; ++i) {
    EXPECT_TRUE(std::isnan(before[i])) << i;  // poison, as a race would read garbage
    EXPECT_EQ(after[i], src[4 * i]) << i;
  }
  cudaFree(dsrc);
  cudaFree(dbefore);
  cudaFree(dafter);
}

__global__ void CopyPastSharedMemory(const float* src) {
  ASTR_DYNAMIC_SMEM(smem);
  CpAsync16(SmemAddr(smem + 64 * threadIdx.x), src, 16);  // 16 * 64 = 1024 > 512 bytes
  CpAsyncCommit();
  CpAsyncWait<0>();
}

TEST_F(EmuDevice, CpAsyncPastTheDynamicSharedMemoryIsAnIllegalAddress) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  ASTR_LAUNCH_KERNEL(CopyPastSharedMemory, 1, 16, 512, nullptr)(d);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_NE(astr::emu::LastKernelFault().find("cp.async"), std::string::npos);
  cudaDeviceReset();
  cudaFree(d);
}

__global__ void UsesSharedMemory(float* out) {
  ASTR_DYNAMIC_SMEM(smem);
  reinterpret_cast<float*>(smem)[threadIdx.x] = 1.0f;
  out[threadIdx.x] = reinterpret_cast<float*>(smem)[threadIdx.x];
}

TEST_F(EmuDevice, DynamicSharedMemoryLimitsFollowTheProfile) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 256), cudaSuccess);
  const size_t optin = astr::emu::CurrentProfile().smem_optin;
  int attr = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&attr, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  EXPECT_EQ(static_cast<size_t>(attr), optin);
  // Above 48 KiB without opting in: refused at launch.
  ASTR_LAUNCH_KERNEL(UsesSharedMemory, 1, 32, 64 * 1024, nullptr)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  // Opting in past the profile's limit fails; up to it, the launch runs.
  EXPECT_EQ(cudaFuncSetAttribute(UsesSharedMemory, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(optin) + 16),
            cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(UsesSharedMemory, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(optin)),
            cudaSuccess);
  cudaGetLastError();
  ASTR_LAUNCH_KERNEL(UsesSharedMemory, 1, 32, optin, nullptr)(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASTR_LAUNCH_KERNEL(UsesSharedMemory, 1, 32, optin + 16, nullptr)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Too many threads per block.
  ASTR_LAUNCH_KERNEL(UsesSharedMemory, 1, 2048, 0, nullptr)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudaFree(d);
}

// ---- Streams, copies, memory ----------------------------------------------------------------

__global__ void Fill(float* p, float v, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}

TEST_F(EmuDevice, AnAsyncCopyToPinnedMemoryLandsOnlyOnceTheStreamIsSynchronized) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float* d = nullptr;
  float* h = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64 * 4), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&h, 64 * 4), cudaSuccess);
  for (int i = 0; i < 64; ++i) h[i] = -1.0f;
  ASTR_LAUNCH_KERNEL(Fill, 1, 32, 0, s)(d, 3.0f, 64);
  ASSERT_EQ(cudaMemcpyAsync(h, d, 64 * 4, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(h[0], -1.0f);  // not synchronized: the old bytes
  EXPECT_EQ(h[63], -1.0f);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(h[0], 3.0f);
  EXPECT_EQ(h[63], 3.0f);
  // To pageable memory the copy is synchronous, as on hardware.
  std::vector<float> pageable(64, -1.0f);
  ASTR_LAUNCH_KERNEL(Fill, 1, 32, 0, s)(d, 5.0f, 64);
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), d, 64 * 4, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(pageable[10], 5.0f);
  cudaFreeHost(h);
  cudaFree(d);
  cudaStreamDestroy(s);
}

TEST_F(EmuDevice, MemoryComesFromTheProfileAndGoesBack) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  EXPECT_EQ(total, astr::emu::CurrentProfile().total_mem);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  size_t free1 = 0;
  cudaMemGetInfo(&free1, &total);
  EXPECT_EQ(free0 - free1, size_t{1} << 20);
  EXPECT_EQ(cudaMalloc(&p, free1 + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);  // not sticky
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  // Copies must name device memory on their device side.
  std::vector<char> host(16);
  EXPECT_EQ(cudaMemcpy(host.data(), host.data() + 8, 8, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
  cudaGetLastError();
}

// ---- Capture and graphs -----------------------------------------------------------------------

TEST_F(EmuDevice, GraphsReplayTheirLaunchesByValue) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64 * 4), cudaSuccess);
  float value = 7.0f;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASTR_LAUNCH_KERNEL(Fill, 1, 32, 0, s)(d, value, 64);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  value = 9.0f;  // arguments were captured by value
  std::vector<float> h(64, 0.0f);
  ASSERT_EQ(cudaMemcpy(d, h.data(), 256, cudaMemcpyHostToDevice), cudaSuccess);  // not run yet
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), d, 256, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 7.0f);
  EXPECT_EQ(h[63], 7.0f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d);
  cudaStreamDestroy(s);
}

TEST_F(EmuDevice, UnsafeCallsDuringCaptureFailAndInvalidateIt) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // Global mode: cudaMalloc is prohibited.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  // Any mode: synchronizing the capturing stream.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  // Relaxed mode allows cudaMalloc, as the real runtime does.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  cudaFree(p);
  cudaGetLastError();
  cudaStreamDestroy(s);
}

TEST_F(EmuDevice, InjectedFailuresHitTheNamedCall) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  astr::emu::InjectFailure("cudaGraphUpload", 1, cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGraphUpload(exec, s), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGraphUpload(exec, s), cudaSuccess);  // once
  cudaGetLastError();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(EmuProfiles, EveryProfileTheIssueNamesExists) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(std::string(prop.name).rfind("emulated sm_", 0), 0u) << prop.name;
  int found = 0;
  for (const auto& p : astr::emu::Profiles()) {
    if (p.key == "h200" || p.key == "h100") {
      EXPECT_EQ(p.sms, 132);
      EXPECT_EQ(p.smem_optin, 227u * 1024);
      ++found;
    }
    if (p.key == "a100") {
      EXPECT_EQ(p.smem_optin, 163u * 1024);
      ++found;
    }
    if (p.key == "l40s" || p.key == "l4") {
      EXPECT_EQ(p.smem_optin, 99u * 1024);
      ++found;
    }
  }
  EXPECT_EQ(found, 5);
}

}  // namespace
