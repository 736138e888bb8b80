// Generic paged attention: any head_dim up to 256 and any GQA ratio, for the shapes the tensor-core
// kernels (paged_decode.h, paged_prefill.h) do not cover — tiny test models such as stories260K
// (head_dim 8). One warp per (query row, head), f32 online softmax, one KV position at a time:
// simple and slow, never the path of a production-sized model. Its grid depends only on (rows,
// num_heads), so decode steps through it can still be captured in CUDA graphs. The step's K/V must
// already be in the pool (LaunchAppendKv).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/kv_layout.h"

namespace astr::cuda {

inline constexpr int kGenericAttentionMaxHeadDim = 256;

struct GenericAttentionArgs {
  AttentionDims dims;
  PagedKv kv;
  KvIndex index;
  const int32_t* qo_indptr = nullptr;  // [batch + 1]: rows of each entry (the chunk ends at its KV)
  int batch = 0;
  int num_rows = 0;         // rows launched (qo_indptr[batch], or a graph bucket's padded count)
  const bf16* q = nullptr;  // [num_rows, num_heads, head_dim], row stride q_stride
  int64_t q_stride = 0;
  bf16* out = nullptr;  // [num_rows, num_heads, head_dim], row stride out_stride
  int64_t out_stride = 0;
};

// Rows of entries with no pages, and rows past qo_indptr[batch], get zeros.
cudaError_t LaunchGenericPagedAttention(const GenericAttentionArgs& args, cudaStream_t stream);

}  // namespace astr::cuda
