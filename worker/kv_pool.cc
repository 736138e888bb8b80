#include "worker/kv_pool.h"

#include <sys/mman.h>

#include <string>

namespace astr {

KvLayout KvLayout::For(const model::ModelConfig& c) {
  KvLayout out;
  const int64_t n = c.num_layers;
  out.layer_table.assign(n, 0);
  out.layer_slot.resize(n);
  int64_t global = 0;
  for (int64_t l = 0; l < n; ++l) global += c.LayerWindow(l) == 0 ? 1 : 0;
  const int64_t sliding = n - global;
  if (global == 0 || sliding == 0) {  // one group: every layer in every page id
    out.slots = n;
    for (int64_t l = 0; l < n; ++l) out.layer_slot[l] = static_cast<int32_t>(l);
    return out;
  }
  out.slots = global;
  out.window_tables = static_cast<int32_t>((sliding + global - 1) / global);
  out.window = c.sliding_window;
  int64_t g = 0, s = 0;
  for (int64_t l = 0; l < n; ++l) {
    if (c.LayerWindow(l) == 0) {
      out.layer_slot[l] = static_cast<int32_t>(g++);
    } else {
      out.layer_table[l] = static_cast<int32_t>(1 + s / global);
      out.layer_slot[l] = static_cast<int32_t>(s % global);
      ++s;
    }
  }
  return out;
}

void KvMemoryUnmapper::operator()(float* p) const { munmap(p, bytes); }

int64_t KvPool::PagesForBytes(int64_t bytes, int64_t num_layers, int64_t page_size,
                              int64_t n_kv_heads, int64_t head_dim) {
  // The factors are a flag (page_size) and dims the weights confirm; their product may still not
  // fit in int64, and then no page fits either.
  int64_t per_page = 2 * 4;  // K and V, f32
  for (int64_t f : {num_layers, page_size, n_kv_heads, head_dim}) {
    if (__builtin_mul_overflow(per_page, f, &per_page)) return 0;
  }
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
  int64_t layer_floats = 0, total_floats = 0;
  if (__builtin_mul_overflow(num_pages, page_size, &layer_floats) ||
      __builtin_mul_overflow(layer_floats, n_kv_heads * head_dim, &layer_floats) ||
      __builtin_mul_overflow(layer_floats, 2 * num_layers, &total_floats) ||
      total_floats > (int64_t{1} << 60) / static_cast<int64_t>(sizeof(float))) {
    return ResourceExhaustedError("KV pool: " + std::to_string(num_pages) + " pages of " +
                                  std::to_string(page_size) + " tokens overflow the address space");
  }
  pool->layer_floats_ = layer_floats;
  pool->bytes_ = static_cast<size_t>(total_floats) * sizeof(float);
  // Anonymous memory: page-aligned and zero (a slot read before it is written holds finite values),
  // committed by the OS only when first touched, so a large pool costs nothing until it is used.
  void* p = mmap(nullptr, pool->bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhaustedError("KV pool: cannot map " + std::to_string(pool->bytes_) + " bytes");
  }
  pool->data_ = std::unique_ptr<float, KvMemoryUnmapper>(static_cast<float*>(p),
                                                         KvMemoryUnmapper{pool->bytes_});
  return pool;
}

}  // namespace astr
