// Paged prefill attention (see paged_prefill.h), FlashAttention-2 style.
//
// One CTA = one work item (entry b, query tile of kPrefillTileRows rows) x one query head h; four
// warps, warp w owning tile rows [16w, 16w + 16). The Q tile is loaded once; K/V tiles of kKvRows
// positions are streamed from the pages through a two-stage cp.async pipeline into padded shared
// memory. Per K/V tile each warp computes S = Q K^T (mma.sync m16n8k16, bf16 in, f32 accumulate;
// fragments from ldmatrix), masks it by absolute position, updates the online softmax in f32 and
// accumulates O += P V (P rounded to bf16, V fragments from ldmatrix.trans).
//
// Positions: tile row r (0 <= r < num_rows) is query row t = row_begin + r at position
//   q_pos(r) = q_first + r,  q_first = kv_len - (qo_end - row_begin),
// and sees KV positions [lo(q_pos), q_pos], lo(p) = 0 or p - window + 1. The CTA visits KV
// positions [kv_lo, kv_hi) = [max(0, lo(q_first)), q_last + 1): tiles past the last row or before
// the window of the first row are never loaded. Positions >= kv_hi inside the last tile are
// zero-filled (never read from memory) and masked.
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/paged_prefill.h"
#include "kernels/cuda/ptx.cuh"

namespace astr::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kPrefillTileRows;
static_assert(kRows == kWarps * 16, "each warp owns one m16 slab of query rows");

template <int D>
struct Traits {
  static_assert(D % 16 == 0 && D >= 32, "head_dim must be a multiple of 16");
  // K/V positions per pipeline stage. 64 keeps the S fragment at 32 floats per thread; head_dim
  // 256 halves it so that the 128-float O accumulator still fits in registers.
  static constexpr int kKvRows = D <= 128 ? 64 : 32;
  // Shared-memory row stride in elements. The 16-byte pad moves each row by 16 bytes modulo 128,
  // so the 8 row addresses of one ldmatrix phase hit 8 distinct 16-byte bank groups (no conflicts).
  static constexpr int kStride = D + 8;
  // Q fragments live in registers up to head_dim 128 (32 regs); at 256 they would cost 64
  // registers next to the 128-register accumulator, so they are re-read from shared memory.
  static constexpr bool kQInRegs = D <= 128;
  static constexpr int kChunksPerRow = D / 8;  // 16-byte chunks in one row of head_dim bf16
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0, "a load pass covers whole rows");
  static_assert(kRows % kRowsPerPass == 0 && kKvRows % kRowsPerPass == 0, "whole passes");
  // sQ [kRows][kStride], then sK [2][kKvRows][kStride], then sV [2][kKvRows][kStride].
  static constexpr int kSmemElems = (kRows + 4 * kKvRows) * kStride;
  static constexpr size_t kSmemBytes = kSmemElems * sizeof(bf16);
};

using ptx::CpAsyncCommit;
using ptx::CpAsyncWait;
using ptx::LdMatrixX4;
using ptx::LdMatrixX4Trans;
using ptx::Mma16816;
using ptx::PackBf16;
using ptx::SmemAddr;

// 16-byte global -> shared copy; with valid == false nothing is read and the destination is
// zero-filled. `src` must still be a valid address; callers pass the buffer base.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  ptx::CpAsync16(dst, src, valid ? 16 : 0);
}

// ---- Per-CTA geometry -----------------------------------------------------------------------

// What one CTA needs to know about its work item; every thread computes the same values.
struct TileGeometry {
  int row_begin = 0;               // absolute query row of tile row 0
  int num_rows = 0;                // valid tile rows, 1..kRows
  int q_first = 0;                 // position of tile row 0
  int kv_lo = 0;                   // first KV position visited (>= 0)
  int kv_hi = 0;                   // one past the last KV position visited (<= kv_len)
  int head = 0;                    // query head (blockIdx.x)
  int kv_head = 0;                 // KV head read by this query head
  const int32_t* pages = nullptr;  // [num entry pages] this entry's page ids
};

