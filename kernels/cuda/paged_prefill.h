// Paged prefill attention on the GPU, FlashAttention-2 style: a ragged batch of query chunks, each
// attending causally to its entry's paged KV (cached prefix + this step's tokens), with online
// softmax over K/V tiles read from the pages, tensor-core MMA, bf16 in / f32 accumulation.
//
// The host builds a plan (plain struct, testable on the CPU) listing the CTA work items — one per
// (entry, query tile) — and uploads it with the step metadata; the kernel only reads it. One CTA
// handles one work item for one query head: grid (num_heads, num_tiles), 4 warps of 16 query rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/kv_layout.h"

namespace astr::cuda {

// Query rows (tokens) per work item, for every supported head_dim (4 warps x 16 MMA rows).
inline constexpr int kPrefillTileRows = 64;

// Work items of one prefill launch: item i covers query rows
// [tile_row_begin[i], min(tile_row_begin[i] + kPrefillTileRows, qo_indptr[entry + 1])) of entry
// tile_entry[i]. Every item covers at least one row.
struct PrefillPlan {
  std::vector<int32_t> tile_entry;      // [num_tiles]
  std::vector<int32_t> tile_row_begin;  // [num_tiles] absolute row index (into q / out)
  int num_tiles() const { return static_cast<int>(tile_entry.size()); }
};

// Query rows (tokens) per work item: kPrefillTileRows whatever the head_dim.
int PrefillTileRows(int head_dim);

// Host: the plan for a batch with query ranges qo_indptr[0..batch] (host copy). Entries by
// descending query length (stable: ties keep batch order), so the long entries start early; within
// an entry, tiles from the last rows to the first (later rows attend to more keys). Entries with no
// query rows (padding) get no tiles. Unit-tested on the CPU.
PrefillPlan BuildPrefillPlan(const int32_t* qo_indptr, int batch, int head_dim);

// Upper bound of num_tiles for any batch of at most max_tokens rows and max_batch entries
// (workspace sizing); reached by some batch, so it is the tightest such bound. See prefill_plan.cc.
int MaxPrefillTiles(int max_tokens, int max_batch, int head_dim);

struct PagedPrefillArgs {
  AttentionDims dims;
  PagedKv kv;  // already holds this step's K/V (AppendKv runs first)
  KvIndex index;
  const int32_t* qo_indptr = nullptr;  // [batch + 1] device
  int batch = 0;
  // Row t of entry b (qo_indptr[b] <= t < qo_indptr[b+1]) is at position
  // kv_len_b - (qo_indptr[b+1] - t): the chunk is the last tokens of the entry's KV. It attends to
  // KV positions [lo, position] (lo = 0, or position - sliding_window + 1). A row with no such
  // position (position < 0: a malformed batch; or an entry without pages) gets zeros.
  const bf16* q = nullptr;  // [T, num_heads, head_dim], row stride q_stride (16-byte aligned)
  int64_t q_stride = 0;     // elements, a multiple of 8, >= num_heads * head_dim
  bf16* out = nullptr;      // [T, num_heads, head_dim], row stride out_stride (16-byte aligned)
  int64_t out_stride = 0;   // elements, a multiple of 8, >= num_heads * head_dim
  const int32_t* tile_entry = nullptr;      // [num_tiles] device copy of the plan
  const int32_t* tile_row_begin = nullptr;  // [num_tiles]
  int num_tiles = 0;                        // at most 65535 (the grid's y extent): ~4M query rows
};

// True if a kernel is compiled for these dims (head_dim 32, 64, 128 or 256; num_heads a positive
// multiple of num_kv_heads; sliding_window >= 0). Sets `why` (if not null)
// otherwise.
bool SupportsPagedPrefill(const AttentionDims& dims, const char** why);

// Dynamic shared memory one prefill CTA takes for this head_dim (0 if unsupported).
size_t PagedPrefillSharedBytes(int head_dim);

// Enqueues the prefill attention. Allocates nothing. Returns cudaErrorInvalidValue (before any CUDA
// call) for unsupported dims or a bad argument, else the launch error. num_tiles == 0 launches
// nothing. Rows of q / out that no tile covers are not touched.
cudaError_t LaunchPagedPrefill(const PagedPrefillArgs& args, cudaStream_t stream);

// Writes K/V rows t < num_rows ([num_kv_heads, head_dim] each, row stride kv_new_stride elements)
// into the pool at out_slots[t] (page * page_size + offset); slots < 0 (and slots past the pool)
// are skipped. Copies 16 bytes at a time where pointers and stride allow, else element by element.
cudaError_t LaunchAppendKv(const bf16* k_new, const bf16* v_new, int64_t kv_new_stride,
                           const int64_t* out_slots, int num_rows, int num_kv_heads, int head_dim,
                           PagedKv kv, cudaStream_t stream);

}  // namespace astr::cuda
