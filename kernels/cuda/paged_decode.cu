// Paged decode attention: split-KV kernel with fused append, and the combine kernel. See
// paged_decode.h for the contract and paged_decode_impl.cuh for the per-warp tile math.
//
// PagedDecodeKernel<head_dim>: grid (num_splits, batch, num_kv_heads), 128 threads. A CTA computes
// the GQA group of kv head `kvh` of entry `b` (group <= 16 query heads = the 16 MMA rows, padded
// with zero rows) over its split's chunk of KV positions:
//   1. entry geometry from the device arrays (kv_len, window start, chunk); an empty split writes
//      lse = -inf for its heads and returns,
//   2. fused append (only the CTA whose chunk holds position kv_len - 1, see paged_decode.h),
//   3. Q to shared memory, then the chunk's 64-position tiles through a kStages-deep cp.async
//      pipeline (kStages - 1 tiles in flight while one is computed); each of the 4 warps runs
//      QK^T, online softmax and P.V on tensor cores over its 16 positions of every tile,
//   4. the 4 warps' states merge through shared memory into the split's normalized output and its
//      base-2 log-sum-exp.
// CombineKernel: grid (num_heads, batch), merges the non-empty splits of each (entry, head) into
// the bf16 output (zeros when every split is empty: padding entries).
#include <algorithm>
#include <cmath>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/paged_decode.h"
#include "kernels/cuda/paged_decode_impl.cuh"