__device__ __forceinline__ TileGeometry ComputeGeometry(const PagedPrefillArgs& a) {
  TileGeometry g;
  const int b = a.tile_entry[blockIdx.y];
  g.row_begin = a.tile_row_begin[blockIdx.y];
  const int qo_end = a.qo_indptr[b + 1];
  g.num_rows = min(kRows, qo_end - g.row_begin);
  const int page_begin = a.index.kv_indptr[b];
  const int num_pages = a.index.kv_indptr[b + 1] - page_begin;
  const int page_size = a.kv.page_size;
  // An entry without pages has no KV; the length is clamped to its pages so that a bad
  // kv_last_page_len can never index past the entry's page list.
  int kv_len = num_pages > 0 ? (num_pages - 1) * page_size + a.index.kv_last_page_len[b] : 0;
  kv_len = max(0, min(kv_len, num_pages * page_size));
  g.q_first = kv_len - (qo_end - g.row_begin);
  const int q_last = g.q_first + g.num_rows - 1;  // <= kv_len - 1 since row_end <= qo_end
  const int window = a.dims.sliding_window;
  g.kv_lo = window > 0 ? max(0, g.q_first - window + 1) : 0;
  g.kv_hi = max(0, q_last + 1);  // 0 when every row precedes position 0 (malformed batch)
  g.head = blockIdx.x;
  g.kv_head = g.head / (a.dims.num_heads / a.dims.num_kv_heads);
  g.pages = a.index.kv_page_indices + page_begin;
  return g;
}

// ---- Loads ----------------------------------------------------------------------------------

// Q tile rows [0, kRows) of head h into sQ; rows >= num_rows are zero-filled.
template <int D>
__device__ __forceinline__ void LoadQ(const PagedPrefillArgs& a, const TileGeometry& g, bf16* sQ) {
  using T = Traits<D>;
  const int c = threadIdx.x % T::kChunksPerRow;
#pragma unroll
  for (int p = 0; p < kRows / T::kRowsPerPass; ++p) {
    const int r = threadIdx.x / T::kChunksPerRow + p * T::kRowsPerPass;
    const bool valid = r < g.num_rows;
    const bf16* src = valid ? a.q + static_cast<int64_t>(g.row_begin + r) * a.q_stride +
                                  static_cast<int64_t>(g.head) * D + c * 8
                            : a.q;
    CpAsync16(SmemAddr(sQ + r * T::kStride + c * 8), src, valid);
  }
}

// K and V rows for positions [j0, j0 + kKvRows) into one pipeline stage. Positions >= kv_hi, and
// (defensively) page ids outside the pool, are zero-filled and never read.
template <int D>
__device__ __forceinline__ void LoadKvTile(const PagedPrefillArgs& a, const TileGeometry& g, int j0,
                                           bf16* sK, bf16* sV) {
  using T = Traits<D>;
  const int c = threadIdx.x % T::kChunksPerRow;
  const int page_size = a.kv.page_size;
  const int64_t slot_elems = static_cast<int64_t>(a.dims.num_kv_heads) * D;
  const int64_t head_offset = static_cast<int64_t>(g.kv_head) * D + c * 8;
#pragma unroll
  for (int p = 0; p < T::kKvRows / T::kRowsPerPass; ++p) {
    const int r = threadIdx.x / T::kChunksPerRow + p * T::kRowsPerPass;
    const int j = j0 + r;  // >= kv_lo >= 0
    bool valid = j < g.kv_hi;
    int64_t offset = 0;
    if (valid) {
      // j < kv_hi <= kv_len <= num_pages * page_size, so j / page_size indexes the entry's pages.
      const int page = g.pages[j / page_size];
      valid = page >= 0 && page < a.kv.num_pages;
      offset = (static_cast<int64_t>(page) * page_size + j % page_size) * slot_elems + head_offset;
    }
    const uint32_t dst = static_cast<uint32_t>((r * T::kStride + c * 8) * sizeof(bf16));
    CpAsync16(SmemAddr(sK) + dst, valid ? a.kv.k + offset : a.kv.k, valid);
    CpAsync16(SmemAddr(sV) + dst, valid ? a.kv.v + offset : a.kv.v, valid);
  }
}

