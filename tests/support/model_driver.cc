#include "tests/support/model_driver.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace astr::testing {

Status DriveGreedy(Backend& backend, std::vector<DrivenSequence>& seqs, uint32_t page_seed) {
  const int64_t page_size = backend.page_size();
  const int64_t vocab = backend.config().vocab_size;
  std::vector<int32_t> free_pages(backend.num_pages());
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), std::mt19937(page_seed));
  struct State {
    std::vector<int32_t> tokens;
    std::vector<int32_t> pages;
    int64_t num_computed = 0;
    bool done = false;
  };
  std::vector<State> st(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) st[i].tokens = seqs[i].prompt;
  std::vector<float> logits(backend.max_sample_rows() * vocab);
  for (int64_t step = 0;; ++step) {
    StepBatch batch;
    batch.Clear();
    std::vector<size_t> entries;
    bool pending = false;
    for (size_t i = 0; i < seqs.size(); ++i) {
      State& s = st[i];
      if (s.done) continue;
      pending = true;
      if (seqs[i].join_step > step) continue;
      const int64_t n =
          std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.num_computed, seqs[i].chunk);
      const int64_t need = (s.num_computed + n + page_size - 1) / page_size;
      while (static_cast<int64_t>(s.pages.size()) < need) {
        if (free_pages.empty()) return ResourceExhaustedError("test pool too small");
        s.pages.push_back(free_pages.back());
        free_pages.pop_back();
      }
      batch.Append(s.tokens.data() + s.num_computed, n, s.num_computed, s.pages.data(), page_size,
                   s.num_computed + n == static_cast<int64_t>(s.tokens.size()));
      entries.push_back(i);
    }
    if (!pending) return OkStatus();
    if (entries.empty()) continue;
    ASTR_RETURN_IF_ERROR(backend.Forward(batch, logits.data()));
    size_t row = 0;
    for (size_t e = 0; e < entries.size(); ++e) {
      const size_t i = entries[e];
      State& s = st[i];
      s.num_computed += batch.qo_indptr[e + 1] - batch.qo_indptr[e];
      if (s.num_computed != static_cast<int64_t>(s.tokens.size())) continue;
      const float* l = logits.data() + row++ * vocab;
      seqs[i].logits.emplace_back(l, l + vocab);
      const int32_t tok = static_cast<int32_t>(std::max_element(l, l + vocab) - l);
      seqs[i].generated.push_back(tok);
      s.tokens.push_back(tok);
      if (static_cast<int64_t>(seqs[i].generated.size()) >= seqs[i].max_new) {
        s.done = true;
        free_pages.insert(free_pages.end(), s.pages.begin(), s.pages.end());
        s.pages.clear();
      }
    }
  }
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace astr::testing
