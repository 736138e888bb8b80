// Row-major GEMMs on cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ with bf16 inputs, f32 accumulation and
// a bf16 or f32 output. Matmul descriptors and the heuristic's algorithm are cached per shape (host
// memory only), so a repeated shape costs one cublasLtMatmul call. The scratch workspace is the
// caller's (InferenceWorkspace): no device allocation per call, and the call is graph-capturable.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "common/base/status.h"
#include "kernels/cuda/kv_layout.h"

namespace astr::cuda {

class LtGemm {
 public:
  static StatusOr<std::unique_ptr<LtGemm>> Create(void* workspace, size_t workspace_bytes);
  ~LtGemm();

  // y = x · wᵀ. x: [m, k] bf16 (row stride ldx); w: [n, k] bf16 (row stride k); y: [m, n] of
  // `out_type` (CUDA_R_16BF or CUDA_R_32F, row stride ldy).
  Status Matmul(const bf16* x, int64_t ldx, const bf16* w, void* y, int64_t ldy,
                cudaDataType_t out_type, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>;  // m n k ldx ldy type
  LtGemm() = default;
  StatusOr<const Plan*> GetPlan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace astr::cuda