// ---- Per-warp compute -----------------------------------------------------------------------

// Online-softmax state and output accumulator of one warp's 16 rows. Lane l holds rows l/4 and
// l/4 + 8 (index 0 and 1 of m, l) and, per 8-column block of head_dim, the accumulator fragment.
template <int D>
struct WarpState {
  float o[D / 8][4];
  float m[2];  // running max of scaled scores (log2 domain), -inf before any visible key
  float l[2];  // this lane's part of the running sum (the quad's four parts add up at the end)
};

// Processes one K/V tile for the warp: S = Q K^T, mask, online softmax, O += P V.
// q_frag: the warp's Q fragments (used when kQInRegs); sQw: the warp's 16 rows of sQ otherwise.
template <int D>
__device__ __forceinline__ void ProcessKvTile(WarpState<D>& st, const uint32_t (&q_frag)[D / 16][4],
                                              const bf16* sQw, const bf16* sK, const bf16* sV,
                                              int j0, int warp_q_first, int window,
                                              ScoreToLog2 score) {
  using T = Traits<D>;
  constexpr int kN = T::kKvRows;
  const int lane = threadIdx.x % 32;
  float s[kN / 8][4];
#pragma unroll
  for (int nb = 0; nb < kN / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;

    // S = Q K^T. K is stored [position][dim]: the non-transposed 8x8 blocks are exactly the B
    // fragments (B[k = dim][n = position]). Matrices of one x4 load: (pos 0-7, dim 0-7),
    // (pos 0-7, dim 8-15), (pos 8-15, dim 0-7), (pos 8-15, dim 8-15).
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qa[4];
    if constexpr (T::kQInRegs) {
      qa[0] = q_frag[kk][0], qa[1] = q_frag[kk][1], qa[2] = q_frag[kk][2], qa[3] = q_frag[kk][3];
    } else {
      LdMatrixX4(qa, SmemAddr(sQw + (lane % 16) * T::kStride + kk * 16 + (lane / 16) * 8));
    }
#pragma unroll
    for (int nb2 = 0; nb2 < kN / 16; ++nb2) {
      uint32_t kb[4];
      const int row = nb2 * 16 + (lane / 16) * 8 + lane % 8;
      const int col = kk * 16 + ((lane / 8) % 2) * 8;
      LdMatrixX4(kb, SmemAddr(sK + row * T::kStride + col));
      Mma16816(s[2 * nb2], qa, kb[0], kb[1]);
      Mma16816(s[2 * nb2 + 1], qa, kb[2], kb[3]);
    }
  }

  // Mask by absolute position and scale into the log2 domain. Element e of block nb is row
  // lane/4 + 8*(e/2), column nb*8 + 2*(lane%4) + e%2.
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nb = 0; nb < kN / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int q_pos = warp_q_first + lane / 4 + 8 * (e / 2);
      const int j = j0 + nb * 8 + 2 * (lane % 4) + e % 2;
      const bool visible = j <= q_pos && (window <= 0 || j > q_pos - window);
      s[nb][e] = visible ? score(s[nb][e]) : -INFINITY;
      row_max[e / 2] = fmaxf(row_max[e / 2], s[nb][e]);
    }
  }
  // The four lanes of a quad share a row.
  float m_use[2], corr[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 1));
    row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 2));
    const float m_new = fmaxf(st.m[i], row_max[i]);
    // A row with no visible key yet keeps m = -inf; subtracting 0 instead keeps exp2 at 0 (no NaN
    // from -inf - -inf) and the rescale of its (zero) accumulator at 0.
    m_use[i] = m_new == -INFINITY ? 0.0f : m_new;
    corr[i] = exp2f(st.m[i] - m_use[i]);
    st.m[i] = m_new;
  }
  float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nb = 0; nb < kN / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // Rounded to bf16 here (as the P·V MMA will see it), so that the softmax denominator sums
      // exactly the weights applied to V.
      s[nb][e] = __bfloat162float(__float2bfloat16_rn(exp2f(s[nb][e] - m_use[e / 2])));
      row_sum[e / 2] += s[nb][e];
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) st.l[i] = st.l[i] * corr[i] + row_sum[i];
#pragma unroll
  for (int db = 0; db < D / 8; ++db) {
    st.o[db][0] *= corr[0], st.o[db][1] *= corr[0];
    st.o[db][2] *= corr[1], st.o[db][3] *= corr[1];
  }

  // O += P V. The S accumulators of column blocks 2kb and 2kb+1 are the A fragment of the 16
  // positions of step kb. V is stored [position][dim] = B[k][n], so B fragments come from the
  // transposed 8x8 blocks: (pos 0-7, dim 0-7), (pos 8-15, dim 0-7), (pos 0-7, dim 8-15),
  // (pos 8-15, dim 8-15).
