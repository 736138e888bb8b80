// Paged causal attention on the CPU over the ragged step batch.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/step_batch.h"

namespace astr {

struct AttentionShape {
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t page_size;
  int64_t sliding_window;  // 0 = full causal attention
  float scale = 0.0f;      // softmax scale of the scores; 0 = 1 / sqrt(head_dim)
  float softcap = 0.0f;    // > 0: scores become softcap * tanh(score / softcap) (Gemma 2)
  int32_t table = 0;       // the batch's page table the layer reads (StepBatch::page_indices)
  // gpt-oss: per query head a logit that joins each softmax without weighing a value (null: none).
  const float* sinks = nullptr;  // [num_heads]
};

// Scratch floats attention needs per thread.
int64_t AttentionScratchFloats(const AttentionShape& shape);

// out[t, h*hd..] = softmax(q_t,h · K_{lo..pos_t}ᵀ · scale) · V for every row t and head h, where
// lo = 0, or pos_t - sliding_window + 1 with a sliding window.
// q: [T, num_heads, head_dim] with row stride ldq; k_pool/v_pool: [pages, page_size, kv_heads, hd];
// row_entry[t]: the batch entry of row t; out: [T, num_heads * head_dim] (row stride ldo).
// Scores are reduced in blocks of fixed absolute positions, so a row's result does not depend on
// the page size, on how the prompt was chunked, or on the other rows of the batch.
void PagedAttention(const float* q, int64_t ldq, const float* k_pool, const float* v_pool,
                    const StepBatch& batch, const int32_t* row_entry, const AttentionShape& shape,
                    float* scratch, float* out, int64_t ldo, cpu::ThreadPool* pool);
// The same on a given ISA path (PagedAttention uses cpu::ActiveIsa()); for tests.
void PagedAttentionIsa(cpu::Isa isa, const float* q, int64_t ldq, const float* k_pool,
                       const float* v_pool, const StepBatch& batch, const int32_t* row_entry,
                       const AttentionShape& shape, float* scratch, float* out, int64_t ldo,
                       cpu::ThreadPool* pool);

}  // namespace astr
