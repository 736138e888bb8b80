// y = x · Wᵀ for the model's linear layers, with W packed once at load time.
//
// Batch invariance: every output y[i, j] is one fixed summation chain over k (ascending k, one
// accumulator), computed the same way whatever m is, whichever other rows x holds and however many
// threads run. Work is split over rows and output panels only, never over k. Results still differ
// between ISA paths (each path is deterministic on its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace astr::cpu {

enum class WeightType { kF32, kBF16 };

// A weight matrix W [n, k] (row = one output; y = x · Wᵀ) packed for the GEMM kernels, in panels of
// kPanel outputs, n padded to a multiple of kPanel with zero rows:
//   kF32:  [panels][k][16] floats                        (one 64-byte vector per k)
//   kBF16: [panels][k_pairs][16][2] bf16, k padded even  (one 64-byte vector per pair of k: the
//          operand of vdpbf16ps; other paths widen the low/high halves to f32)
// Storage is 64-byte aligned and owned. Move-only.
class PackedMatrix {
 public:
  static constexpr int64_t kPanel = 16;

  PackedMatrix() = default;
  // bf16 = round-to-nearest-even from w.
  // Panels are packed in parallel on `pool` when given.
  static PackedMatrix FromF32(const float* w /*[n, k]*/, int64_t n, int64_t k, WeightType type,
                              ThreadPool* pool = nullptr);
  // Raw bf16 bits (e.g. straight from a checkpoint), packed exactly.
  static PackedMatrix FromBf16(const uint16_t* w /*[n, k]*/, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  WeightType type() const { return type_; }
  size_t bytes() const { return bytes_; }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  int64_t k_pairs() const { return (k_ + 1) / 2; }
  // Elements (floats or bf16) from one panel to the next.
  int64_t panel_stride() const {
    return type_ == WeightType::kF32 ? k_ * kPanel : k_pairs() * 2 * kPanel;
  }
  const float* f32_panel(int64_t p) const /*[k][16]*/ {
    return reinterpret_cast<const float*>(data_.get()) + p * panel_stride();
  }
  const uint16_t* bf16_panel(int64_t p) const /*[k_pairs][16][2]*/ {
    return reinterpret_cast<const uint16_t*>(data_.get()) + p * panel_stride();
  }
  const void* panel(int64_t p) const {
    return type_ == WeightType::kF32 ? static_cast<const void*>(f32_panel(p)) : bf16_panel(p);
  }

 private:
  struct AlignedFree {
    void operator()(void* p) const;
  };
  PackedMatrix(int64_t n, int64_t k, WeightType type);

  int64_t n_ = 0, k_ = 0;
  WeightType type_ = WeightType::kF32;
  size_t bytes_ = 0;
  std::unique_ptr<void, AlignedFree> data_;
};

// y[m, n] = x[m, k] · Wᵀ (+ y if accumulate). x row stride ldx, y row stride ldy (in floats).
// Gemm runs ActiveIsa()'s tiles, except that on kAvx512Bf16 it uses the kAvx512 FMA tiles (faster
// on the target CPU, see gemm.cc). The bf16-dot tiles (GemmIsa(kAvx512Bf16, ...) with bf16 weights)
// round x to bf16 (round-to-nearest-even) and use vdpbf16ps; every other path keeps x in f32 and
// accumulates with f32 FMAs. pool may be null (single thread).
void Gemm(const float* x /*[m, ldx]*/, int64_t ldx, int64_t m, const PackedMatrix& w /*[n, k]*/,
          float* y /*[m, ldy]*/, int64_t ldy, bool accumulate, ThreadPool* pool);
// Same, forcing one path (tests, benchmarks). isa must be one of AvailableIsas().
void GemmIsa(Isa isa, const float* x /*[m, ldx]*/, int64_t ldx, int64_t m,
             const PackedMatrix& w /*[n, k]*/, float* y /*[m, ldy]*/, int64_t ldy, bool accumulate,
             ThreadPool* pool);

}  // namespace astr::cpu