#pragma unroll
  for (int kb = 0; kb < kN / 16; ++kb) {
    const uint32_t pa[4] = {
        PackBf16(s[2 * kb][0], s[2 * kb][1]), PackBf16(s[2 * kb][2], s[2 * kb][3]),
        PackBf16(s[2 * kb + 1][0], s[2 * kb + 1][1]), PackBf16(s[2 * kb + 1][2], s[2 * kb + 1][3])};
#pragma unroll
    for (int db2 = 0; db2 < D / 16; ++db2) {
      uint32_t vb[4];
      const int row = kb * 16 + ((lane / 8) % 2) * 8 + lane % 8;
      const int col = db2 * 16 + (lane / 16) * 8;
      LdMatrixX4Trans(vb, SmemAddr(sV + row * T::kStride + col));
      Mma16816(st.o[2 * db2], pa, vb[0], vb[1]);
      Mma16816(st.o[2 * db2 + 1], pa, vb[2], vb[3]);
    }
  }
}

// Normalizes the warp's rows, stages them as bf16 in the warp's own rows of sQ (no other warp
// reads them), then writes the valid rows with 16-byte stores.
template <int D>
__device__ __forceinline__ void StoreOutput(const PagedPrefillArgs& a, const TileGeometry& g,
                                            WarpState<D>& st, bf16* sQw, int warp_row0) {
  using T = Traits<D>;
  const int lane = threadIdx.x % 32;
  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    st.l[i] += __shfl_xor_sync(0xffffffffu, st.l[i], 1);
    st.l[i] += __shfl_xor_sync(0xffffffffu, st.l[i], 2);
    inv[i] = st.l[i] > 0.0f ? 1.0f / st.l[i] : 0.0f;  // no visible key: zeros
    if (a.dims.sinks != nullptr && st.l[i] > 0.0f) {
      // The head's sink joins the denominator (log2 domain, as m), both relative to the larger.
      const float sink = a.dims.sinks[g.head] * 1.4426950408889634f;
      const float mx = fmaxf(st.m[i], sink), keep = exp2f(st.m[i] - mx);
      inv[i] = keep / (st.l[i] * keep + exp2f(sink - mx));
    }
  }
#pragma unroll
  for (int db = 0; db < D / 8; ++db) {
    const int col = db * 8 + 2 * (lane % 4);
    uint32_t* lo = reinterpret_cast<uint32_t*>(sQw + (lane / 4) * T::kStride + col);
    uint32_t* hi = reinterpret_cast<uint32_t*>(sQw + (lane / 4 + 8) * T::kStride + col);
    *lo = PackBf16(st.o[db][0] * inv[0], st.o[db][1] * inv[0]);
    *hi = PackBf16(st.o[db][2] * inv[1], st.o[db][3] * inv[1]);
  }
  __syncwarp();
  for (int i = lane; i < 16 * T::kChunksPerRow; i += 32) {
    const int r = i / T::kChunksPerRow, c = i % T::kChunksPerRow;
    if (warp_row0 + r >= g.num_rows) continue;
    bf16* dst = a.out + static_cast<int64_t>(g.row_begin + warp_row0 + r) * a.out_stride +
                static_cast<int64_t>(g.head) * D + c * 8;
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(sQw + r * T::kStride + c * 8);
  }
}

