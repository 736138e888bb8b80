#include "worker/backends/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/attention.h"

namespace astr {
namespace {

constexpr int64_t kBlock =
    32;  // KV positions per softmax block (fixed: keeps results chunk-invariant)

// The end of the softmax block that starts at j0 (blocks are aligned to absolute positions).
int64_t BlockEnd(int64_t j0, int64_t n_kv) { return std::min((j0 / kBlock + 1) * kBlock, n_kv); }

// Row j of KV head g in a K or V pool.
const float* Row(const float* pool, const int32_t* pages, int64_t j, int64_t g,
                 const AttentionShape& s) {
  const int64_t slot = static_cast<int64_t>(pages[j / s.page_size]) * s.page_size + j % s.page_size;
  return pool + (slot * s.num_kv_heads + g) * s.head_dim;
}

// Asks for rows [j0, j1) of KV head g into the cache: they are scattered over pages, and no
// hardware prefetcher follows them (astr-bench Q8_0 b16, 256-token contexts: +13% for V's rows
// during the scores, +5% more for the next block's K rows).
void PrefetchRows(const float* pool, const int32_t* pages, int64_t j0, int64_t j1, int64_t g,
                  const AttentionShape& s) {
  for (int64_t j = j0; j < j1; ++j) {
    const float* row = Row(pool, pages, j, g, s);
    for (int64_t d = 0; d < s.head_dim; d += 16) __builtin_prefetch(row + d, 0, 2);
  }
}

// Attention of one row t for the query heads of kv head g. Per block: one scores kernel call over
// the block's K rows for the whole group, the online-softmax update, one accumulate call over the
// V rows (which also applies the rescaling of the running accumulators).
void AttendGroup(const cpu::AttnKernels& kern, const float* q, int64_t ldq, const float* k_pool,
                 const float* v_pool, const StepBatch& b, int64_t t, int64_t entry, int64_t g,
                 const AttentionShape& s, float* scratch, float* out, int64_t ldo) {
  const int64_t group = s.num_heads / s.num_kv_heads;
  const int64_t hd = s.head_dim;
  const float scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  float* acc = scratch;                // [group, hd]
  float* scores = acc + group * hd;    // [group, kBlock]
  float* m = scores + group * kBlock;  // [group]
  float* l = m + group;                // [group]
  float* corr = l + group;             // [group]
  std::fill(acc, acc + group * hd, 0.0f);
  std::fill(m, m + group, -std::numeric_limits<float>::infinity());
  std::fill(l, l + group, 0.0f);
  const float* k_rows[kBlock];
  const float* v_rows[kBlock];
  const int32_t* pages = b.page_indices(s.table).data() + b.kv_indptr[entry];
  const int64_t n_kv = static_cast<int64_t>(b.positions[t]) + 1;
  const int64_t lo = s.sliding_window > 0 ? std::max<int64_t>(0, n_kv - s.sliding_window) : 0;
  const float* q_row = q + t * ldq + g * group * hd;
  for (int64_t j0 = lo; j0 < n_kv; j0 = BlockEnd(j0, n_kv)) {
    const int64_t j1 = BlockEnd(j0, n_kv);
    const int64_t n = j1 - j0;
    for (int64_t j = j0; j < j1; ++j) {
      k_rows[j - j0] = Row(k_pool, pages, j, g, s);
      v_rows[j - j0] = Row(v_pool, pages, j, g, s);
    }
    PrefetchRows(v_pool, pages, j0, j1, g, s);
    PrefetchRows(k_pool, pages, j1, BlockEnd(j1, n_kv), g, s);
    kern.scores(q_row, group, hd, k_rows, n, scale, scores, kBlock);
    if (s.softcap > 0.0f) {
      for (int64_t h = 0; h < group; ++h) {
        float* row = scores + h * kBlock;
        for (int64_t j = 0; j < n; ++j) row[j] = s.softcap * std::tanh(row[j] / s.softcap);
      }
    }
    kern.softmax(scores, kBlock, group, n, m, l, corr);
    kern.accumulate(scores, kBlock, group, hd, v_rows, n, corr, acc);
  }
  for (int64_t h = 0; h < group; ++h) {
    float* o = out + t * ldo + (g * group + h) * hd;
    float inv = 1.0f / l[h];
    if (s.sinks != nullptr) {
      // The sink's term joins the denominator, both taken relative to the larger of the two maxima.
      const float sink = s.sinks[g * group + h];
      const float mx = std::max(m[h], sink);
      const float keep = std::exp(m[h] - mx);
      inv = keep / (l[h] * keep + std::exp(sink - mx));
    }
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[h * hd + d] * inv;
  }
}

}  // namespace

int64_t AttentionScratchFloats(const AttentionShape& s) {
  const int64_t group = s.num_heads / s.num_kv_heads;
  return group * s.head_dim + group * kBlock + 3 * group + 16;
}

void PagedAttentionIsa(cpu::Isa isa, const float* q, int64_t ldq, const float* k_pool,
                       const float* v_pool, const StepBatch& batch, const int32_t* row_entry,
                       const AttentionShape& shape, float* scratch, float* out, int64_t ldo,
                       cpu::ThreadPool* pool) {
  const cpu::AttnKernels& kern = cpu::AttnKernelsFor(isa);
  const int64_t items = batch.num_tokens() * shape.num_kv_heads;
  const int64_t scratch_floats = AttentionScratchFloats(shape);
  auto work = [&](int thread, int num_threads) {
    // Static split; items are similar in cost within a step except for context length, which the
    // interleaved assignment spreads over the threads.
    float* my_scratch = scratch + thread * scratch_floats;
    for (int64_t i = thread; i < items; i += num_threads) {
      const int64_t t = i / shape.num_kv_heads, g = i % shape.num_kv_heads;
      AttendGroup(kern, q, ldq, k_pool, v_pool, batch, t, row_entry[t], g, shape, my_scratch, out,
                  ldo);
    }
  };
  if (pool == nullptr) {
    work(0, 1);
  } else {
    pool->Run(work);
  }
}

void PagedAttention(const float* q, int64_t ldq, const float* k_pool, const float* v_pool,
                    const StepBatch& batch, const int32_t* row_entry, const AttentionShape& shape,
                    float* scratch, float* out, int64_t ldo, cpu::ThreadPool* pool) {
  PagedAttentionIsa(cpu::ActiveIsa(), q, ldq, k_pool, v_pool, batch, row_entry, shape, scratch, out,
                    ldo, pool);
}

}  // namespace astr
