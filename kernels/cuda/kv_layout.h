// The paged KV cache as the CUDA kernels see it: the step batch's CSR arrays (DESIGN.md "The step
// contract") already on the device, and one layer's K and V pools. Plain C++: host code (the
// backend, tests) includes this header too.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace astr::cuda {

using bf16 = __nv_bfloat16;

// One layer's paged KV pool. K and V each: [num_pages, page_size, num_kv_heads, head_dim] bf16.
struct PagedKv {
  bf16* k = nullptr;  // [num_pages, page_size, num_kv_heads, head_dim]
  bf16* v = nullptr;  // [num_pages, page_size, num_kv_heads, head_dim]
  int num_pages = 0;
  int page_size = 0;  // any value >= 1 (runtime, not a template parameter)
};

// The attention shape of a model. head_dim is dispatched at compile time (see Supports* in each
// kernel header); the rest are runtime values.
struct AttentionDims {
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // num_heads % num_kv_heads == 0 (GQA group = num_heads / num_kv_heads)
  int head_dim = 0;
  int sliding_window = 0;  // 0 = full causal; else row at position p sees KV [p - w + 1, p]
  float sm_scale = 0.0f;   // usually 1 / sqrt(head_dim)
  // > 0: each score s (after sm_scale) becomes softcap * tanh(s / softcap) (Gemma 2), in every
  // kernel (the tensor-core ones through ScoreToLog2, ptx.cuh).
  float softcap = 0.0f;
  // gpt-oss: per query head a logit (natural units, not scaled) that joins each row's softmax
  // without weighing a value: out = sum_j e^(s_j) v_j / (sum_j e^(s_j) + e^(sinks[h])). Null:
  // none. A row that sees no key still gets zeros.
  const float* sinks = nullptr;  // [num_heads] f32
};

// Where each batch entry's KV lives (device pointers; the StepBatch arrays of the same name).
// Entry b's KV length is (kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b];
// an entry with no pages (kv_indptr[b+1] == kv_indptr[b]) is padding: kernels skip it and write
// zeros to its output rows.
struct KvIndex {
  const int32_t* kv_indptr = nullptr;         // [batch + 1]
  const int32_t* kv_page_indices = nullptr;   // [kv_indptr[batch]]
  const int32_t* kv_last_page_len = nullptr;  // [batch]
};

}  // namespace astr::cuda