// ---- Kernel ---------------------------------------------------------------------------------

// grid (num_heads, num_tiles), block kThreads, dynamic smem Traits<D>::kSmemBytes. Heads are the
// fast grid axis: the CTAs of one work item start together (in plan order, heaviest first), and
// the query heads of a GQA group, which read the same K/V pages, run side by side (L2 reuse).
template <int D>
__global__ void __launch_bounds__(kThreads) PagedPrefillKernel(const PagedPrefillArgs a) {
  using T = Traits<D>;
  ASTR_DYNAMIC_SMEM(smem_raw);
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kRows][kStride]
  bf16* sK = sQ + kRows * T::kStride;            // [2][kKvRows][kStride]
  bf16* sV = sK + 2 * T::kKvRows * T::kStride;   // [2][kKvRows][kStride]
  constexpr int kStageElems = T::kKvRows * T::kStride;

  const TileGeometry g = ComputeGeometry(a);
  if (g.num_rows <= 0) return;  // never from BuildPrefillPlan; CTA-uniform
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row0 = warp * 16;
  bf16* sQw = sQ + warp_row0 * T::kStride;
  // Valid rows of this warp and their positions; a warp past the last valid row only helps load.
  const bool warp_active = warp_row0 < g.num_rows;
  const int warp_q_first = g.q_first + warp_row0;
  const int warp_q_last = g.q_first + min(warp_row0 + 16, g.num_rows) - 1;
  const int window = a.dims.sliding_window;
  const ScoreToLog2 score = ScoreToLog2::Of(a.dims.sm_scale, a.dims.softcap);
  const int num_kv_tiles =
      g.kv_hi > g.kv_lo ? (g.kv_hi - g.kv_lo + T::kKvRows - 1) / T::kKvRows : 0;

  // Pipeline: group 0 = Q, group 1 = K/V tile 0 (empty if there is none), then one group per
  // iteration (tile it + 1, or empty). Waiting for "all but the newest group" at iteration it
  // therefore waits exactly for tile it; the trailing __syncthreads of iteration it - 1 guarantees
  // that stage (it + 1) % 2 is no longer read when its next load is issued.
  LoadQ<D>(a, g, sQ);
  CpAsyncCommit();
  if (num_kv_tiles > 0) LoadKvTile<D>(a, g, g.kv_lo, sK, sV);
  CpAsyncCommit();
  CpAsyncWait<1>();
  __syncthreads();

  uint32_t q_frag[D / 16][4];
  if constexpr (T::kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      LdMatrixX4(q_frag[kk], SmemAddr(sQw + (lane % 16) * T::kStride + kk * 16 + (lane / 16) * 8));
    }
  }
  WarpState<D> st;
#pragma unroll
  for (int db = 0; db < D / 8; ++db) st.o[db][0] = st.o[db][1] = st.o[db][2] = st.o[db][3] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;

  for (int it = 0; it < num_kv_tiles; ++it) {
    if (it + 1 < num_kv_tiles) {
      const int next = (it + 1) % 2;
      LoadKvTile<D>(a, g, g.kv_lo + (it + 1) * T::kKvRows, sK + next * kStageElems,
                    sV + next * kStageElems);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const int j0 = g.kv_lo + it * T::kKvRows;
    // Warp-uniform skip of a tile no row of the warp can see (past its last row, or wholly before
    // the window of its first row): processing it would change nothing (all scores masked).
    const bool visible =
        j0 <= warp_q_last && (window <= 0 || j0 + T::kKvRows - 1 > warp_q_first - window);
    if (warp_active && visible) {
      const int stage = it % 2;
      ProcessKvTile<D>(st, q_frag, sQw, sK + stage * kStageElems, sV + stage * kStageElems, j0,
                       warp_q_first, window, score);
    }
    __syncthreads();
  }
  CpAsyncWait<0>();  // only empty groups can remain; keeps the exit state obvious
  __syncthreads();
  if (warp_active) StoreOutput<D>(a, g, st, sQw, warp_row0);
}

