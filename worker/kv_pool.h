// The paged KV pool: per layer, K and V arrays of layout [num_pages, page_size, n_kv_heads,
// head_dim] (f32 on the CPU backend). The worker never allocates pages: the scheduler (or the
// offline engine) hands out page ids; the pool only holds the storage.
#pragma once

#include <cstdint>
#include <memory>

#include "common/base/status.h"

namespace astr {

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
