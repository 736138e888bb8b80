// One step of work for a backend, as a ragged batch (FlashInfer-style CSR). See DESIGN.md "The step
// contract". Batch entry b owns query tokens [qo_indptr[b], qo_indptr[b+1]) and the KV pages
// kv_page_indices[kv_indptr[b] .. kv_indptr[b+1]); its KV length (cached tokens + this step's
// tokens) is (num_pages_b - 1) * page_size + kv_last_page_len[b]. Token t of entry b sits at
// positions[t] and attends to KV positions [0, positions[t]]; KV position j lives at page
// kv_page_indices[kv_indptr[b] + j / page_size], offset j % page_size.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/status.h"

namespace astr {

struct StepBatch {
  std::vector<int32_t> token_ids;        // [T] token fed at each row
  std::vector<int32_t> positions;        // [T] absolute position of each row in its sequence
  std::vector<int32_t> qo_indptr;        // [B+1] row ranges per batch entry
  std::vector<int32_t> kv_indptr;        // [B+1] ranges into kv_page_indices
  std::vector<int32_t> kv_page_indices;  // [sum of pages] page ids, in sequence order
  std::vector<int32_t>
      kv_last_page_len;            // [B] filled slots of each entry's last page (1..page_size)
  std::vector<int64_t> out_slots;  // [T] page * page_size + offset where row t's K/V is written
  // [S] rows whose logits are returned, in output order: the rows drawn from, then any rows
  // scored (prompt scoring; see worker/step_sampling.h).
  std::vector<int32_t> sample_rows;
  // Window page tables (KvLayout::window_tables; none for most models): the sliding-window layers'
  // page groups, each shaped like kv_page_indices (same kv_indptr and kv_last_page_len) with its
  // own out slots [T]. Pages behind an entry's window are not held and read as page 0: attention
  // never reads a position behind its window.
  std::vector<std::vector<int32_t>> window_page_indices;
  std::vector<std::vector<int64_t>> window_out_slots;
  // [B] LongRoPE: the entry's sequence is computed with the long factors (it started holding more
  // tokens than the original context; see worker/rope.h RopeLongRows).
  std::vector<uint8_t> rope_long;

  int32_t num_window_tables() const { return static_cast<int32_t>(window_page_indices.size()); }
  // Sets the number of window tables (kept across Clear).
  void set_window_tables(int32_t n);
  // Table 0 is kv_page_indices / out_slots, table t > 0 window table t - 1.
  const std::vector<int32_t>& page_indices(int32_t table) const {
    return table == 0 ? kv_page_indices : window_page_indices[table - 1];
  }
  const std::vector<int64_t>& slots(int32_t table) const {
    return table == 0 ? out_slots : window_out_slots[table - 1];
  }

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t batch_size() const {
    return qo_indptr.empty() ? 0 : static_cast<int64_t>(qo_indptr.size()) - 1;
  }
  void Clear();
  // Appends one batch entry: `tokens` at positions [start_pos, start_pos + tokens.size()) of a
  // sequence whose pages are `pages` (covering at least start_pos + tokens.size() slots). Out slots
  // and the last page length follow from the positions. If `sample_last`, the entry's last row is a
  // sample row.
  // With window tables, `window_pages` holds the window tables' ids of pages [window_first,
  // pages used), page-major: page p's id in window table u is
  // window_pages[(p - window_first) * num_window_tables() + u].
  void Append(const int32_t* tokens, int64_t num_tokens, int64_t start_pos, const int32_t* pages,
              int64_t page_size, bool sample_last, const int32_t* window_pages = nullptr,
              int64_t window_first = 0, bool rope_long = false);
};

// Checks every index of `batch` against the pool and vocabulary: array sizes agree, indptrs are
// monotone, pages in range, each entry's positions contiguous and inside its pages, out slots
// inside the entry's pages (in every table), sample rows in range. The error names the array and
// index.
Status ValidateStepBatch(const StepBatch& batch, int64_t num_pages, int64_t page_size,
                         int64_t vocab_size, int64_t max_tokens);

}  // namespace astr
