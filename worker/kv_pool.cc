#include "worker/kv_pool.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace astr {

void KvPool::FreeDeleter::operator()(float* p) const { std::free(p); }

int64_t KvPool::PagesForBytes(int64_t bytes, int64_t num_layers, int64_t page_size,
                              int64_t n_kv_heads, int64_t head_dim) {
  const int64_t per_page = 2 * num_layers * page_size * n_kv_heads * head_dim * 4;
  return per_page > 0 ? bytes / per_page : 0;
}

StatusOr<std::unique_ptr<KvPool>> KvPool::Create(int64_t num_layers, int64_t num_pages,
                                                 int64_t page_size, int64_t n_kv_heads,
                                                 int64_t head_dim) {
  if (num_pages < 1) return InvalidArgumentError("KV pool: num_pages must be >= 1");
  if (page_size < 1) return InvalidArgumentError("KV pool: page_size must be >= 1");
  std::unique_ptr<KvPool> pool(new KvPool());
  pool->num_layers_ = num_layers;
  pool->num_pages_ = num_pages;
  pool->page_size_ = page_size;
  pool->n_kv_heads_ = n_kv_heads;
  pool->head_dim_ = head_dim;
  pool->layer_floats_ = num_pages * page_size * n_kv_heads * head_dim;
  pool->bytes_ = static_cast<size_t>(2 * num_layers * pool->layer_floats_) * sizeof(float);
  size_t alloc = (pool->bytes_ + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, alloc);
  if (p == nullptr) {
    return ResourceExhaustedError("KV pool: cannot allocate " + std::to_string(pool->bytes_) +
                                  " bytes");
  }
  // Zeroed so that a page read before it is written gives finite values.
  std::memset(p, 0, alloc);
  pool->data_.reset(static_cast<float*>(p));
  return pool;
}

}  // namespace astr
