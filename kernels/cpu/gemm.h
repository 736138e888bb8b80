// y = x · Wᵀ for the model's linear layers, with W packed once at load time.
//
// Batch invariance: every output y[i, j] is one fixed summation chain over k (ascending k, one
// accumulator), computed the same way whatever m is, whichever other rows x holds and however many
// threads run. Work is split over rows and output panels only, never over k. Results still differ
// between ISA paths (each path is deterministic on its own).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace astr::cpu {

enum class WeightType { kF32, kBF16, kQuant };

// How a block-quantized weight is stored (WeightType::kQuant): each row is cut into sub-blocks of
// `sub` (16 or 32) elements with unsigned quants q of `bits` (4, 6 or 8) bits and
//   value = scale * (q - offset)          (has_min false)
//   value = scale * q + min               (has_min true; offset unused)
// scale and min are held either as f16, one per sub-block, or (`super`, llama.cpp's K-quants) as
// an int8 per sub-block times an f16 factor per 256 elements of the row, so scale = d * sc and
// min = dmin * m are exact in f32. The ggml block types map onto this exactly (common/model/
// tensor_dtype.h DecodeQuant). 8-bit quants must be offset-128 signed values (offset 128, no min).
//
// `act` says how each row of x is quantized to int8 (llama.cpp's schemes for the ggml type the
// weights came from, so that results track llama.cpp's closely):
//   kQ8_0: per 32 elements, d = max|x| / 127 rounded to f16, q = nearest-even(x * 127 / max|x|)
//   kQ8_1: kQ8_0, and the block's sum d * sum(q) rounded to f16 (the min term's factor)
//   kQ8_K: per 256 elements, with m the element of largest |x|: q = nearest-even(x * -127 / m)
//          (at most 127), d = 1 / (-127 / m) in f32
enum class ActQuant { kQ8_0, kQ8_1, kQ8_K };

struct QuantFormat {
  int bits = 8;   // 4, 6 or 8
  int sub = 32;   // 16 or 32
  bool has_min = false;
  int offset = 0;  // 0..255, without min
  ActQuant act = ActQuant::kQ8_0;
  bool super = false;  // int8 scales / mins with per-256 f16 factors (k a multiple of 256)
  // 4-bit indices into a table (MXFP4, IQ4_NL, IQ4_XS): a quant q < 16 stands for values[q] (an
  // 8-bit quant with this offset, 128: values[q] - 128 is the signed value). bits 4, no min.
  bool table = false;
  std::array<uint8_t, 16> values{};
  bool operator==(const QuantFormat&) const = default;
};

// One row's quants and scales, as PackedMatrix::FromQuantRows asks a decoder for them.
struct QuantRowOut {
  uint8_t* q = nullptr;   // [k], each < 2^bits
  float* scale = nullptr;  // [k / sub]
  float* min = nullptr;    // [k / sub] with has_min, null otherwise
  // With `super` (null otherwise): per 256 elements d[k / 256] and, with has_min, dmin[k / 256]
  // (each an f16 value), and per sub-block sc[k / sub] and m[k / sub], such that
  // scale = d * sc and min = dmin * m.
  float* d = nullptr;
  float* dmin = nullptr;
  int8_t* sc = nullptr;
  int8_t* m = nullptr;
};

// A weight matrix W [n, k] (row = one output; y = x · Wᵀ) packed for the GEMM kernels, in panels of
// kPanel outputs, n padded to a multiple of kPanel with zero rows:
//   kF32:  [panels][k][16] floats                        (one 64-byte vector per k)
//   kBF16: [panels][k_pairs][16][2] bf16, k padded even  (one 64-byte vector per pair of k: the
//          operand of vdpbf16ps; other paths widen the low/high halves to f32)
//   kQuant: [panels][units][unit]; a unit is one 32-k block, or with `super` a header f16 d[16]
//          (and with has_min f16 dmin[16]) followed by 8 blocks (256 k). A block holds the quants
//          of 16 outputs x 32 k as [8 groups of 4 k][16 outputs][4] bytes (bits 8: 512 bytes,
//          each the signed value q - 128 as int8, the operand AMX's tdpbssd reads in place),
//          or with bits 4 the groups g and g + 4 in the low and high nibbles of one 64-byte
//          vector (256 bytes), or with bits 6 those low 4 bits and then two 64-byte vectors of
//          the high 2 bits: vector g / 4, bits 2 * (g % 4) (384 bytes); then the scales: f16
//          scale[32 / sub][16] and, with has_min, f16 min[32 / sub][16], or with `super` int8
//          sc[32 / sub][16] and int8 m[32 / sub][16].
//          k is padded to a multiple of 32 (with `super`: 256) with zero quants and scales.
// Storage is 64-byte aligned and owned. Move-only.
class PackedMatrix {
 public:
  static constexpr int64_t kPanel = 16;

