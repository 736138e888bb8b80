// Paged decode attention on the GPU: one query token per batch entry against its paged KV, split
// along the KV axis (split-KV / flash-decoding) so that short batches still fill the GPU, with the
// query heads of a GQA group packed into the rows of one tensor-core MMA tile and K/V tiles
// streamed through a multi-stage cp.async pipeline. The new token's K/V is appended to the pool by
// the kernel itself (fused append). A second kernel combines the splits.
//
// Graph capture: the grid depends only on (batch, num_splits, num_kv_heads) — never on KV lengths —
// so one captured launch serves every step of a batch-size bucket. Each CTA reads its entry's KV
// length from the device arrays and returns at once if its split is empty.
//
// Splitting: entry b attends to KV positions [lo, kv_len) (lo = 0, or kv_len - sliding_window with
// a window). That range is cut into num_splits chunks of ceil(span / num_splits) positions rounded
// up to the kernel's KV tile (64 positions); split s covers [lo + s * chunk, lo + (s+1) * chunk),
// clipped to kv_len, and may be empty. The combine kernel always runs, also for num_splits == 1:
// one code path, and its cost (batch * num_heads * head_dim floats) is small next to the KV reads.
//
// Fused append invariant: when out_slots[b] >= 0, the new K/V row of entry b is the entry's last KV
// position (kv_len - 1) and out_slots[b] is that position's slot. No CTA reads that slot from the
// pool: the CTA (one per kv head) whose split holds position kv_len - 1 takes the row from
// k_new / v_new directly and is also the only one that writes it to the pool. So there is no
// ordering between the write and any read, and the pool holds the new bits after the launch. The
// slot must not be mapped by another entry's page table (pages being written are private to their
// sequence). Entries with no pages (padding) append nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kv_layout.h"

namespace astr::cuda {

// Alignment: q, k_new, v_new and the pools must be 16-byte aligned and q_stride / kv_new_stride
// multiples of 8 elements (rows are moved in 16-byte pieces); LaunchPagedDecode checks this.
struct PagedDecodeArgs {
  AttentionDims dims;  // sm_scale must be > 0
  PagedKv kv;          // kv_last_page_len[b] in [1, page_size] for every entry with pages
  KvIndex index;
  int batch = 0;  // entries launched (a graph bucket: entries past the real batch have no pages)

  const bf16* q = nullptr;  // [batch, num_heads, head_dim], row stride q_stride elements
  int64_t q_stride = 0;
  // Fused append: entry b's new K/V row ([num_kv_heads, head_dim], row stride kv_new_stride) is
  // written to slot out_slots[b] (page * page_size + offset); a slot < 0 appends nothing (the last
  // position is then read from the pool as is). The new token is the entry's last KV position.
  // out_slots == nullptr: no entry appends (k_new / v_new are not read).
  const bf16* k_new = nullptr;  // [batch, num_kv_heads, head_dim]
  const bf16* v_new = nullptr;  // [batch, num_kv_heads, head_dim]
  int64_t kv_new_stride = 0;
  const int64_t* out_slots = nullptr;  // [batch]

  int num_splits = 1;  // from ChooseDecodeSplits; 1 <= num_splits <= kMaxDecodeSplits
  // The cp.async pipeline's depth: 2 or 3 (PagedDecodeStages for the device); 0: 3 where
  // head_dim <= 128, else 2.
  int stages = 0;
  // Per-split results: o_partial is the split's softmax-normalized output; lse_partial the base-2
  // log-sum-exp of its scaled scores (log2(e) * sm_scale * q.k), -inf for an empty split (whose
  // o_partial row is then not written and not read).
  float* o_partial = nullptr;    // [batch, num_heads, num_splits, head_dim] workspace
  float* lse_partial = nullptr;  // [batch, num_heads, num_splits] workspace
  bf16* out = nullptr;           // [batch, num_heads, head_dim], row stride out_stride (zeros for
                                 // padding entries)
  int64_t out_stride = 0;
};

inline constexpr int kMaxDecodeSplits = 64;

// True if the kernels are compiled for this shape: head_dim 32, 64, 128 or 256; num_heads a
// multiple of num_kv_heads with a GQA group (num_heads / num_kv_heads) of 1..16; sliding_window
// >= 0. Fills `why` (a static string) otherwise.
bool SupportsPagedDecode(const AttentionDims& dims, const char** why);

// The split count for a batch: enough CTAs (batch * num_kv_heads * splits) to cover the GPU's SMs
// about twice, at most kMaxDecodeSplits, at least 1. A pure function of its arguments (so a graph
// bucket always gets the same value). Host code; unit-tested on the CPU.
int ChooseDecodeSplits(int batch, int num_kv_heads, int num_sms);

// Elements of o_partial / lse_partial for a launch (workspace sizing).
inline int64_t DecodePartialOutFloats(int batch, const AttentionDims& d, int num_splits) {
  return static_cast<int64_t>(batch) * d.num_heads * num_splits * d.head_dim;
}
inline int64_t DecodePartialLseFloats(int batch, const AttentionDims& d, int num_splits) {
  return static_cast<int64_t>(batch) * d.num_heads * num_splits;
}

// Dynamic shared memory one decode CTA takes for this head_dim and pipeline depth (0 if either is
// unsupported); the device's per-block opt-in limit must allow it. 3 stages fit A100 / H100 / H200
// up to head_dim 128 (and 256 on H100 / H200); the 99 KB sm_86 / sm_89 parts take 2 stages at
// head_dim 128 and cannot run 256.
size_t PagedDecodeSharedBytes(int head_dim, int stages);
// The deepest pipeline (3, else 2 stages) whose dynamic shared memory fits `max_shared_bytes` (the
// device's cudaDevAttrMaxSharedMemoryPerBlockOptin); 0 if none does or head_dim is not supported.
int PagedDecodeStages(int head_dim, size_t max_shared_bytes);

// Enqueues append + split attention + combine on `stream`. Allocates nothing. Returns
// cudaErrorInvalidValue for an unsupported shape or bad argument (checked on the host before any
// CUDA call), else the launch error. batch == 0 enqueues nothing.
cudaError_t LaunchPagedDecode(const PagedDecodeArgs& args, cudaStream_t stream);

}  // namespace astr::cuda
