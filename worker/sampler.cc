#include "worker/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "common/base/philox.h"
#include "kernels/cpu/ops.h"

namespace astr {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t NextPow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TokenCounts

TokenCounts::TokenCounts(int64_t expected_distinct) {
  Rebuild(NextPow2(static_cast<size_t>(std::max<int64_t>(16, 2 * expected_distinct))));
}

uint32_t TokenCounts::Find(int32_t id) const {
  const uint32_t mask = static_cast<uint32_t>(table_.size() - 1);
  uint32_t h = static_cast<uint32_t>(id) * 0x9E3779B1u;  // Fibonacci hashing
  uint32_t slot = (h ^ (h >> 15)) & mask;
  while (table_[slot].id != -1 && table_[slot].id != id) slot = (slot + 1) & mask;
  return slot;
}

void TokenCounts::Rebuild(size_t capacity) {
  std::vector<Entry> old = std::move(table_);
  table_.assign(capacity, Entry{});
  std::vector<uint32_t> old_used = std::move(used_);
  used_.clear();
  used_.reserve(capacity / 2 + 1);
  for (uint32_t slot : old_used) {
    const Entry& e = old[slot];
    if (e.context == 0) continue;  // compaction: drop entries the window emptied
    const uint32_t s = Find(e.id);
    table_[s] = e;
    used_.push_back(s);
  }
}

void TokenCounts::Add(int32_t id, bool generated) {
  uint32_t slot = Find(id);
  if (table_[slot].id == -1) {
    // Keep the load factor <= 1/2. Zero-count entries are dropped first; the table only grows
    // when live entries fill it, so a long windowed sequence does not grow it without bound.
    if ((used_.size() + 1) * 2 > table_.size()) {
      const size_t live = static_cast<size_t>(live_) + 1;
      Rebuild(live * 4 > table_.size() ? table_.size() * 2 : table_.size());
      slot = Find(id);
    }
    table_[slot].id = id;
    used_.push_back(slot);
  }
  Entry& e = table_[slot];
  if (e.context++ == 0) ++live_;
  if (generated) ++e.generated;
}

void TokenCounts::Remove(int32_t id, bool generated) {
  Entry& e = table_[Find(id)];
  assert(e.id == id && e.context > 0);
  if (--e.context == 0) --live_;
  if (generated) --e.generated;
}

TokenCounts::Entry TokenCounts::Get(int32_t id) const {
  const Entry& e = table_[Find(id)];
  return e.id == id ? e : Entry{id, 0, 0};
}

// ---------------------------------------------------------------------------------------------
// SequenceSampler

namespace {

bool PenaltiesActive(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

// Distinct tokens the counts can hold: bounded by the window, else by the context length.
// Capped because the table can still grow if a caller's context outruns the guess.
int64_t ExpectedDistinct(const SamplingParams& p, size_t prompt_len) {
  if (!PenaltiesActive(p)) return 0;
  const int64_t context =
      p.penalty_window > 0 ? p.penalty_window : static_cast<int64_t>(prompt_len) + p.max_tokens;
  return std::min<int64_t>(context, int64_t{1} << 18);
}

}  // namespace

SequenceSampler::SequenceSampler(SamplingParams params, uint64_t sequence,
                                 std::span<const int32_t> prompt)
    : params_(std::move(params)),
      sequence_(sequence),
      counts_(ExpectedDistinct(params_, prompt.size())) {
  if (!PenaltiesActive(params_)) return;
  size_t first = 0;
  if (params_.penalty_window > 0) {
    window_.resize(static_cast<size_t>(params_.penalty_window));
    if (prompt.size() > window_.size()) first = prompt.size() - window_.size();
  }
  for (size_t i = first; i < prompt.size(); ++i) Push(prompt[i], /*generated=*/false);
}

void SequenceSampler::Push(int32_t id, bool generated) {
  if (!window_.empty()) {
    const size_t cap = window_.size();
    if (window_size_ == cap) {
      const WindowToken& oldest = window_[window_head_];
      counts_.Remove(oldest.id, oldest.generated);
      window_[window_head_] = {id, generated};
      window_head_ = (window_head_ + 1) % cap;
    } else {
      window_[(window_head_ + window_size_) % cap] = {id, generated};
      ++window_size_;
    }
  }
  counts_.Add(id, generated);
}

void SequenceSampler::Append(int32_t token) {
  if (PenaltiesActive(params_)) Push(token, /*generated=*/true);
  ++num_generated_;
}

void SequenceSampler::AppendPrompt(int32_t token) {
  if (PenaltiesActive(params_)) Push(token, /*generated=*/false);
}

bool SequenceSampler::IsStopToken(int32_t token) const {
  return astr::IsStopToken(StopConditionsOf(params_), token);
}

// ---------------------------------------------------------------------------------------------
// Sample

namespace {

// Steps 2-4: the sparse edits. Each touches only the ids it names, so their cost is independent
// of the vocabulary size. Step 3 only when `mask_min_tokens` (prompt scoring skips it).
void ApplyBiasMaskPenalties(float* logits, const SequenceSampler& state, bool mask_min_tokens) {
  const SamplingParams& p = state.params();
  for (const auto& [id, bias] : p.logit_bias) logits[id] += bias;
  if (mask_min_tokens && state.num_generated() < p.min_tokens) {
    for (int32_t id : p.stop_token_ids) logits[id] = kNegInf;
    if (!p.ignore_eos) {
      for (int32_t id : p.eos_token_ids) logits[id] = kNegInf;
    }
  }
  if (!PenaltiesActive(p)) return;
  const float rep = p.repetition_penalty;
  const float freq = p.frequency_penalty;
  const float presence = p.presence_penalty;
  state.counts().ForEach([&](const TokenCounts::Entry& e) {
    float& l = logits[e.id];
    if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
    if (e.generated > 0) l -= freq * static_cast<float>(e.generated) + presence;
  });
}

// Step 6's division; callers skip it for greedy temperatures.
void DivideByTemperature(float* logits, int64_t vocab, float t) {
  for (int64_t i = 0; i < vocab; ++i) logits[i] /= t;
}

// log(sum(exp(x))) over the row: exps in float, sum in double.
double LogSumExp(const float* x, int64_t vocab) {
  float m = kNegInf;
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, x[i]);
  if (!(m > kNegInf)) return m;  // every entry masked: all logprobs are -inf
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(x[i] - m);
  return static_cast<double>(m) + std::log(sum);
}

bool BetterLogprob(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
}

// Fills result.logprob for result.token and result.top[0..n) from the log_softmax of x.
void FillLogprobs(const float* x, int64_t vocab, int32_t n, SampleResult& result) {
  const double lse = LogSumExp(x, vocab);
  result.logprob = static_cast<float>(static_cast<double>(x[result.token]) - lse);
  result.num_top = n;
  if (n == 0) return;
  // One pass keeping the n best (value desc, id asc) in a sorted array; values are logits here.
  TokenLogprob* top = result.top.data();
  int32_t count = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const TokenLogprob cand{static_cast<int32_t>(i), x[i]};
    if (count == n && !BetterLogprob(cand, top[n - 1])) continue;
    int32_t pos = count < n ? count++ : n - 1;
    while (pos > 0 && BetterLogprob(cand, top[pos - 1])) {
      top[pos] = top[pos - 1];
      --pos;
    }
    top[pos] = cand;
  }
  for (int32_t i = 0; i < count; ++i) {
    top[i].logprob = static_cast<float>(static_cast<double>(top[i].logprob) - lse);
  }
  // Distinct logits can round to equal logprobs; re-establish (logprob desc, id asc).
  std::stable_sort(top, top + count, BetterLogprob);
}

// The candidates in sampling order, (weight desc, id asc), without sorting them all: a counting
// sort groups them by weight bucket (the top 12 bits of the float: exponent and 3 mantissa bits,
// monotone for weights in [0, 1]), highest bucket first, and a bucket is sorted only when a walk
// has to look inside it. Walks skip whole buckets by their mass, so a flat distribution over a
// 150k vocabulary costs a few linear passes, not a sort.
class BucketOrder {
 public:
  static constexpr int kBuckets = 1024;  // weights <= 1.0f have bits >> 20 <= 0x3F8

