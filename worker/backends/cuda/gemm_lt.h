// Row-major GEMMs on cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ with bf16 inputs, f32 accumulation and
// a bf16 or f32 output. The heuristic's algorithm is chosen per m *bucket* (powers of two: m = 37
// uses the algorithm of 64) and per (n, k, strides, type); Prepare runs the heuristic for every
// bucket up front, so a new prefill length never runs it on the critical path. Descriptors are
// cached per exact shape (host memory only; creating them is cheap), and the bucket's algorithm is
// checked for the exact m once (cublasLtMatmulAlgoCheck; an algorithm that does not apply falls
// back to a heuristic for that m). A repeated shape costs one cublasLtMatmul call. The scratch
// workspace is the caller's (InferenceWorkspace): no device allocation per call, and the call is
// graph-capturable.
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
  // Runs the heuristic for every m bucket up to max_m of this (n, k, ldx, ldy, type).
  Status Prepare(int64_t ldx, int64_t ldy, cudaDataType_t out_type, int64_t max_m, int64_t n,
                 int64_t k);

  // The bucket whose algorithm serves m: the smallest power of two >= m.
  static int64_t BucketOf(int64_t m);
  // Heuristic runs so far (tests: none after Prepare for any m up to its max_m).
  int64_t heuristic_calls() const { return heuristic_calls_; }

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>;  // m n k ldx ldy type
  LtGemm() = default;
  StatusOr<const Plan*> GetPlan(const Key& key);
  // The descriptors of an exact shape (no algorithm).
  StatusOr<std::unique_ptr<Plan>> MakeDescriptors(const Key& key) const;
  // The heuristic's best algorithm for `plan`'s shape.
  Status RunHeuristic(Plan* plan);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;    // per exact shape
  std::map<Key, std::unique_ptr<Plan>> buckets_;  // per bucket shape: its algorithm
  int64_t heuristic_calls_ = 0;
};

}  // namespace astr::cuda