namespace astr::cuda {
namespace decode {
namespace {

// The KV positions [begin, end) one CTA attends to. begin >= end: the split is empty.
struct SplitRange {
  const int32_t* pages;  // the entry's page table: [num_pages_b]
  int kv_len;
  int begin;
  int end;
};

__device__ __forceinline__ SplitRange EntrySplit(const PagedDecodeArgs& a, int b, int split,
                                                 int tile_tokens) {
  const int first_page = a.index.kv_indptr[b];
  const int num_pages = a.index.kv_indptr[b + 1] - first_page;
  SplitRange r;
  r.pages = a.index.kv_page_indices + first_page;
  r.kv_len = num_pages > 0 ? (num_pages - 1) * a.kv.page_size + a.index.kv_last_page_len[b] : 0;
  const int window = a.dims.sliding_window;
  const int lo = window > 0 ? max(0, r.kv_len - window) : 0;
  const int span = r.kv_len - lo;  // <= 0 only for padding (no pages)
  if (span <= 0) {
    r.begin = r.end = 0;
    return r;
  }
  const int per_split = (span + a.num_splits - 1) / a.num_splits;
  const int chunk = (per_split + tile_tokens - 1) / tile_tokens * tile_tokens;
  const int64_t begin = lo + static_cast<int64_t>(split) * chunk;
  r.begin = static_cast<int>(min(begin, static_cast<int64_t>(r.kv_len)));
  r.end = static_cast<int>(min(begin + chunk, static_cast<int64_t>(r.kv_len)));
  return r;
}

// The appended position of a CTA's entry: pos = kv_len - 1 with its K/V rows for this kv head, or
// pos = -1 when the entry appends nothing.
struct NewRow {
  int pos;
  const bf16* k;  // [head_dim]
  const bf16* v;  // [head_dim]
};

// Fused append (invariant in paged_decode.h): position kv_len - 1 is read from k_new / v_new by
// the one CTA whose chunk holds it, which also stores it to the pool; nobody reads the slot.
template <int kHeadDim>
__device__ __forceinline__ NewRow FusedAppend(const PagedDecodeArgs& a, const SplitRange& sr, int b,
                                              int kvh, int tid) {
  const int64_t out_slot = a.out_slots != nullptr ? a.out_slots[b] : -1;
  if (out_slot < 0) return {-1, nullptr, nullptr};
  const NewRow nr = {sr.kv_len - 1, a.k_new + b * a.kv_new_stride + kvh * kHeadDim,
                     a.v_new + b * a.kv_new_stride + kvh * kHeadDim};
  if (sr.begin <= nr.pos && nr.pos < sr.end && tid < kHeadDim / 8) {
    const int64_t off = (out_slot * a.dims.num_kv_heads + kvh) * kHeadDim + tid * 8;
    *reinterpret_cast<uint4*>(a.kv.k + off) = *reinterpret_cast<const uint4*>(nr.k + tid * 8);
    *reinterpret_cast<uint4*>(a.kv.v + off) = *reinterpret_cast<const uint4*>(nr.v + tid * 8);
  }
  return nr;
}

// Q rows of the group -> sQ [16, kRowStride]; rows >= group are zeros (their scores are 0, finite,
// and their outputs are never stored).
template <int kHeadDim>
__device__ __forceinline__ void LoadQ(bf16* sQ, const bf16* q_group /* [group, head_dim] */,
                                      int group, int tid) {
  using C = Config<kHeadDim>;
  for (int i = tid; i < C::kQRows * C::kChunks; i += C::kThreads) {
    const int r = i / C::kChunks, c = i % C::kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < group) v = *reinterpret_cast<const uint4*>(q_group + r * kHeadDim + c * 8);
    *reinterpret_cast<uint4*>(sQ + r * C::kRowStride + c * 8) = v;
  }
}

// Issues the cp.async copies of the K and V rows of tile positions [tile_begin, tile_begin + 64)
// into one stage. Row r is position p = tile_begin + r: p >= end is zero-filled (nothing read),
// p == nr.pos (the appended position) comes from nr.k / nr.v, any other position from its own
// page (a tile may span pages; page_size is any value >= 1).
template <int kHeadDim>
__device__ __forceinline__ void LoadTile(bf16* sK, bf16* sV, const PagedKv& kv,
                                         const SplitRange& sr, int num_kv_heads, int kvh,
                                         int tile_begin, const NewRow& nr, int tid) {
  using C = Config<kHeadDim>;
  constexpr int kRowsPerPass = C::kThreads / C::kChunks;
  const int c = tid % C::kChunks;
#pragma unroll
  for (int i = 0; i < C::kTileTokens / kRowsPerPass; ++i) {
    const int r = tid / C::kChunks + i * kRowsPerPass;
    const int p = tile_begin + r;
    const bf16* ks = kv.k;  // any valid address for a zero-fill
    const bf16* vs = kv.v;
    int bytes = 0;
    if (p < sr.end) {
      bytes = 16;
      if (p == nr.pos) {
        ks = nr.k + c * 8;
        vs = nr.v + c * 8;
      } else {
        const int64_t slot =
            static_cast<int64_t>(sr.pages[p / kv.page_size]) * kv.page_size + p % kv.page_size;
        const int64_t off = (slot * num_kv_heads + kvh) * kHeadDim + c * 8;
        ks = kv.k + off;
        vs = kv.v + off;
      }
    }
    CpAsync16(SmemAddr(sK + r * C::kRowStride + c * 8), ks, bytes);
    CpAsync16(SmemAddr(sV + r * C::kRowStride + c * 8), vs, bytes);
  }
}

// Merges the 4 warps' states (through `merge`, shared memory no warp reads as K/V any more) into
// the split's normalized output rows and base-2 lse for the group's heads.
template <int kHeadDim>
__device__ __forceinline__ void MergeWarps(WarpState<kHeadDim>& st, float* merge,
                                           const PagedDecodeArgs& a, int64_t part_row0, int group,
                                           int tid) {
  using C = Config<kHeadDim>;
  float* sO = merge;                                  // [kWarps, 16, head_dim]
  float* sM = sO + C::kWarps * C::kQRows * kHeadDim;  // [kWarps, 16]
  float* sL = sM + C::kWarps * C::kQRows;             // [kWarps, 16]
  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 1);
    st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 2);
  }
  float* w_o = sO + warp * C::kQRows * kHeadDim;
  if (t == 0) {
    sM[warp * C::kQRows + g] = st.m[0];
    sM[warp * C::kQRows + g + 8] = st.m[1];
    sL[warp * C::kQRows + g] = st.l[0];
    sL[warp * C::kQRows + g + 8] = st.l[1];
  }
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
    const int col = d * 8 + 2 * t;
    w_o[g * kHeadDim + col] = st.o[d][0];
    w_o[g * kHeadDim + col + 1] = st.o[d][1];
    w_o[(g + 8) * kHeadDim + col] = st.o[d][2];
    w_o[(g + 8) * kHeadDim + col + 1] = st.o[d][3];
  }
  __syncthreads();
  // A warp that saw no position has m = -inf, l = 0, o = 0 and is skipped. The chunk is not empty,
  // so some warp saw a position and mx is finite; the guard only keeps bad input from making NaN.
  for (int i = tid; i < group * kHeadDim; i += C::kThreads) {
    const int r = i / kHeadDim, d = i % kHeadDim;
    float mx = kNegInf;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) mx = fmaxf(mx, sM[w * C::kQRows + r]);
    float l = 0.0f, acc = 0.0f;
    if (mx != kNegInf) {
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) {
        const float mw = sM[w * C::kQRows + r];
        if (mw == kNegInf) continue;
        const float f = exp2f(mw - mx);
        l += sL[w * C::kQRows + r] * f;
        acc += sO[(w * C::kQRows + r) * kHeadDim + d] * f;
      }
    }
    const int64_t row = part_row0 + static_cast<int64_t>(r) * a.num_splits;  // (b, head, split)
    a.o_partial[row * kHeadDim + d] = l > 0.0f ? acc / l : 0.0f;
    if (d == 0) a.lse_partial[row] = l > 0.0f ? mx + log2f(l) : kNegInf;
  }
}

