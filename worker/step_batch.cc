#include "worker/step_batch.h"

#include <string>

namespace astr {

void StepBatch::Clear() {
  token_ids.clear();
  positions.clear();
  qo_indptr.assign(1, 0);
  kv_indptr.assign(1, 0);
  kv_page_indices.clear();
  kv_last_page_len.clear();
  out_slots.clear();
  sample_rows.clear();
  rope_long.clear();
  for (auto& t : window_page_indices) t.clear();
  for (auto& t : window_out_slots) t.clear();
}

void StepBatch::set_window_tables(int32_t n) {
  window_page_indices.resize(n);
  window_out_slots.resize(n);
}

void StepBatch::Append(const int32_t* tokens, int64_t num_tokens, int64_t start_pos,
                       const int32_t* pages, int64_t page_size, bool sample_last,
                       const int32_t* window_pages, int64_t window_first, bool long_rope) {
  if (qo_indptr.empty()) qo_indptr.push_back(0);
  if (kv_indptr.empty()) kv_indptr.push_back(0);
  const int64_t kv_len = start_pos + num_tokens;
  const int64_t used_pages = (kv_len + page_size - 1) / page_size;
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t pos = start_pos + i;
    token_ids.push_back(tokens[i]);
    positions.push_back(static_cast<int32_t>(pos));
    out_slots.push_back(static_cast<int64_t>(pages[pos / page_size]) * page_size + pos % page_size);
  }
  if (sample_last && num_tokens > 0)
    sample_rows.push_back(static_cast<int32_t>(token_ids.size() - 1));
  qo_indptr.push_back(static_cast<int32_t>(token_ids.size()));
  kv_page_indices.insert(kv_page_indices.end(), pages, pages + used_pages);
  kv_indptr.push_back(static_cast<int32_t>(kv_page_indices.size()));
  kv_last_page_len.push_back(static_cast<int32_t>(kv_len - (used_pages - 1) * page_size));
  rope_long.push_back(long_rope ? 1 : 0);
  const int64_t tables = num_window_tables();
  for (int64_t u = 0; u < tables; ++u) {
    std::vector<int32_t>& table = window_page_indices[u];
    auto page = [&](int64_t p) {
      return p < window_first || window_pages == nullptr
                 ? 0
                 : window_pages[(p - window_first) * tables + u];
    };
    for (int64_t p = 0; p < used_pages; ++p) table.push_back(page(p));
    for (int64_t i = 0; i < num_tokens; ++i) {
      const int64_t pos = start_pos + i;
      window_out_slots[u].push_back(static_cast<int64_t>(page(pos / page_size)) * page_size +
                                    pos % page_size);
    }
  }
}

namespace {
Status Bad(const std::string& what) { return InvalidArgumentError("invalid step batch: " + what); }
}  // namespace

