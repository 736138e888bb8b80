// Internal: the per-ISA GEMM micro-kernel tables that gemm.cc drives. Not part of the public API.
//
// A tile kernel computes `rows` rows of x against `np` consecutive panels (np * 16 outputs) over
// the full k, holding one accumulator per output, and stores the first ncols columns (y = acc, or
// y = acc + y when accumulate). Each output's summation sequence is the same in every kernel of a
// table, so any tiling gives bit-identical results.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/cpu/gemm.h"

namespace astr::cpu::internal {

constexpr int kMaxTileRows = 8;
constexpr int kMaxTilePanels = 4;

using TileKernel = void (*)(const void* x /*[rows, ldx] f32 or bf16*/, int64_t ldx,
                            const void* w /*first panel*/, int64_t panel_stride, int64_t k,
                            float* y /*[rows, ldy]*/, int64_t ldy, int64_t ncols, bool accumulate);

struct KernelSet {
  int max_rows = 1;         // <= kMaxTileRows
  int panels_per_tile = 1;  // <= kMaxTilePanels
  bool x_bf16 = false;  // kernels read x as bf16, k padded to even (row stride in bf16 elements)
  TileKernel kernels[kMaxTileRows][kMaxTilePanels] = {};  // [rows - 1][np - 1]
};

// Runs run(row_begin, row_end, panel_begin, panel_end) over the m x panels grid: inline when one
// thread or fewer than ~2^15 multiply-adds, else statically over groups of panels_per_tile panels
// (each thread streams its own share of the weights) when there are enough, else over rows. No
// output's k-chain is ever split.
void SplitGemm(ThreadPool* pool, int64_t m, int64_t panels, int64_t panels_per_tile, int64_t macs,
               const std::function<void(int64_t, int64_t, int64_t, int64_t)>& run);

const KernelSet& GemmKernelsScalar(WeightType type);
const KernelSet& GemmKernelsAvx2(WeightType type);
// m: rows of the call; picks the tile shape (every shape gives the same per-output summation).
const KernelSet& GemmKernelsAvx512(WeightType type, int64_t m = 1);
const KernelSet& GemmKernelsAvx512Bf16(WeightType type);

}  // namespace astr::cpu::internal

namespace astr::cpu::internal {

// Fills kernels[r - 1][p - 1] = &Tile<r, p>::Run for r <= R, p <= P. Tile lives in an ISA file's
// anonymous namespace, so each instantiation is private to the file compiled with that ISA's flags.
template <template <int, int> class Tile, int R, int P>
void FillKernelRow(KernelSet* set) {
  if constexpr (P >= 1) {
    set->kernels[R - 1][P - 1] = &Tile<R, P>::Run;
    FillKernelRow<Tile, R, P - 1>(set);
  }
}

template <template <int, int> class Tile, int R, int P>
void FillKernelTable(KernelSet* set) {
  if constexpr (R >= 1) {
    FillKernelRow<Tile, R, P>(set);
    FillKernelTable<Tile, R - 1, P>(set);
  }
}

template <template <int, int> class Tile, int MaxRows, int PanelsPerTile>
KernelSet MakeKernelSet(bool x_bf16) {
  static_assert(MaxRows <= kMaxTileRows && PanelsPerTile <= kMaxTilePanels);
  KernelSet set;
  set.max_rows = MaxRows;
  set.panels_per_tile = PanelsPerTile;
  set.x_bf16 = x_bf16;
  FillKernelTable<Tile, MaxRows, PanelsPerTile>(&set);
  return set;
}

}  // namespace astr::cpu::internal