template <int D>
cudaError_t LaunchPrefillFor(const PagedPrefillArgs& a, cudaStream_t stream) {
  constexpr size_t kSmem = Traits<D>::kSmemBytes;
  cudaError_t err = cudaFuncSetAttribute(
      PagedPrefillKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(a.dims.num_heads), static_cast<unsigned>(a.num_tiles));
  ASTR_LAUNCH_KERNEL(PagedPrefillKernel<D>, grid, kThreads, kSmem, stream)(a);
  return cudaGetLastError();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

constexpr int kMaxGridY = 65535;  // num_tiles is the grid's y extent

bool ValidArgs(const PagedPrefillArgs& a) {
  const int64_t row = static_cast<int64_t>(a.dims.num_heads) * a.dims.head_dim;
  return a.num_tiles >= 0 && a.num_tiles <= kMaxGridY && a.batch >= 0 && a.q != nullptr &&
         a.out != nullptr && a.qo_indptr != nullptr && a.tile_entry != nullptr &&
         a.tile_row_begin != nullptr && a.index.kv_indptr != nullptr &&
         a.index.kv_page_indices != nullptr && a.index.kv_last_page_len != nullptr &&
         a.kv.k != nullptr && a.kv.v != nullptr && a.kv.page_size >= 1 && a.kv.num_pages >= 1 &&
         a.q_stride >= row && a.out_stride >= row && a.q_stride % 8 == 0 && a.out_stride % 8 == 0 &&
         Aligned16(a.q) && Aligned16(a.out) && Aligned16(a.kv.k) && Aligned16(a.kv.v);
}

}  // namespace

bool SupportsPagedPrefill(const AttentionDims& d, const char** why) {
  const char* reason = nullptr;
  if (d.head_dim != 32 && d.head_dim != 64 && d.head_dim != 128 && d.head_dim != 256) {
    reason = "paged prefill: head_dim must be 32, 64, 128 or 256";
  } else if (d.num_heads < 1 || d.num_kv_heads < 1 || d.num_heads % d.num_kv_heads != 0) {
    reason = "paged prefill: num_heads must be a positive multiple of num_kv_heads";
  } else if (d.sliding_window < 0) {
    reason = "paged prefill: sliding_window must be >= 0";
  } else if (!(d.softcap >= 0.0f) || !std::isfinite(d.softcap)) {
    reason = "paged prefill: softcap must be >= 0 and finite";
  }
  if (reason != nullptr && why != nullptr) *why = reason;
  return reason == nullptr;
}

size_t PagedPrefillSharedBytes(int head_dim) {
  switch (head_dim) {
    case 32:
      return Traits<32>::kSmemBytes;
    case 64:
      return Traits<64>::kSmemBytes;
    case 128:
      return Traits<128>::kSmemBytes;
    case 256:
      return Traits<256>::kSmemBytes;
    default:
      return 0;
  }
}

cudaError_t LaunchPagedPrefill(const PagedPrefillArgs& args, cudaStream_t stream) {
  if (!SupportsPagedPrefill(args.dims, nullptr)) return cudaErrorInvalidValue;
  if (args.num_tiles == 0) return cudaSuccess;
  if (!ValidArgs(args)) return cudaErrorInvalidValue;
  switch (args.dims.head_dim) {
    case 32:
      return LaunchPrefillFor<32>(args, stream);
    case 64:
      return LaunchPrefillFor<64>(args, stream);
    case 128:
      return LaunchPrefillFor<128>(args, stream);
    case 256:
      return LaunchPrefillFor<256>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace astr::cuda
