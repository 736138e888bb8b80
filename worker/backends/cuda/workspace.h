// InferenceWorkspace: every per-step buffer of the CUDA backend, carved from one device allocation
// made at start for the largest step (max tokens, max batch), plus one pinned host block for the
// step metadata. The decode loop allocates nothing and every kernel argument has a stable address
// (what CUDA graph replay needs): each step rewrites the metadata in place with one host-to-device
// copy.
//
// Sizes come from the same Carve() code in counting mode (a BumpAllocator without memory), so the
// size used for the allocation is exactly what the layout takes (tested).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "kernels/cuda/kv_layout.h"
#include "kernels/cuda/sampling.h"
#include "worker/backends/cuda/device_memory.h"

namespace astr::cuda {

// Hands out aligned sub-ranges of [base, base + capacity). With base == nullptr it only counts
// (pointers are then offsets from 0 and must not be dereferenced).
class BumpAllocator {
 public:
  static constexpr size_t kAlign = 256;
  BumpAllocator(char* base, size_t capacity) : base_(base), capacity_(capacity) {}
  template <typename T>
  T* Take(int64_t count, const char* name) {
    return static_cast<T*>(TakeBytes(static_cast<size_t>(count) * sizeof(T), name));
  }
  void* TakeBytes(size_t bytes, const char* name);
  size_t used() const { return used_; }
  // True if a Take went past capacity (only possible in a real, not counting, allocator).
  bool overflowed() const { return overflowed_; }
  struct Region {
    std::string name;
    size_t offset, bytes;
  };
  const std::vector<Region>& regions() const { return regions_; }

 private:
  char* base_;
  size_t capacity_;
  size_t used_ = 0;
  bool overflowed_ = false;
  std::vector<Region> regions_;
};

// What the workspace must hold.
struct WorkspaceDims {
  int64_t max_tokens = 0;    // rows per step (T)
  int64_t max_batch = 0;     // entries per step (B), also sample rows (S) and the top graph bucket
  int64_t max_kv_pages = 0;  // kv_page_indices entries per step (sum of the entries' pages)
  int64_t kv_tables = 1;     // page tables per step: 1 + KvLayout::window_tables
  int64_t hidden = 0;
  int64_t qkv_rows = 0;  // q + k + v (+ gate) columns of the fused projection
  int64_t q_cols = 0;    // num_heads * head_dim
  int64_t ffn = 0;
  // Mixture of experts (0 experts: none): experts per layer, per row, and each one's ffn.
  int64_t num_experts = 0;
  int64_t experts_per_tok = 0;
  int64_t moe_ffn = 0;
  int64_t vocab = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t max_partial_rows = 0;   // decode split-KV partials: max over buckets of batch * splits
  int64_t max_prefill_tiles = 0;  // prefill plan entries
  int64_t gemm_workspace_bytes = 32 << 20;  // cuBLASLt scratch
};

// The step metadata: int arrays that are copied to the device each step in one transfer. The same
// struct describes the pinned host staging block and its device mirror.
struct StepMetadata {
  int32_t* token_ids;                     // [max_tokens]
  int32_t* positions;                     // [max_tokens]
  int32_t* rope_long;                     // [max_tokens] LongRoPE: rows taking the long factors
  int32_t* qo_indptr;                     // [max_batch + 1]
  int32_t* kv_indptr;                     // [max_batch + 1]
  int32_t* kv_last_page_len;              // [max_batch]
  int32_t* sample_rows;                   // [max_batch]
  int32_t* tile_entry;                    // [max_prefill_tiles]
  int32_t* tile_row_begin;                // [max_prefill_tiles]
  int64_t* out_slots;                     // [kv_tables][max_tokens] (table t at t * max_tokens)
  DeviceSamplingParams* sampling_params;  // [max_batch]
  int32_t* kv_page_indices;  // [kv_tables][max_kv_pages] (carved last; t at t * max_kv_pages)
};

// Carves the metadata block (host or device, same layout).
StepMetadata CarveMetadata(BumpAllocator& a, const WorkspaceDims& d);

struct Activations {
  float* x;            // [T, hidden] f32 residual stream
  bf16* xn;            // [T, hidden] normed input of the next GEMM
  bf16* qkv;           // [T, qkv_rows]
  bf16* attn;          // [T, q_cols]
  float* proj;         // [T, hidden] o_proj / down_proj output (added to x)
  bf16* gate_up;       // [T, 2 * ffn]
  bf16* act;           // [T, ffn]
  bf16* sampled;       // [B, hidden] final-normed sample rows
  // MoE layers (moe.h), with P = T * experts_per_tok pairs: router logits, each row's experts and
  // weights, the pairs sorted by expert (their rows, and where each pair went), the grouped GEMMs'
  // tiles, and the pairs' gathered input, gate/up, activation and output rows.
  float* moe_logits;      // [T, num_experts]
  int32_t* moe_experts;   // [T, experts_per_tok]
  float* moe_weights;     // [T, experts_per_tok]
  int32_t* moe_pair_row;  // [P]
  int32_t* moe_slot;      // [P]
  int32_t* moe_tiles;     // [MoeMaxTiles(P, num_experts), 3]
  bf16* moe_in;           // [P, hidden]
  bf16* moe_gate_up;      // [P, 2 * moe_ffn]
  bf16* moe_act;          // [P, moe_ffn]
  float* moe_out;         // [P, hidden]
  float* logits;       // [B, vocab]
  float* raw_logits;   // [B, vocab] sampling scratch
  float* o_partial;    // [max_partial_rows, num_heads, head_dim] decode split partials
  float* lse_partial;  // [max_partial_rows, num_heads]
  DeviceSampleResult* sample_results;  // [B]
  void* gemm_workspace;                // [gemm_workspace_bytes]
};

Activations CarveActivations(BumpAllocator& a, const WorkspaceDims& d);

class InferenceWorkspace {
 public:
  // Bytes of device memory (metadata mirror + activations) and of pinned host staging.
  static size_t DeviceBytes(const WorkspaceDims& d);
  static size_t HostBytes(const WorkspaceDims& d);
  static StatusOr<std::unique_ptr<InferenceWorkspace>> Create(const WorkspaceDims& d);

  InferenceWorkspace(const InferenceWorkspace&) = delete;
  InferenceWorkspace& operator=(const InferenceWorkspace&) = delete;

  const WorkspaceDims& dims() const { return dims_; }
  StepMetadata& host() { return host_; }
  const StepMetadata& device() const { return device_; }
  const Activations& act() const { return act_; }
  // Copies the metadata block to the device in one transfer: every array, and the first
  // num_page_ids entries of kv_page_indices (carved last for this); then, with window tables, the
  // first num_page_ids entries of each further table (one more transfer each).
  cudaError_t UploadMetadata(int64_t num_page_ids, cudaStream_t stream) const;
  size_t metadata_bytes() const { return metadata_bytes_; }

 private:
  InferenceWorkspace() = default;
  WorkspaceDims dims_;
  DeviceMemory device_memory_;
  size_t metadata_bytes_ = 0;
  PinnedMemory pinned_;  // metadata_bytes_: the host mirror of the metadata
  StepMetadata host_{};
  StepMetadata device_{};
  Activations act_{};
};

}  // namespace astr::cuda