  static int BucketOf(float w) {
    uint32_t bits;
    std::memcpy(&bits, &w, sizeof(bits));
    // Weights are finite and in [0, 1] (SampleScaled guarantees it); the clamp keeps a bad value
    // from indexing past the bucket arrays.
    return std::min(static_cast<int>(bits >> 20), kBuckets - 1);
  }

  // Candidates are cand[0..n), or 0..n-1 when cand is null.
  BucketOrder(const float* w, const int32_t* cand, int64_t n, SamplerScratch& s)
      : w_(w),
        ids_(s.order.data()),
        mass_(s.bucket_mass.data()),
        begin_(s.bucket_begin.data()),
        end_(s.bucket_end.data()),
        sorted_(s.bucket_sorted.data()) {
    std::fill(mass_, mass_ + kBuckets, 0.0);
    std::fill(end_, end_ + kBuckets, int64_t{0});  // counts for now
    std::fill(sorted_, sorted_ + kBuckets, uint8_t{0});
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = cand ? cand[i] : static_cast<int32_t>(i);
      const int b = BucketOf(w[id]);
      ++end_[b];
      mass_[b] += w[id];
    }
    int64_t pos = 0;
    for (int b = kBuckets - 1; b >= 0; --b) {
      begin_[b] = pos;
      pos += end_[b];
      end_[b] = begin_[b];  // fill pointer, ends at the bucket's end
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = cand ? cand[i] : static_cast<int32_t>(i);
      ids_[end_[BucketOf(w[id])]++] = id;
    }
    size_ = n;
  }