template <int kHeadDim, int kStages>
__global__ void __launch_bounds__(Config<kHeadDim>::kThreads)
    PagedDecodeKernel(const PagedDecodeArgs a, ScoreToLog2 score) {
  using C = Config<kHeadDim, kStages>;
  ASTR_DYNAMIC_SMEM(smem);
  bf16* sQ = reinterpret_cast<bf16*>(smem);    // [16, kRowStride]
  bf16* sK = sQ + C::kQElems;                  // [kStages, kTileTokens, kRowStride]
  bf16* sV = sK + C::kStages * C::kTileElems;  // [kStages, kTileTokens, kRowStride]
  const int split = blockIdx.x, b = blockIdx.y, kvh = blockIdx.z;
  const int tid = threadIdx.x;
  const int group = a.dims.num_heads / a.dims.num_kv_heads;
  const int head0 = kvh * group;
  // lse_partial index of (b, head0, split); head head0 + r adds r * num_splits.
  const int64_t part_row0 =
      (static_cast<int64_t>(b) * a.dims.num_heads + head0) * a.num_splits + split;

  const SplitRange sr = EntrySplit(a, b, split, C::kTileTokens);
  if (sr.begin >= sr.end) {  // empty split or padding entry: no output rows, lse = -inf
    if (tid < group) a.lse_partial[part_row0 + static_cast<int64_t>(tid) * a.num_splits] = kNegInf;
    return;
  }

  const NewRow nr = FusedAppend<kHeadDim>(a, sr, b, kvh, tid);
  LoadQ<kHeadDim>(sQ, a.q + b * a.q_stride + head0 * kHeadDim, group, tid);

  // Pipeline. Group i (committed in order, possibly empty) holds tile i. Before computing tile t,
  // t + kStages - 1 groups are committed; wait_group<kStages - 2> leaves at most kStages - 2 in
  // flight, so groups 0..t (tile t) have landed for this thread, and the __syncthreads makes every
  // thread's copies visible. The same barrier orders every warp's reads of tile t - 1 (stage
  // (t - 1) % kStages) before the refill of that stage with tile t + kStages - 1. Empty groups keep
  // the count uniform when the chunk has fewer tiles than stages.
  const int num_tiles = (sr.end - sr.begin + C::kTileTokens - 1) / C::kTileTokens;
#pragma unroll
  for (int i = 0; i < C::kStages - 1; ++i) {
    if (i < num_tiles) {
      LoadTile<kHeadDim>(sK + i * C::kTileElems, sV + i * C::kTileElems, a.kv, sr,
                         a.dims.num_kv_heads, kvh, sr.begin + i * C::kTileTokens, nr, tid);
    }
    CpAsyncCommit();
  }
  WarpState<kHeadDim> st;
  st.Init();
  const int warp = tid / 32, lane = tid % 32;
  for (int tile = 0; tile < num_tiles; ++tile) {
    CpAsyncWait<C::kStages - 2>();
    __syncthreads();
    const int next = tile + C::kStages - 1;
    if (next < num_tiles) {
      const int stage = next % C::kStages;
      LoadTile<kHeadDim>(sK + stage * C::kTileElems, sV + stage * C::kTileElems, a.kv, sr,
                         a.dims.num_kv_heads, kvh, sr.begin + next * C::kTileTokens, nr, tid);
    }
    CpAsyncCommit();
    const int stage = tile % C::kStages;
    const int tile_valid = min(C::kTileTokens, sr.end - (sr.begin + tile * C::kTileTokens));
    AttendTile<kHeadDim>(st, sQ, sK + stage * C::kTileElems, sV + stage * C::kTileElems, warp, lane,
                         tile_valid, score);
  }
  CpAsyncWait<0>();  // only empty groups remain; keeps the reuse below obviously safe
  __syncthreads();   // every warp is done with the K/V stages: the merge area may alias them
  MergeWarps<kHeadDim>(st, reinterpret_cast<float*>(sK), a, part_row0, group, tid);
}

