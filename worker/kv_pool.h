// The paged KV pool: per layer, K and V arrays of layout [num_pages, page_size, n_kv_heads,
// head_dim] (f32 on the CPU backend). The worker never allocates pages: the scheduler (or the
// offline engine) hands out page ids; the pool only holds the storage.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/status.h"
#include "common/model/model_config.h"

namespace astr {

// How a model's layers share the pool's pages. Without sliding-window layers beside global ones, a
// page id stands for one slot range in every layer (one page table per sequence). A model with
// both (Gemma 2 and 3) splits them into page groups of `slots` layers each, vLLM's hybrid groups:
// the global layers are group 0, read through the sequence's page table (StepBatch::
// kv_page_indices); the sliding layers fill `window_tables` more groups (the last padded), each
// read through a window page table whose leading pages, behind every query's window, go back to
// the pool (the scheduler's PagePool::window). A page id then holds `slots` layers' slot range, so
// a token page costs 1 + window_tables page ids while it is inside the window and 1 after.
struct KvLayout {
  int64_t slots = 0;                 // layers per page id: the pool's K/V arrays
  int32_t window_tables = 0;         // window page tables (groups of sliding layers); 0 = one group
  int64_t window = 0;                // the sliding layers' window (tokens) when window_tables > 0
  std::vector<int32_t> layer_table;  // [layers] 0 = kv_page_indices, t > 0 = window table t - 1
  std::vector<int32_t> layer_slot;   // [layers] which of the `slots` K/V arrays holds the layer
  static KvLayout For(const model::ModelConfig& c);
};

// Unmaps the pool's anonymous mapping.
struct KvMemoryUnmapper {
  size_t bytes = 0;
  void operator()(float* p) const;
};

class KvPool {
 public:
  // Pages that fit in `bytes` for this shape (at least 0).
  static int64_t PagesForBytes(int64_t bytes, int64_t num_layers, int64_t page_size,
                               int64_t n_kv_heads, int64_t head_dim);
  static StatusOr<std::unique_ptr<KvPool>> Create(int64_t num_layers, int64_t num_pages,
                                                  int64_t page_size, int64_t n_kv_heads,
                                                  int64_t head_dim);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t page_size() const { return page_size_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  // Floats per slot (one token of one layer): n_kv_heads * head_dim.
  int64_t slot_floats() const { return n_kv_heads_ * head_dim_; }
  size_t bytes() const { return bytes_; }

  float* k(int64_t layer) {
    return data_.get() + (2 * layer) * layer_floats_;
  }  // [pages, page_size, kvh, hd]
  float* v(int64_t layer) { return data_.get() + (2 * layer + 1) * layer_floats_; }
  const float* k(int64_t layer) const { return data_.get() + (2 * layer) * layer_floats_; }
  const float* v(int64_t layer) const { return data_.get() + (2 * layer + 1) * layer_floats_; }

 private:
  KvPool() = default;
  int64_t num_layers_ = 0, num_pages_ = 0, page_size_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  int64_t layer_floats_ = 0;
  size_t bytes_ = 0;
  std::unique_ptr<float, KvMemoryUnmapper> data_;
};

}  // namespace astr
