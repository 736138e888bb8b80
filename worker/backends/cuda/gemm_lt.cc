#include "worker/backends/cuda/gemm_lt.h"

#include <string>

namespace astr::cuda {
namespace {

Status LtStatus(cublasStatus_t s, const std::string& what) {
  return InternalError("cuBLASLt " + what + ": status " + std::to_string(static_cast<int>(s)));
}

#define ASTR_LT_RETURN_IF_ERROR(expr, what)                                     \
  do {                                                                          \
    cublasStatus_t astr_lt_s_ = (expr);                                         \
    if (astr_lt_s_ != CUBLAS_STATUS_SUCCESS) return LtStatus(astr_lt_s_, what); \
  } while (0)

}  // namespace

struct LtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(void* workspace, size_t workspace_bytes) {
  std::unique_ptr<LtGemm> g(new LtGemm());
  ASTR_LT_RETURN_IF_ERROR(cublasLtCreate(&g->handle_), "create");
  g->workspace_ = workspace;
  g->workspace_bytes_ = workspace_bytes;
  return g;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

int64_t LtGemm::BucketOf(int64_t m) {
  int64_t b = 1;
  while (b < m) b *= 2;
  return b;
}

// Row-major y[m,n] = x[m,k] · w[n,k]ᵀ is column-major yᵀ[n,m] = w · xᵀ: A = w stored as a
// column-major [k, n] matrix used transposed (n x k), B = x stored as column-major [k, m], C = yᵀ
// column-major [n, m].
StatusOr<std::unique_ptr<LtGemm::Plan>> LtGemm::MakeDescriptors(const Key& key) const {
  const auto [m, n, k, ldx, ldy, type] = key;
  auto plan = std::make_unique<Plan>();
  ASTR_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                          "matmul desc");
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  ASTR_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                         &trans_a, sizeof(trans_a)),
                          "transa");
  ASTR_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                         &trans_b, sizeof(trans_b)),
                          "transb");
  ASTR_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, k, n, k), "layout w");
  ASTR_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, k, m, ldx), "layout x");
  ASTR_LT_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->c, static_cast<cudaDataType_t>(type), n, m, ldy),
      "layout y");
  return plan;
}

Status LtGemm::RunHeuristic(Plan* plan) {
  ++heuristic_calls_;
  cublasLtMatmulPreference_t pref = nullptr;
  ASTR_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const uint64_t ws = workspace_bytes_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->op, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  ASTR_LT_RETURN_IF_ERROR(s, "heuristic");
  if (found == 0) return InternalError("cuBLASLt has no algorithm for this shape");
  plan->algo = result.algo;
  return OkStatus();
}

StatusOr<const LtGemm::Plan*> LtGemm::GetPlan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  const auto [m, n, k, ldx, ldy, type] = key;
  // The bucket's algorithm (the heuristic runs here only for a bucket Prepare did not cover).
  const Key bucket_key{BucketOf(m), n, k, ldx, ldy, type};
  auto b = buckets_.find(bucket_key);
  if (b == buckets_.end()) {
    ASTR_ASSIGN_OR_RETURN(auto bucket, MakeDescriptors(bucket_key));
    if (Status s = RunHeuristic(bucket.get()); !s.ok()) {
      return InternalError("cuBLASLt: no algorithm for m=" + std::to_string(BucketOf(m)) + " n=" +
                           std::to_string(n) + " k=" + std::to_string(k) + ": " + s.message());
    }
    b = buckets_.emplace(bucket_key, std::move(bucket)).first;
  }
  ASTR_ASSIGN_OR_RETURN(auto plan, MakeDescriptors(key));
  plan->algo = b->second->algo;
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle_, plan->op, plan->a, plan->b, plan->c, plan->c, &plan->algo,
                              &check) != CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > workspace_bytes_) {
    // The bucket's algorithm does not apply to this exact m: its own heuristic, once.
    if (Status s = RunHeuristic(plan.get()); !s.ok()) {
      return InternalError("cuBLASLt: no algorithm for m=" + std::to_string(m) + " n=" +
                           std::to_string(n) + " k=" + std::to_string(k) + ": " + s.message());
    }
  }
  const Plan* p = plan.get();
  plans_.emplace(key, std::move(plan));
  return p;
}

Status LtGemm::Prepare(int64_t ldx, int64_t ldy, cudaDataType_t out_type, int64_t max_m, int64_t n,
                       int64_t k) {
  for (int64_t m = 1;; m *= 2) {
    const Key key{m, n, k, ldx, ldy, static_cast<int>(out_type)};
    if (buckets_.find(key) == buckets_.end()) {
      ASTR_ASSIGN_OR_RETURN(auto bucket, MakeDescriptors(key));
      ASTR_RETURN_IF_ERROR(RunHeuristic(bucket.get()));
      buckets_.emplace(key, std::move(bucket));
    }
    if (m >= max_m) break;
  }
  return OkStatus();
}

Status LtGemm::Matmul(const bf16* x, int64_t ldx, const bf16* w, void* y, int64_t ldy,
                      cudaDataType_t out_type, int64_t m, int64_t n, int64_t k,
                      cudaStream_t stream) {
  if (m == 0) return OkStatus();
  ASTR_ASSIGN_OR_RETURN(const Plan* plan,
                        GetPlan(Key{m, n, k, ldx, ldy, static_cast<int>(out_type)}));
  const float alpha = 1.0f, beta = 0.0f;
  ASTR_LT_RETURN_IF_ERROR(
      cublasLtMatmul(handle_, plan->op, &alpha, w, plan->a, x, plan->b, &beta, y, plan->c, y,
                     plan->c, &plan->algo, workspace_, workspace_bytes_, stream),
      "matmul");
  return OkStatus();
}

}  // namespace astr::cuda