// out[b, h, :] = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M) over the splits with lse_s > -inf
// (M = their max); zeros if there are none. With sinks, 2^(sink_h log2(e) - M) joins the
// denominator (M then the max of the splits' and the sink's).
__global__ void __launch_bounds__(128)
    CombineKernel(const float* o_partial /* [batch, num_heads, num_splits, head_dim] */,
                  const float* lse_partial /* [batch, num_heads, num_splits] */, int num_heads,
                  int num_splits, int head_dim, const float* sinks /* [num_heads] or null */,
                  bf16* out /* [batch, num_heads, head_dim] */, int64_t out_stride) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t row0 = (static_cast<int64_t>(b) * num_heads + h) * num_splits;
  const float* lse = lse_partial + row0;
  float mx = kNegInf;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, lse[s]);
  const bool any = mx != kNegInf;
  const float sink = sinks != nullptr ? sinks[h] * 1.4426950408889634f : kNegInf;
  if (any) mx = fmaxf(mx, sink);
  float denom = 0.0f;
  if (any) {
    for (int s = 0; s < num_splits; ++s) {
      if (lse[s] != kNegInf) denom += exp2f(lse[s] - mx);
    }
    if (sinks != nullptr) denom += exp2f(sink - mx);
  }
  bf16* out_row = out + b * out_stride + static_cast<int64_t>(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    if (any) {
      for (int s = 0; s < num_splits; ++s) {
        if (lse[s] == kNegInf) continue;  // empty split: its o_partial row was not written
        acc += exp2f(lse[s] - mx) * o_partial[(row0 + s) * head_dim + d];
      }
    }
    out_row[d] = __float2bfloat16_rn(any ? acc / denom : 0.0f);
  }
}

template <int kHeadDim, int kStages>
cudaError_t LaunchWithStages(const PagedDecodeArgs& a, cudaStream_t stream) {
  using C = Config<kHeadDim, kStages>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; cheap, and legal during capture.
  cudaError_t err = cudaFuncSetAttribute(PagedDecodeKernel<kHeadDim, kStages>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(C::kSmemBytes));
  if (err != cudaSuccess) return err;
  const ScoreToLog2 score = ScoreToLog2::Of(a.dims.sm_scale, a.dims.softcap);
  const dim3 grid(a.num_splits, a.batch, a.dims.num_kv_heads);
  constexpr auto PagedDecodeKernelStages = PagedDecodeKernel<kHeadDim, kStages>;  // one macro arg
  ASTR_LAUNCH_KERNEL(PagedDecodeKernelStages, grid, C::kThreads, C::kSmemBytes, stream)
  (a, score);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  ASTR_LAUNCH_KERNEL(CombineKernel, dim3(a.dims.num_heads, a.batch), 128, 0, stream)
  (a.o_partial, a.lse_partial, a.dims.num_heads, a.num_splits, kHeadDim, a.dims.sinks, a.out,
   a.out_stride);
  return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t LaunchForHeadDim(const PagedDecodeArgs& a, cudaStream_t stream) {
  const int stages = a.stages != 0 ? a.stages : (kHeadDim <= 128 ? 3 : 2);
  if (stages == 3) return LaunchWithStages<kHeadDim, 3>(a, stream);
  if (stages == 2) return LaunchWithStages<kHeadDim, 2>(a, stream);
  return cudaErrorInvalidValue;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Host-side argument checks beyond the shape (SupportsPagedDecode).
bool ValidArgs(const PagedDecodeArgs& a) {
  const AttentionDims& d = a.dims;
  if (a.batch < 0 || a.batch > 65535) return false;  // gridDim.y limit
  if (a.num_splits < 1 || a.num_splits > kMaxDecodeSplits) return false;
  if (!(d.sm_scale > 0.0f) || !std::isfinite(d.sm_scale)) return false;
  if (a.kv.page_size < 1 || a.kv.k == nullptr || a.kv.v == nullptr) return false;
  if (!Aligned16(a.kv.k) || !Aligned16(a.kv.v)) return false;
  if (a.index.kv_indptr == nullptr || a.index.kv_page_indices == nullptr ||
      a.index.kv_last_page_len == nullptr) {
    return false;
  }
  if (a.q == nullptr || !Aligned16(a.q) || a.q_stride % 8 != 0 ||
      a.q_stride < static_cast<int64_t>(d.num_heads) * d.head_dim) {
    return false;
  }
  if (a.out_slots != nullptr &&
      (a.k_new == nullptr || a.v_new == nullptr || !Aligned16(a.k_new) || !Aligned16(a.v_new) ||
       a.kv_new_stride % 8 != 0 ||
       a.kv_new_stride < static_cast<int64_t>(d.num_kv_heads) * d.head_dim)) {
    return false;
  }
  if (a.o_partial == nullptr || a.lse_partial == nullptr || a.out == nullptr ||
      a.out_stride < static_cast<int64_t>(d.num_heads) * d.head_dim) {
    return false;
  }
  return true;
}

}  // namespace
}  // namespace decode