  int64_t size() const { return size_; }

  double TotalMass() const {
    double z = 0.0;
    for (int b = kBuckets - 1; b >= 0; --b) z += mass_[b];
    return z;
  }

  // Position (in sampling order) of the first candidate at which the running mass reaches
  // `target` (>= target, or > target when strict); -1 if rounding keeps it short.
  int64_t FindCrossing(double target, bool strict) {
    double cum = 0.0;
    for (int b = kBuckets - 1; b >= 0; --b) {
      if (begin_[b] == end_[b]) continue;
      const double after = cum + mass_[b];
      if (!(strict ? after > target : after >= target)) {
        cum = after;
        continue;
      }
      SortBucket(b);
      for (int64_t i = begin_[b]; i < end_[b]; ++i) {
        cum += w_[ids_[i]];
        if (strict ? cum > target : cum >= target) return i;
      }
    }
    return -1;
  }

  // Position of the first candidate with weight < threshold (size() if none).
  int64_t FirstBelow(float threshold) {
    const int tb = BucketOf(threshold);
    if (begin_[tb] == end_[tb]) return begin_[tb];  // buckets above are all >= threshold
    SortBucket(tb);
    for (int64_t i = begin_[tb]; i < end_[tb]; ++i) {
      if (w_[ids_[i]] < threshold) return i;
    }
    return end_[tb];
  }

  // Keeps the first n candidates. The bucket that n cuts into must be sorted (true for positions
  // returned by FindCrossing / FirstBelow).
  void Truncate(int64_t n) {
    for (int b = 0; b < kBuckets; ++b) {
      if (begin_[b] >= n) {
        end_[b] = begin_[b];
        mass_[b] = 0.0;
      } else if (end_[b] > n) {
        end_[b] = n;
        mass_[b] = 0.0;
        for (int64_t i = begin_[b]; i < n; ++i) mass_[b] += w_[ids_[i]];
      }
    }
    size_ = std::min(size_, n);
  }