  PackedMatrix() = default;
  // bf16 = round-to-nearest-even from w.
  // Panels are packed in parallel on `pool` when given.
  static PackedMatrix FromF32(const float* w /*[n, k]*/, int64_t n, int64_t k, WeightType type,
                              ThreadPool* pool = nullptr);
  // The same with rows produced on demand: rows_of(row, rows, out) writes rows [row, row + rows)
  // as f32 into out [rows, k] (at most kPanel rows; called from the pool's threads), so no f32
  // copy of the whole matrix is needed.
  using F32RowSource = std::function<void(int64_t row, int64_t rows, float* out)>;
  static PackedMatrix FromF32Rows(int64_t n, int64_t k, WeightType type,
                                  const F32RowSource& rows_of, ThreadPool* pool = nullptr);
  // The same into the storage of `reuse` when it holds a matrix of the same n, k and type (its
  // padding is zero already and every other element is written again): no fresh pages, which a
  // weight update rebuilding 1.7 GB of them pays for in page faults. `reuse` is left empty then,
  // and untouched otherwise.
  static PackedMatrix FromF32Rows(int64_t n, int64_t k, WeightType type,
                                  const F32RowSource& rows_of, ThreadPool* pool,
                                  PackedMatrix* reuse);
  // Rows of raw bf16 bits read in place (row_of(r) points at row r's k elements), packed exactly
  // as kBF16 on `pool`, into `reuse`'s storage as FromF32Rows does: no f32 detour for a bf16
  // checkpoint or push.
  using Bf16RowPointer = std::function<const uint16_t*(int64_t row)>;
  static PackedMatrix FromBf16Rows(int64_t n, int64_t k, const Bf16RowPointer& row_of,
                                   ThreadPool* pool = nullptr, PackedMatrix* reuse = nullptr);
  // Raw bf16 bits (e.g. straight from a checkpoint), packed exactly.
  static PackedMatrix FromBf16(const uint16_t* w /*[n, k]*/, int64_t n, int64_t k);
  // Block-quantized rows. decode(row, out) fills row `row`'s QuantRowOut; k must be a multiple
  // of fmt.sub (with `super`: of 256). Called once per row, from the pool's threads when pool is
  // given.
  using QuantRowDecoder = std::function<void(int64_t row, const QuantRowOut& out)>;
  static PackedMatrix FromQuantRows(int64_t n, int64_t k, const QuantFormat& fmt,
                                    const QuantRowDecoder& decode, ThreadPool* pool = nullptr);

  // A copy, into the storage of `reuse` when it has the same layout (SameLayout); `reuse` is left
  // empty then.
  PackedMatrix Clone(PackedMatrix* reuse = nullptr) const;
  // Rows [row, row + rows) as f32 into out [rows, k]: exactly the packed values; for kQuant each
  // value as QuantFormat defines it (scale * (q - offset), or scale * q + min), computed in f32 as
  // ggml dequantizes its blocks, so a table packed from a GGUF file unpacks to the file's values
  // (a tied embedding gathers its rows from the packed output projection).
  void UnpackRows(int64_t row, int64_t rows, float* out) const;
  // Same n, k, type and quant format: the storage of one fits the other exactly.
  bool SameLayout(const PackedMatrix& other) const;

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  WeightType type() const { return type_; }
  size_t bytes() const { return bytes_; }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  int64_t k_pairs() const { return (k_ + 1) / 2; }
  const QuantFormat& quant() const { return quant_; }
  // kQuant: 32-element k blocks (a multiple of 8 with `super`), bytes per block of one panel,
  // blocks per unit and a unit's header bytes.
  int64_t k_blocks() const { return quant_.super ? (k_ + 255) / 256 * 8 : (k_ + 31) / 32; }
  int64_t block_bytes() const;
  int64_t unit_blocks() const { return quant_.super ? 8 : 1; }
  int64_t unit_header_bytes() const;
  // Elements (floats or bf16; bytes for kQuant) from one panel to the next.
  int64_t panel_stride() const {
    if (type_ == WeightType::kQuant)
      return k_blocks() / unit_blocks() * (unit_header_bytes() + unit_blocks() * block_bytes());
    return type_ == WeightType::kF32 ? k_ * kPanel : k_pairs() * 2 * kPanel;
  }
  const float* f32_panel(int64_t p) const /*[k][16]*/ {
    return reinterpret_cast<const float*>(data_.get()) + p * panel_stride();
  }
  const uint16_t* bf16_panel(int64_t p) const /*[k_pairs][16][2]*/ {
    return reinterpret_cast<const uint16_t*>(data_.get()) + p * panel_stride();
  }
  const uint8_t* quant_panel(int64_t p) const {
    return static_cast<const uint8_t*>(data_.get()) + p * panel_stride();
  }
  const void* panel(int64_t p) const {
    if (type_ == WeightType::kQuant) return quant_panel(p);
    return type_ == WeightType::kF32 ? static_cast<const void*>(f32_panel(p)) : bf16_panel(p);
  }

 private:
  struct AlignedFree {
    void operator()(void* p) const;
  };
  PackedMatrix(int64_t n, int64_t k, WeightType type, QuantFormat quant = {},
               PackedMatrix* reuse = nullptr);
  // UnpackRows of one kQuant row (qgemm.cc).
  void UnpackQuantRow(int64_t row, float* out) const;

  int64_t n_ = 0, k_ = 0;
  WeightType type_ = WeightType::kF32;
  QuantFormat quant_;
  size_t bytes_ = 0;
  std::unique_ptr<void, AlignedFree> data_;
};

// y[m, n] = x[m, k] · Wᵀ (+ y if accumulate). x row stride ldx, y row stride ldy (in floats).
// kQuant weights: each row of x is quantized to int8 as QuantFormat::act says (d_x: the scale of
// the block holding sub-block s; S_x(s) = d_x * sum_s q_x in f32, or the kQ8_1 block sum), and
// each output is
//   acc = 0; for each sub-block s ascending: acc = fma(float(sum_s q_x (q_w - offset)), scale_w *
//   d_x, acc) [with min: acc = fma(float(sum_s q_x q_w), scale_w * d_x, acc); acc =
//   fma(S_x(s), min_w, acc)]
// (scale_w and min_w: the f16 values, or with `super` the f32 products d * sc and dmin * m)
// with exact integer sums, so the scalar, AVX2 and AVX-512 VNNI paths give bit-identical results.
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