Status ValidateStepBatch(const StepBatch& b, int64_t num_pages, int64_t page_size,
                         int64_t vocab_size, int64_t max_tokens) {
  const int64_t t = b.num_tokens();
  if (t == 0) return Bad("token_ids is empty");
  if (t > max_tokens) {
    return Bad("token_ids has " + std::to_string(t) + " tokens, more than the workspace's " +
               std::to_string(max_tokens));
  }
  if (static_cast<int64_t>(b.positions.size()) != t) return Bad("positions size != token_ids size");
  if (static_cast<int64_t>(b.out_slots.size()) != t) return Bad("out_slots size != token_ids size");
  if (b.qo_indptr.size() < 2) return Bad("qo_indptr needs at least 2 entries");
  const int64_t bs = b.batch_size();
  if (static_cast<int64_t>(b.kv_indptr.size()) != bs + 1)
    return Bad("kv_indptr size != qo_indptr size");
  if (static_cast<int64_t>(b.kv_last_page_len.size()) != bs)
    return Bad("kv_last_page_len size != batch size");
  if (b.qo_indptr[0] != 0 || b.qo_indptr[bs] != t)
    return Bad("qo_indptr must span [0, num_tokens]");
  if (b.kv_indptr[0] != 0 || b.kv_indptr[bs] != static_cast<int64_t>(b.kv_page_indices.size())) {
    return Bad("kv_indptr must span kv_page_indices");
  }
  // Monotone indptrs (with the end checks above) bound every index the per-entry checks read.
  for (int64_t e = 0; e < bs; ++e) {
    if (b.qo_indptr[e + 1] < b.qo_indptr[e]) {
      return Bad("qo_indptr decreases at entry " + std::to_string(e));
    }
    if (b.kv_indptr[e + 1] <= b.kv_indptr[e]) {
      return Bad("kv_indptr: entry " + std::to_string(e) + " has no KV pages");
    }
  }
  for (int64_t i = 0; i < t; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= vocab_size) {
      return Bad("token_ids[" + std::to_string(i) + "] = " + std::to_string(b.token_ids[i]) +
                 " is outside the vocabulary of " + std::to_string(vocab_size));
    }
  }
  if (b.window_out_slots.size() != b.window_page_indices.size()) {
    return Bad("window_out_slots and window_page_indices hold different numbers of tables");
  }
  for (int32_t table = 0; table <= b.num_window_tables(); ++table) {
    const std::string name = table == 0 ? std::string("kv_page_indices")
                                        : "window_page_indices[" + std::to_string(table - 1) + "]";
    const std::vector<int32_t>& pages = b.page_indices(table);
    if (pages.size() != b.kv_page_indices.size())
      return Bad(name + " size != kv_page_indices size");
    if (static_cast<int64_t>(b.slots(table).size()) != t) {
      return Bad((table == 0 ? std::string("out_slots") : "window_out_slots") +
                 " size != token_ids size");
    }
    for (int64_t p : pages) {
      if (p < 0 || p >= num_pages) {
        return Bad(name + " holds page " + std::to_string(p) + ", outside the pool of " +
                   std::to_string(num_pages) + " pages");
      }
    }
  }
  for (int64_t e = 0; e < bs; ++e) {
    const std::string entry = "entry " + std::to_string(e) + ": ";
    const int64_t q0 = b.qo_indptr[e], q1 = b.qo_indptr[e + 1];
    const int64_t p0 = b.kv_indptr[e], p1 = b.kv_indptr[e + 1];
    const int64_t last = b.kv_last_page_len[e];
    if (last < 1 || last > page_size) return Bad(entry + "kv_last_page_len out of [1, page_size]");
    const int64_t kv_len = (p1 - p0 - 1) * page_size + last;
    for (int64_t r = q0; r < q1; ++r) {
      const int64_t pos = b.positions[r];
      if (pos < 0 || pos >= kv_len) {
        return Bad(entry + "position " + std::to_string(pos) + " outside its KV length " +
                   std::to_string(kv_len));
      }
      if (r > q0 && pos != b.positions[r - 1] + 1) return Bad(entry + "positions not contiguous");
      for (int32_t table = 0; table <= b.num_window_tables(); ++table) {
        const int64_t want =
            static_cast<int64_t>(b.page_indices(table)[p0 + pos / page_size]) * page_size +
            pos % page_size;
        if (b.slots(table)[r] != want) {
          return Bad(entry +
                     (table == 0 ? std::string("out_slots[")
                                 : "window_out_slots[" + std::to_string(table - 1) + "][") +
                     std::to_string(r) + "] does not match its position's page slot");
        }
      }
    }
    if (q1 > q0 && b.positions[q1 - 1] != kv_len - 1) {
      return Bad(entry + "last token's position must be the last KV position");
    }
  }
  for (int32_t r : b.sample_rows) {
    if (r < 0 || r >= t) return Bad("sample_rows holds row " + std::to_string(r) + " out of range");
  }
  return OkStatus();
}

}  // namespace astr