  // Step 9: the candidates kept (positions [0, size())) whose logit x[id] is above -inf, ascending;
  // no ids when that is the whole vocabulary.
  void FillMask(const float* x, int64_t vocab, SamplingMask* mask) const {
    mask->ids.clear();
    int64_t count = 0;
    for (int64_t i = 0; i < size_; ++i) count += x[ids_[i]] > kNegInf ? 1 : 0;
    mask->count = static_cast<int32_t>(count);
    if (count == vocab) return;
    mask->ids.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < size_; ++i) {
      if (x[ids_[i]] > kNegInf) mask->ids.push_back(ids_[i]);
    }
    std::sort(mask->ids.begin(), mask->ids.end());
  }

  // Inverse CDF: the candidate where the running mass first exceeds u * total. If rounding keeps
  // it short, the last candidate with a positive weight.
  int32_t Pick(double u) {
    const int64_t pos = FindCrossing(u * TotalMass(), /*strict=*/true);
    if (pos >= 0) return ids_[pos];
    for (int b = 0; b < kBuckets; ++b) {
      if (begin_[b] == end_[b] || mass_[b] <= 0.0) continue;
      SortBucket(b);
      for (int64_t i = end_[b] - 1; i >= begin_[b]; --i) {
        if (w_[ids_[i]] > 0.0f) return ids_[i];
      }
    }
    return ids_[0];
  }

 private:
  void SortBucket(int b) {
    if (sorted_[b]) return;
    std::sort(ids_ + begin_[b], ids_ + end_[b],
              [this](int32_t a, int32_t c) { return w_[a] > w_[c] || (w_[a] == w_[c] && a < c); });
    sorted_[b] = 1;
  }

  const float* w_;
  int32_t* ids_;
  double* mass_;
  int64_t* begin_;
  int64_t* end_;
  uint8_t* sorted_;
  int64_t size_ = 0;
};

// The mask of a draw that had no distribution: the drawn token alone.
void OnlyToken(int32_t token, SamplingMask* mask) {
  mask->count = 1;
  mask->ids.assign(1, token);
}

// Steps 7-9 on temperature-scaled logits x. `u` is the Philox uniform in [0, 1). `mask`: step 9's
// output, or null when not asked.
int32_t SampleScaled(const float* x, int64_t vocab, const SamplingParams& p, double u,
                     SamplerScratch& scratch, SamplingMask* mask) {
  // NaN logits (a broken model file, an overflow) never win; NaN compares false, so `m` skips them.
  float m = kNegInf;
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, x[i]);
  if (!(m > kNegInf)) {  // everything masked: nothing to sample from
    const int32_t token = cpu::Argmax(x, vocab);
    if (mask != nullptr) OnlyToken(token, mask);
    return token;
  }
  float* w = scratch.weights.data();
  float w_max = 0.0f;
  const bool inf_max = std::isinf(m);  // e.g. a tiny temperature: only the +inf logits remain
  for (int64_t i = 0; i < vocab; ++i) {
    const float d = x[i] - m;
    w[i] = inf_max ? (x[i] == m ? 1.0f : 0.0f) : (std::isnan(d) ? 0.0f : std::exp(d));
    w_max = std::max(w_max, w[i]);
  }

  const int32_t* cand = nullptr;
  int64_t n = vocab;
  if (p.top_k > 0 && p.top_k < vocab) {
    int32_t* ids = scratch.ids.data();
    std::iota(ids, ids + vocab, 0);
    std::nth_element(ids, ids + p.top_k, ids + vocab,
                     [w](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
    cand = ids;
    n = p.top_k;
  }
  BucketOrder order(w, cand, n, scratch);

  if (p.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p of the total; at least one token.
    const int64_t last = order.FindCrossing(static_cast<double>(p.top_p) * order.TotalMass(),
                                            /*strict=*/false);
    if (last >= 0) order.Truncate(last + 1);
  }
  if (p.min_p > 0.0f) {
    // Renormalizing scales every weight alike, so the threshold is min_p * (largest weight),
    // and the largest weight survives top-k and top-p. min_p <= 1 keeps at least that token.
    order.Truncate(order.FirstBelow(p.min_p * w_max));
  }
  if (mask != nullptr) order.FillMask(x, vocab, mask);
  return order.Pick(u);
}

}  // namespace

