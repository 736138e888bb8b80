// Internal: the block-quantized GEMM (WeightType::kQuant) tiles that gemm.cc drives. Not part of
// the public API.
//
// A tile computes `rows` rows of the quantized activations against `np` consecutive panels (np * 16
// outputs) over every k block and stores the first ncols columns. Every tile of every ISA computes
// each output with the same integer sums and the same float operations in the same order
// (gemm.h), so any tiling and any path give bit-identical results.
#pragma once

#include <cstdint>

#include "common/base/half.h"
#include "kernels/cpu/gemm.h"

namespace astr::cpu::internal {

// x quantized per row (QuantFormat::act), seen per 32-element block: q[m][k_blocks * 32] (zero
// padded), the scale of each block d[m][k_blocks] (a 256-element block's scale repeats), the
// sums of q over each half block s[m][k_blocks * 2], and the min terms' factors: sum16[m][k_blocks
// * 2] = d * s per half, sum32[m][k_blocks] = d * (s0 + s1), or with kQ8_1 that rounded to f16;
// dt[k_blocks][m]: d transposed (a block's scales of every row side by side).
struct QuantActivations {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* s = nullptr;
  const float* sum16 = nullptr;
  const float* sum32 = nullptr;
  int64_t k_blocks = 0;
  const float* dt = nullptr;
  int64_t m = 0;
  // Distinct for every GEMM call (the weights may change between calls: weight updates): tiles
  // that keep per-call caches of their weights' unpacked form key them by it.
  uint64_t call = 0;
};

using QuantTileKernel = void (*)(const QuantActivations& x, int64_t row0,
                                 const uint8_t* w /*first panel*/, int64_t panel_stride,
                                 int64_t block_bytes, const QuantFormat& f, float* y, int64_t ldy,
                                 int64_t ncols, bool accumulate);

constexpr int kMaxQuantTileRows = 16;
constexpr int kMaxQuantTilePanels = 2;

// The tiles' template code for 4-bit indices into a table (QuantFormat::table): stored as 4 bits.
constexpr int kTableBits = 5;
// The bits a tile's quants are stored in.
constexpr int StoredBits(int bits) { return bits == kTableBits ? 4 : bits; }
// The kernel table's index for a quant width: 8, 4, 6 bits, 4-bit table indices.
constexpr int QuantBitsIndex(int bits) { return bits == 8 ? 0 : bits == 4 ? 1 : bits == 6 ? 2 : 3; }
inline int QuantKernelBits(const QuantFormat& f) { return f.table ? kTableBits : f.bits; }

// The activations' quantization loops (gemm.h), which every path must compute exactly alike:
// max |x[j]| over n elements, and q[j] = clamp(nearest-even(x[j] * mul), -127, 127).
using AbsMaxFn = float (*)(const float* x, int64_t n);
using QuantizeSpanFn = void (*)(const float* x, int64_t n, float mul, int8_t* q);
// The sums of q over each 16-element half of `blocks` 32-element blocks: s[2b], s[2b + 1].
using HalfSumsFn = void (*)(const int8_t* q, int64_t blocks, int32_t* s);
// One row's whole quantization in 32-element groups (ActQuant kQ8_0 / kQ8_1: qgemm.cc's
// QuantizeRows, the loops above fused, the same results): q[k_blocks * 32] (0 past k), the scale
// d[b] = f16(max |x| / 127), s[2b], s[2b + 1] (AbsMaxFn, QuantizeSpanFn, HalfSumsFn), sum16[2b + h]
// = d[b] * s[2b + h], sum32[b] = d[b] * (s[2b] + s[2b + 1]) (rounded to f16 when round_sum32) and
// dt[b * ldt] = d[b].
using QuantizeRow32Fn = void (*)(const float* x, int64_t k, int64_t k_blocks, bool round_sum32,
                                 int8_t* q, float* d, int32_t* s, float* sum16, float* sum32,
                                 float* dt, int64_t ldt);

struct QuantKernelSet {
  int max_rows = 1;
  int panels_per_tile = 1;
  int single_row_panels = 0;   // panels per tile when a call has one row (0: panels_per_tile)
  AbsMaxFn abs_max = nullptr;  // null: the scalar loop
  QuantizeSpanFn quantize_span = nullptr;  // null: the scalar loop
  HalfSumsFn half_sums = nullptr;          // null: the scalar loop
  QuantizeRow32Fn quantize_row32 = nullptr;  // null: the three loops above
  // [QuantBitsIndex(bits)][rows - 1][np - 1]
  QuantTileKernel kernels[4][kMaxQuantTileRows][kMaxQuantTilePanels] = {};
};

// Sets the activations' loops of `set` to the AVX2 ones (every AVX2-capable kernel set: they run at
// memory speed, and give the scalar loops' results).
void UseAvx2ActivationLoops(QuantKernelSet* set);
// The AVX2 loops, and the AVX-512 quantize_row32 (the AVX-512 VNNI and AMX sets).
void UseAvx512ActivationLoops(QuantKernelSet* set);

// Bytes of one block's quants for one panel (16 outputs x 32 k).
constexpr int64_t QuantBlockQuantBytes(int bits) { return StoredBits(bits) * 64; }

// A unit's header (gemm.h): f16 d[16] and, with has_min, dmin[16] with `super`; nothing otherwise.
constexpr int64_t QuantUnitHeaderBytes(const QuantFormat& f) {
  return f.super ? PackedMatrix::kPanel * 2 * (f.has_min ? 2 : 1) : 0;
}

// Where block b of a panel sits, and its unit's header (block_bytes: PackedMatrix::block_bytes).
struct QuantBlockAt {
  const uint8_t* header;  // the unit's header (== block without `super`)
  const uint8_t* block;
};
inline QuantBlockAt LocateQuantBlock(const uint8_t* panel, int64_t b, int64_t block_bytes,
                                     const QuantFormat& f) {
  if (!f.super) return {panel + b * block_bytes, panel + b * block_bytes};
  const int64_t header = QuantUnitHeaderBytes(f);
  const uint8_t* unit = panel + (b >> 3) * (header + 8 * block_bytes);
  return {unit, unit + header + (b & 7) * block_bytes};
}

// y = x . Wt for kQuant weights on one path (gemm.cc's GemmIsa dispatches here).
void QuantGemmIsa(Isa isa, const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
                  int64_t ldy, bool accumulate, ThreadPool* pool);

// The same with a given tile set (tests run emulated tiles through it).
void QuantGemmWith(const QuantKernelSet& ks, const float* x, int64_t ldx, int64_t m,
                   const PackedMatrix& w, float* y, int64_t ldy, bool accumulate, ThreadPool* pool);

const QuantKernelSet& QuantKernelsScalar();
const QuantKernelSet& QuantKernelsAvx2();
const QuantKernelSet& QuantKernelsAvx512Vnni();
// AMX-INT8 tiles of up to 16 rows x 1 panel (only where CpuHasAmx()).
const QuantKernelSet& QuantKernelsAmx();
// The fewest rows for which QuantGemmIsa takes the AMX tiles (fewer: the VNNI tiles, faster there:
// astr-bench-gemm q4_k 5632x2048, 4 rows 300 us against 450, 8 rows 550 against 500).
constexpr int64_t kAmxMinRows = 8;

template <template <int, int, int> class Tile, int R, int P>
void FillQuantRow(QuantKernelSet* set) {
  if constexpr (P >= 1) {
    set->kernels[QuantBitsIndex(8)][R - 1][P - 1] = &Tile<R, P, 8>::Run;
    set->kernels[QuantBitsIndex(4)][R - 1][P - 1] = &Tile<R, P, 4>::Run;
    set->kernels[QuantBitsIndex(6)][R - 1][P - 1] = &Tile<R, P, 6>::Run;
    set->kernels[QuantBitsIndex(kTableBits)][R - 1][P - 1] = &Tile<R, P, kTableBits>::Run;
    FillQuantRow<Tile, R, P - 1>(set);
  }
}

template <template <int, int, int> class Tile, int R, int P>
void FillQuantTable(QuantKernelSet* set) {
  if constexpr (R >= 1) {
    FillQuantRow<Tile, R, P>(set);
    FillQuantTable<Tile, R - 1, P>(set);
  }
}

template <template <int, int, int> class Tile, int MaxRows, int PanelsPerTile>
QuantKernelSet MakeQuantKernelSet() {
  static_assert(MaxRows <= kMaxQuantTileRows && PanelsPerTile <= kMaxQuantTilePanels);
  QuantKernelSet set;
  set.max_rows = MaxRows;
  set.panels_per_tile = PanelsPerTile;
  FillQuantTable<Tile, MaxRows, PanelsPerTile>(&set);
  return set;
}

}  // namespace astr::cpu::internal
