// Host-side sizing of the CUDA backend (no device code, unit-tested on the CPU).
#include <algorithm>

#include "kernels/cuda/paged_decode.h"
#include "kernels/cuda/paged_prefill.h"
#include "worker/backends/cuda/cuda_backend.h"
#include "worker/kv_pool.h"

namespace astr::cuda {

int64_t CudaPagesForBytes(const model::ModelConfig& c, int64_t page_size, int64_t bytes) {
  // A page id holds KvLayout::slots layers (all of them unless sliding and global layers mix).
  const int64_t per_page = KvLayout::For(c).slots * 2 * page_size * c.num_kv_heads * c.head_dim * 2;
  return per_page > 0 ? bytes / per_page : 0;
}

WorkspaceDims WorkspaceDimsFor(const model::ModelConfig& c, const BackendOptions& options,
                               int64_t num_pages, int num_sms) {
  WorkspaceDims d;
  d.max_tokens = options.max_batch_tokens;
  // Every entry feeds at least one row, so a step never has more entries than rows.
  d.max_batch = std::min(options.max_sample_rows, options.max_batch_tokens);
  const int64_t seq_pages = c.max_context_tokens > 0
                                ? (c.max_context_tokens + options.page_size - 1) / options.page_size
                                : num_pages;
  d.max_kv_pages = d.max_batch * std::min(num_pages, seq_pages);
  d.kv_tables = 1 + KvLayout::For(c).window_tables;
  d.hidden = c.hidden_size;
  d.q_cols = c.num_heads * c.head_dim;
  d.qkv_rows = d.q_cols + 2 * c.num_kv_heads * c.head_dim + (c.gated_attention ? d.q_cols : 0);
  // The dense MLP's buffers also serve Qwen2-MoE's shared expert.
  d.ffn = std::max(c.intermediate_size, c.shared_expert_intermediate_size);
  d.num_experts = c.num_experts;
  d.experts_per_tok = c.num_experts > 0 ? c.num_experts_per_tok : 0;
  d.moe_ffn = c.num_experts > 0 ? c.moe_intermediate_size : 0;
  d.vocab = c.vocab_size;
  d.num_heads = c.num_heads;
  d.head_dim = c.head_dim;
  for (int bucket : GraphBuckets(static_cast<int>(d.max_batch))) {
    const int splits = ChooseDecodeSplits(bucket, static_cast<int>(c.num_kv_heads), num_sms);
    d.max_partial_rows = std::max<int64_t>(d.max_partial_rows, int64_t{bucket} * splits);
  }
  d.max_prefill_tiles = MaxPrefillTiles(
      static_cast<int>(d.max_tokens), static_cast<int>(d.max_batch), static_cast<int>(c.head_dim));
  return d;
}

}  // namespace astr::cuda