void ApplyAllowedMask(float* logits, int64_t vocab, const uint32_t* allowed) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // A constraint allows few tokens (most words are 0) or nearly all (most are ~0): both have a
  // path without a test per token.
  for (int64_t w = 0; w * 32 < vocab; ++w) {
    const uint32_t bits = allowed[w];
    if (bits == 0xFFFFFFFFu) continue;
    float* row = logits + w * 32;
    const int64_t end = std::min<int64_t>(32, vocab - w * 32);
    if (bits == 0) {
      std::fill(row, row + end, kNegInf);
      continue;
    }
    for (uint32_t off = ~bits; off != 0; off &= off - 1) {  // each disallowed token
      const int b = __builtin_ctz(off);
      if (b < end) row[b] = kNegInf;
    }
  }
}

SampleResult Sample(float* logits, int64_t vocab, const SequenceSampler& state,
                    SamplerScratch& scratch, const uint32_t* allowed) {
  const SamplingParams& p = state.params();
  const bool want_logprob = p.return_logprob || p.logprobs > 0;
  const bool raw_logprobs = want_logprob && p.logprobs_mode == LogprobsMode::kRaw;
  // Step 1: the raw row is kept whole because the chosen token is not known yet.
  if (raw_logprobs) scratch.raw_logits.assign(logits, logits + vocab);

  // Step 2a: a constraint's mask (structured outputs): tokens it does not allow get -inf before
  // anything else touches the row, so no bias or penalty can bring them back.
  if (allowed != nullptr) ApplyAllowedMask(logits, vocab, allowed);
  ApplyBiasMaskPenalties(logits, state, /*mask_min_tokens=*/true);

  SampleResult result;
  // Temperatures this small make x / T overflow and are greedy in effect (vLLM draws the same
  // line).
  SamplingMask* mask = p.return_sampling_mask ? &result.mask : nullptr;
  if (p.temperature < kGreedyTemperature) {
    result.token = cpu::Argmax(logits, vocab);  // vectorized: 262144 logits a row
    if (mask != nullptr) OnlyToken(result.token, mask);
  } else {
    DivideByTemperature(logits, vocab, p.temperature);
    if (scratch.weights.size() < static_cast<size_t>(vocab)) {
      scratch.weights.resize(vocab);
      scratch.ids.resize(vocab);
      scratch.order.resize(vocab);
    }
    if (scratch.bucket_mass.empty()) {
      scratch.bucket_mass.resize(BucketOrder::kBuckets);
      scratch.bucket_begin.resize(BucketOrder::kBuckets);
      scratch.bucket_end.resize(BucketOrder::kBuckets);
      scratch.bucket_sorted.resize(BucketOrder::kBuckets);
    }
    const double u = philox::UniformDouble(p.seed, state.sequence(),
                                           static_cast<uint64_t>(state.num_generated()));
    result.token = SampleScaled(logits, vocab, p, u, scratch, mask);
  }
  if (want_logprob) {
    // kProcessed: `logits` now holds the biased, masked, penalized, temperature-scaled row.
    FillLogprobs(raw_logprobs ? scratch.raw_logits.data() : logits, vocab, p.logprobs, result);
  }
  return result;
}

PromptScorer::PromptScorer(SamplingParams params, uint64_t sequence,
                           std::span<const int32_t> context)
    : context_(std::move(params), sequence, context) {}

SampleResult PromptScorer::Score(float* logits, int64_t vocab, int32_t token) {
  const SamplingParams& p = context_.params();
  if (p.logprobs_mode == LogprobsMode::kProcessed) {
    ApplyBiasMaskPenalties(logits, context_, /*mask_min_tokens=*/false);
    if (p.temperature >= kGreedyTemperature) DivideByTemperature(logits, vocab, p.temperature);
  }
  SampleResult result;
  result.token = token;
  FillLogprobs(logits, vocab, p.logprobs, result);
  context_.AppendPrompt(token);
  return result;
}

}  // namespace astr
