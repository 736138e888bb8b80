// The cross-backend op table (in the style of ggml's test-backend-ops): every case runs one CUDA
// kernel (or the whole CUDA backend) on one shape and compares it with the CPU backend's result
// under the case's own tolerance. Cases register themselves from *_cases.cc files; the runner
// (op_test_main.cc) runs them all, or those whose name contains --filter, prints one line per case
// and writes a JSON report with --json. Without a usable GPU the runner exits 77 (ctest: skipped).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/model/tensor_dtype.h"

namespace astr::gputest {

// The emulated device (kernels/cuda/emu, astr-test-backend-ops-emu) runs the same table on the CPU,
// where a 1024-thread sampling block costs milliseconds per row: cases shrink what only adds time
// there (sampling rows). Every case still runs; a real GPU runs the full sizes.
#if defined(ASTR_CUDA_EMU)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif
// The rows a sampling case draws: all of them on a GPU, at most 24 on the emulator.
inline int CaseRows(int rows) { return kEmulated && rows > 24 ? 24 : rows; }

struct CaseResult {
  enum Kind { kPass, kFail, kUnsupported };
  Kind kind = kPass;
  double max_err = 0.0;  // the compared quantity (absolute or relative, as the case says)
  double tol = 0.0;
  std::string detail;  // why it failed / is unsupported, the worst element, ...
};

struct OpCase {
  std::string op;     // "paged_decode", "rms_norm", "model", ...
  std::string shape;  // "b=3 kv=37 ps=16 h=8/2 d=128": reproducible from the name alone
  std::function<CaseResult()> run;
  std::string name() const { return op + "(" + shape + ")"; }
};

// Adds a case to the table (call from a static registrar; see ASTR_GPU_CASES).
void RegisterCase(OpCase c);
std::vector<OpCase>& Registry();

// Registers the cases a file defines: ASTR_GPU_CASES(RegisterDecodeCases) where
// `void RegisterDecodeCases()` calls RegisterCase for each case.
#define ASTR_GPU_CASES(fn)                     \
  static const bool astr_gpu_cases_##fn = [] { \
    fn();                                      \
    return true;                               \
  }()

// Result helpers.
CaseResult Pass(double max_err, double tol);
CaseResult Fail(std::string detail, double max_err = 0.0, double tol = 0.0);
CaseResult Unsupported(std::string why);
// Max |a - b| over n elements; *worst gets the index of the largest difference.
double MaxAbsDiff(const float* a, const float* b, int64_t n, int64_t* worst = nullptr);
// Compares and returns Pass/Fail with the worst index in the detail.
CaseResult Compare(const std::vector<float>& got, const std::vector<float>& want, double tol);

// A CUDA error becomes a failed case: ASTR_GPU_CHECK(cudaMemcpy(...)) inside a case body.
#define ASTR_GPU_CHECK(expr)                                                                   \
  do {                                                                                         \
    cudaError_t astr_err_ = (expr);                                                            \
    if (astr_err_ != cudaSuccess)                                                              \
      return ::astr::gputest::Fail(std::string(#expr) + ": " + cudaGetErrorString(astr_err_)); \
  } while (0)

// Device memory freed on destruction.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { Resize(n); }
  ~DeviceBuffer() { Free(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  cudaError_t Resize(size_t n) {
    Free();
    n_ = n;
    return cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, n) * sizeof(T));
  }
  cudaError_t Upload(const std::vector<T>& host) {
    if (host.size() != n_) {
      cudaError_t e = Resize(host.size());
      if (e != cudaSuccess) return e;
    }
    return cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  cudaError_t Download(std::vector<T>* host) const {
    host->resize(n_);
    return cudaMemcpy(host->data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  void Free() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// "" if the two bf16 arrays (e.g. KV pools) hold the same bits, else where the first difference is
// ("<what>: slot S element E is 0x.., want 0x..", with slot = index / slot_elems).
std::string FirstBitDiff(const char* what, const std::vector<uint16_t>& got,
                         const std::vector<uint16_t>& want, int64_t slot_elems);

// Host bf16 helpers (the bits of __nv_bfloat16), round to nearest even.
std::vector<uint16_t> ToBf16(const std::vector<float>& x);
std::vector<float> FromBf16(const std::vector<uint16_t>& x);
// Rounds through bf16 (what the GPU sees of an f32 input).
std::vector<float> RoundBf16(const std::vector<float>& x);

// Deterministic test data: uniform in [lo, hi) from a seed.
std::vector<float> RandomVector(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// Path of a file in the shared test data folder (../shared or $ASTR_SHARED_DIR).
std::string SharedPath(const std::string& relative);

}  // namespace astr::gputest
