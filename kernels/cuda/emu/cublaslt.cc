// The emulated cuBLASLt: the one GEMM form the CUDA backend uses (worker/backends/cuda/gemm_lt.cc):
// D = alpha * op(A) * op(B) + beta * C, column-major, A and B bf16 with op(A) = Aᵀ and op(B) = B,
// C/D bf16 or f32 (the same layout and pointer), f32 compute and scale. It runs on the stream (and
// is captured into graphs by value, like a cuBLASLt kernel) and computes with the CPU backend's
// GEMM (kernels/cpu/gemm.h): x in f32, the weights packed as bf16, f32 accumulation.
#include <cublasLt.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "common/model/tensor_dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/emu/emu.h"
#include "kernels/cuda/emu/executor.h"

namespace {

struct Handle {
  int magic = 0x4c74;
};
struct MatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct Preference {
  uint64_t max_workspace = 0;
};

// The supported form, or false.
bool Supported(const MatmulDesc& d, const Layout& a, const Layout& b, const Layout& c,
               const Layout& dd) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F) return false;
  if (d.transa != CUBLAS_OP_T || d.transb != CUBLAS_OP_N) return false;
  if (a.type != CUDA_R_16BF || b.type != CUDA_R_16BF) return false;
  if (c.type != CUDA_R_16BF && c.type != CUDA_R_32F) return false;
  if (c.type != dd.type || c.rows != dd.rows || c.cols != dd.cols || c.ld != dd.ld) return false;
  // op(A): a.cols x a.rows (n x k); op(B): b.rows x b.cols (k x m); D: n x m.
  if (a.rows != b.rows || a.cols != c.rows || b.cols != c.cols) return false;
  if (a.ld < static_cast<int64_t>(a.rows) || b.ld < static_cast<int64_t>(b.rows) ||
      c.ld < static_cast<int64_t>(c.rows)) {
    return false;
  }
  return true;
}

std::mutex g_pool_mu;
astr::cpu::ThreadPool& GemmPool() {
  static auto* pool = new astr::cpu::ThreadPool(astr::emu::PoolThreads());
  return *pool;
}

void RunMatmul(const Layout a, const Layout b, const Layout c, float alpha, float beta,
               const uint16_t* A, const uint16_t* B, const void* C, void* D) {
  const int64_t k = static_cast<int64_t>(a.rows), n = static_cast<int64_t>(a.cols),
                m = static_cast<int64_t>(b.cols);
  // Weights w[n, k] = the columns of A; activations x[m, k] = the columns of B, in f32.
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(w.data() + i * k, A + i * a.ld, static_cast<size_t>(k) * 2);
  }
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t t = 0; t < k; ++t) x[j * k + t] = astr::model::Bf16ToF32(B[j * b.ld + t]);
  }
  const astr::cpu::PackedMatrix packed = astr::cpu::PackedMatrix::FromBf16(w.data(), n, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    astr::cpu::Gemm(x.data(), k, m, packed, y.data(), n, false, &GemmPool());
  }
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = j * c.ld + i;
      float v = alpha * y[j * n + i];
      if (beta != 0.0f) {
        v += beta * (c.type == CUDA_R_32F
                         ? static_cast<const float*>(C)[at]
                         : astr::model::Bf16ToF32(static_cast<const uint16_t*>(C)[at]));
      }
      if (c.type == CUDA_R_32F) {
        static_cast<float*>(D)[at] = v;
      } else {
        static_cast<uint16_t*>(D)[at] = astr::model::F32ToBf16(v);
      }
    }
  }
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new Handle());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new MatmulDesc();
  d->compute = compute;
  d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<MatmulDesc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  auto* d = reinterpret_cast<MatmulDesc*>(desc);
  if (d == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA || attr == CUBLASLT_MATMUL_DESC_TRANSB) {
    if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    int32_t v;
    std::memcpy(&v, buf, sizeof(v));
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) =
        static_cast<cublasOperation_t>(v);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulator knows only what astr sets
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<Preference*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  auto* p = reinterpret_cast<Preference*>(pref);
  if (p == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof(uint64_t)) {
    std::memcpy(&p->max_workspace, buf, sizeof(uint64_t));
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  if (handle == nullptr || op == nullptr || a == nullptr || b == nullptr || c == nullptr ||
      d == nullptr || pref == nullptr || results == nullptr || returned == nullptr ||
      requested < 1) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  if (!Supported(*reinterpret_cast<MatmulDesc*>(op), *reinterpret_cast<Layout*>(a),
                 *reinterpret_cast<Layout*>(b), *reinterpret_cast<Layout*>(c),
                 *reinterpret_cast<Layout*>(d))) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                       cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                       const cublasLtMatmulAlgo_t* algo,
                                       cublasLtMatmulHeuristicResult_t* result) {
  if (handle == nullptr || op == nullptr || a == nullptr || b == nullptr || c == nullptr ||
      d == nullptr || algo == nullptr || result == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!Supported(*reinterpret_cast<MatmulDesc*>(op), *reinterpret_cast<Layout*>(a),
                 *reinterpret_cast<Layout*>(b), *reinterpret_cast<Layout*>(c),
                 *reinterpret_cast<Layout*>(d))) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  std::memset(result, 0, sizeof(*result));
  result->algo = *algo;
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = 1.0f;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t adesc, const void* B,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t cdesc, void* D, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  if (handle == nullptr || op == nullptr || alpha == nullptr || beta == nullptr || A == nullptr ||
      B == nullptr || D == nullptr || adesc == nullptr || bdesc == nullptr || cdesc == nullptr ||
      ddesc == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const MatmulDesc desc = *reinterpret_cast<MatmulDesc*>(op);
  const Layout a = *reinterpret_cast<Layout*>(adesc), b = *reinterpret_cast<Layout*>(bdesc),
               c = *reinterpret_cast<Layout*>(cdesc), d = *reinterpret_cast<Layout*>(ddesc);
  if (!Supported(desc, a, b, c, d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (C != D && C != nullptr) return CUBLAS_STATUS_NOT_SUPPORTED;
  float al, be;
  std::memcpy(&al, alpha, sizeof(float));  // host pointer mode (the default)
  std::memcpy(&be, beta, sizeof(float));
  if (b.cols == 0) return CUBLAS_STATUS_SUCCESS;
  const auto* pa = static_cast<const uint16_t*>(A);
  const auto* pb = static_cast<const uint16_t*>(B);
  const cudaError_t e = astr::emu::EnqueueHostOp(
      stream, [a, b, c, al, be, pa, pb, D] { RunMatmul(a, b, c, al, be, pa, pb, D, D); });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
