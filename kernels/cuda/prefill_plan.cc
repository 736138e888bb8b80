// Host-side planning of the paged prefill launch (see paged_prefill.h): the work items and the
// workspace bound. Plain C++, unit-tested on the CPU (tests/gpu/prefill_plan_test.cc).
#include <algorithm>
#include <numeric>

#include "kernels/cuda/paged_prefill.h"

namespace astr::cuda {

int PrefillTileRows(int /*head_dim*/) { return kPrefillTileRows; }

PrefillPlan BuildPrefillPlan(const int32_t* qo_indptr, int batch, int head_dim) {
  const int rows = PrefillTileRows(head_dim);
  // A malformed (decreasing) indptr counts as an empty entry rather than a negative tile count.
  auto qo_len = [&](int b) { return std::max(0, qo_indptr[b + 1] - qo_indptr[b]); };
  std::vector<int> order(std::max(0, batch));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return qo_len(a) > qo_len(b); });
  PrefillPlan plan;
  for (const int b : order) {
    const int tiles = (qo_len(b) + rows - 1) / rows;  // 0 for an entry without query rows
    for (int i = tiles - 1; i >= 0; --i) {
      plan.tile_entry.push_back(b);
      plan.tile_row_begin.push_back(qo_indptr[b] + i * rows);
    }
  }
  return plan;
}

// Bound: a batch has k <= K = min(max_batch, max_tokens) entries with query rows (an entry with
// rows has at least one, and all rows sum to L <= max_tokens; entries without rows add no tile).
// For len >= 1, ceil(len / R) = 1 + floor((len - 1) / R), and a sum of floors is at most the floor
// of the sum, so
//   tiles = sum_b ceil(len_b / R) = k + sum_b floor((len_b - 1) / R) <= k + floor((L - k) / R)
//        <= k + floor((max_tokens - k) / R).
// f(k) = k + floor((max_tokens - k) / R) does not decrease with k (k + 1 adds 1 and removes at most
// 1), so tiles <= f(K) = K + floor((max_tokens - K) / R). The batch of K - 1 one-row entries and
// one entry of max_tokens - K + 1 rows has (K - 1) + 1 + floor((max_tokens - K) / R) = f(K) tiles,
// so no smaller bound holds.
int MaxPrefillTiles(int max_tokens, int max_batch, int head_dim) {
  if (max_tokens <= 0 || max_batch <= 0) return 0;
  const int rows = PrefillTileRows(head_dim);
  const int k = std::min(max_batch, max_tokens);
  return k + (max_tokens - k) / rows;
}

}  // namespace astr::cuda
