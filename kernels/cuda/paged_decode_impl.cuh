// Device building blocks of the paged decode kernel (paged_decode.cu): PTX wrappers (cp.async,
// ldmatrix, mma.sync m16n8k16 bf16), the CTA's tile geometry, and the per-warp attention of one
// K/V tile. Internal to paged_decode.cu.
//
// Fragment layouts of mma.sync.m16n8k16 (g = lane / 4, t = lane % 4), as the PTX ISA defines them:
//   A (16x16 bf16, row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
//                              a3 = A[g+8][2t+8..]
//   B (16x8 bf16, B[k][n]):    b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C (16x8 f32):              c0, c1 = C[g][2t], C[g][2t+1]; c2, c3 = C[g+8][2t], C[g+8][2t+1]
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/ptx.cuh"

namespace astr::cuda::decode {

inline constexpr float kNegInf = -INFINITY;

// Shape of one CTA for a head_dim. Four warps share each K/V tile: warp w owns tile positions
// [16w, 16w + 16) and keeps its own online-softmax state over them; the warps merge at the end.
// kStagesT: the cp.async pipeline's depth. 3 keeps two tiles in flight; the launcher takes 2 where
// 3 do not fit the device's shared memory (head_dim 256 on A100, 128 on the 99 KB sm_86/89 parts).
template <int kHeadDim, int kStagesT = 3>
struct Config {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpTokens = 16;                    // one k16 step of P.V per tile
  static constexpr int kTileTokens = kWarps * kWarpTokens;  // KV positions per pipeline stage
  static constexpr int kStages = kStagesT;
  static constexpr int kQRows = 16;  // MMA rows: the GQA group's query heads, zero-padded
  // Shared rows are padded by 16 bytes so that the 8 row addresses of an ldmatrix fall into 8
  // different 16-byte bank groups (row pitch = odd multiple of 16 bytes): no bank conflicts.
  static constexpr int kRowStride = kHeadDim + 8;  // bf16 elements
  static constexpr int kChunks = kHeadDim / 8;     // 16-byte pieces per K/V/Q row
  static constexpr int kTileElems = kTileTokens * kRowStride;
  static constexpr int kQElems = kQRows * kRowStride;
  static constexpr size_t kSmemBytes = (kQElems + 2 * kStages * kTileElems) * sizeof(bf16);
  // After the KV loop the K/V stages are reused for the cross-warp merge: per warp its unnormalized
  // output [16, head_dim] and its row max / row sum [16] each.
  static constexpr size_t kMergeBytes =
      (kWarps * kQRows * kHeadDim + 2 * kWarps * kQRows) * sizeof(float);

  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(kThreads % kChunks == 0, "a pass of the tile loader covers whole rows");
  static_assert(kTileTokens % (kThreads / kChunks) == 0, "the tile loader covers whole tiles");
  static_assert(kStages >= 2, "wait_group<kStages - 2> needs at least 2 stages");
  static_assert(kMergeBytes <= 2 * kStages * kTileElems * sizeof(bf16), "merge area fits");
  static_assert(((kRowStride * sizeof(bf16)) / 16) % 2 == 1, "row pitch: odd multiple of 16 B");
};

using ptx::CpAsync16;
using ptx::CpAsyncCommit;
using ptx::CpAsyncWait;
using ptx::LdMatrixX4;
using ptx::LdMatrixX4Trans;
using ptx::Mma16816;
using ptx::SmemAddr;

// Rounds (lo, hi) to bf16, packs them (lo in the low half, the lower column of a fragment) and adds
// the rounded values to *sum, so the softmax denominator matches the weights the MMA uses.
__device__ __forceinline__ uint32_t PackBf16Sum(float lo, float hi, float* sum) {
  const uint32_t packed = ptx::PackBf16(lo, hi);
  const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&packed);
  *sum += __low2float(v) + __high2float(v);
  return packed;
}

// ---- per-warp attention ----------------------------------------------------------------------

// One warp's online-softmax state for MMA rows g and g + 8 (g = lane / 4). Scores are in the
// base-2 domain: s = log2(e) * sm_scale * q.k.
template <int kHeadDim>
struct WarpState {
  float o[kHeadDim / 8][4];  // unnormalized output, C-fragment layout per 8-column block
  float m[2];                // running row max (kNegInf until the warp has seen a position)
  float l[2];                // this thread's share of the running row sum (quad-summed at the end)