bool SupportsPagedDecode(const AttentionDims& dims, const char** why) {
  const char* reason = nullptr;
  if (dims.head_dim != 32 && dims.head_dim != 64 && dims.head_dim != 128 && dims.head_dim != 256) {
    reason = "paged decode: head_dim must be 32, 64, 128 or 256";
  } else if (dims.num_kv_heads < 1 || dims.num_heads < 1 ||
             dims.num_heads % dims.num_kv_heads != 0) {
    reason = "paged decode: num_heads must be a positive multiple of num_kv_heads";
  } else if (dims.num_heads / dims.num_kv_heads > 16) {
    reason = "paged decode: GQA group (num_heads / num_kv_heads) must be at most 16";
  } else if (dims.num_kv_heads > 65535) {
    reason = "paged decode: num_kv_heads must be at most 65535 (grid z)";
  } else if (dims.sliding_window < 0) {
    reason = "paged decode: sliding_window must be >= 0";
  } else if (!(dims.softcap >= 0.0f) || !std::isfinite(dims.softcap)) {
    reason = "paged decode: softcap must be >= 0 and finite";
  }
  if (reason != nullptr && why != nullptr) *why = reason;
  return reason == nullptr;
}

size_t PagedDecodeSharedBytes(int head_dim, int stages) {
  if (stages != 2 && stages != 3) return 0;
  const bool three = stages == 3;
  switch (head_dim) {
    case 32:
      return three ? decode::Config<32, 3>::kSmemBytes : decode::Config<32, 2>::kSmemBytes;
    case 64:
      return three ? decode::Config<64, 3>::kSmemBytes : decode::Config<64, 2>::kSmemBytes;
    case 128:
      return three ? decode::Config<128, 3>::kSmemBytes : decode::Config<128, 2>::kSmemBytes;
    case 256:
      return three ? decode::Config<256, 3>::kSmemBytes : decode::Config<256, 2>::kSmemBytes;
    default:
      return 0;
  }
}

int PagedDecodeStages(int head_dim, size_t max_shared_bytes) {
  for (int stages : {3, 2}) {
    const size_t bytes = PagedDecodeSharedBytes(head_dim, stages);
    if (bytes != 0 && bytes <= max_shared_bytes) return stages;
  }
  return 0;
}

cudaError_t LaunchPagedDecode(const PagedDecodeArgs& args, cudaStream_t stream) {
  if (!SupportsPagedDecode(args.dims, nullptr) || !decode::ValidArgs(args)) {
    return cudaErrorInvalidValue;
  }
  if (args.batch == 0) return cudaSuccess;
  switch (args.dims.head_dim) {
    case 32:
      return decode::LaunchForHeadDim<32>(args, stream);
    case 64:
      return decode::LaunchForHeadDim<64>(args, stream);
    case 128:
      return decode::LaunchForHeadDim<128>(args, stream);
    case 256:
      return decode::LaunchForHeadDim<256>(args, stream);
    default:
      return cudaErrorInvalidValue;  // unreachable: SupportsPagedDecode checked head_dim
  }
}

}  // namespace astr::cuda