  __device__ __forceinline__ void Init() {
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[d][i] = 0.0f;
    }
    m[0] = m[1] = kNegInf;
    l[0] = l[1] = 0.0f;
  }
};

// Folds this warp's 16 positions of one tile into its state. sQ: [16, kRowStride] (rows past the
// group are zero); sK, sV: [kTileTokens, kRowStride] of this stage. Tile positions >= tile_valid
// are masked (their rows were zero-filled, so V contributes 0 * 0). Warp-uniform; no block sync.
template <int kHeadDim>
__device__ __forceinline__ void AttendTile(WarpState<kHeadDim>& st, const bf16* sQ, const bf16* sK,
                                           const bf16* sV, int warp, int lane, int tile_valid,
                                           ScoreToLog2 score) {
  using C = Config<kHeadDim>;
  const int n0 = warp * C::kWarpTokens;  // this warp's first position in the tile
  if (n0 >= tile_valid) return;          // all 16 masked: the state is unchanged
  const int t = lane & 3;
  const int mat = lane >> 3, mrow = lane & 7;  // ldmatrix: which matrix / row this lane addresses

  // S = Q K^T for the warp's 16 positions: two 8-column blocks (positions n0..+7, n0+8..+15).
  float s[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    uint32_t a[4], kb[4];
    // A = Q rows (mat & 1) * 8 + mrow, dims kk*16 + (mat >> 1) * 8: registers a0..a3.
    LdMatrixX4(a, SmemAddr(sQ + (mrow + (mat & 1) * 8) * C::kRowStride + kk * 16 + (mat >> 1) * 8));
    // B[k][n] = K[n][k]: matrices (pos +0..7, dims +0..7), (+0..7, +8..15), (+8..15, +0..7),
    // (+8..15, +8..15) = b0, b1 of block 0, b0, b1 of block 1.
    LdMatrixX4(
        kb, SmemAddr(sK + (n0 + mrow + (mat >> 1) * 8) * C::kRowStride + kk * 16 + (mat & 1) * 8));
    Mma16816(s[0], a, kb[0], kb[1]);
    Mma16816(s[1], a, kb[2], kb[3]);
  }

  // Scale to the base-2 domain, mask, and take the row max over the quad (the 4 lanes of a row).
  float mx[2] = {kNegInf, kNegInf};
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int pos = n0 + nb * 8 + 2 * t + (i & 1);
      s[nb][i] = pos < tile_valid ? score(s[nb][i]) : kNegInf;
      mx[i >> 1] = fmaxf(mx[i >> 1], s[nb][i]);
    }
  }
  float base[2], corr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(st.m[r], mx[r]);
    // base: a finite reference, so that -inf - -inf never happens (exp2(-inf - base) = 0).
    base[r] = m_new == kNegInf ? 0.0f : m_new;
    corr[r] = exp2f(st.m[r] - base[r]);
    st.m[r] = m_new;
  }

  // P = exp2(S - max) straight into the A fragment of P.V (16 rows x 16 positions):
  // a0 = (row g, pos 2t..), a1 = (row g+8, pos 2t..), a2/a3 the same for positions 8 + 2t.
  uint32_t pa[4];
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
    pa[2 * nb] = PackBf16Sum(exp2f(s[nb][0] - base[0]), exp2f(s[nb][1] - base[0]), &sum[0]);
    pa[2 * nb + 1] = PackBf16Sum(exp2f(s[nb][2] - base[1]), exp2f(s[nb][3] - base[1]), &sum[1]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * corr[r] + sum[r];

    // O = O * corr + P V. B[k][n] = V[pos k][dim n], read transposed: matrices (pos +0..7, dims
    // +0..7), (+8..15, +0..7), (+0..7, +8..15), (+8..15, +8..15) = b0, b1 of two 8-dim blocks.
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
    st.o[d][0] *= corr[0];
    st.o[d][1] *= corr[0];
    st.o[d][2] *= corr[1];
    st.o[d][3] *= corr[1];
  }
#pragma unroll
  for (int dd = 0; dd < kHeadDim / 16; ++dd) {
    uint32_t vb[4];
    LdMatrixX4Trans(
        vb, SmemAddr(sV + (n0 + mrow + (mat & 1) * 8) * C::kRowStride + dd * 16 + (mat >> 1) * 8));
    Mma16816(st.o[2 * dd], pa, vb[0], vb[1]);
    Mma16816(st.o[2 * dd + 1], pa, vb[2], vb[3]);
  }
}

}  // namespace astr::cuda::decode
