// Op-table cases of device sampling (kernels/cuda/sampling.h): every case builds a batch of rows
// (logits + a SequenceSampler each: params, prompt, tokens generated so far), samples each row with
// the CPU sampler (worker/sampler.h Sample) and the whole batch with LaunchSampling on the
// parameters PackSamplingRow packs, and compares row by row.
//
// What must agree:
//   - the token. The GPU sums the same f32 weights in another way (sampling.h), so a draw whose
//     u * total lies within ~1e-11 of a CDF boundary (or a top-p target that close to one) may
//     pick the neighbouring token: over a case's few hundred draws the expected number of such
//     rows is far below 1. A case allows max_mismatches (0 for greedy / deterministic cases, 1 for
//     random draws) and names every mismatching row with its seed in the result line.
//   - logprobs (when asked, for rows whose tokens agree): the chosen token's within 1e-4 (CUDA's
//     expf is within 2 ulp, so the log-sum-exp agrees to ~1e-6; exact -inf / NaN must match);
//     the top-n: the same count, the same set of ids, each id's logprob within 1e-4 (the order
//     may differ only between entries whose logprobs round within an ulp; the set is fixed by
//     the logit order, which is the same on both).
//
// Logits: N(0, 2) per element ("normal": a flat, high-entropy row over a big vocabulary), the same
// with a few boosted tokens ("peaked"), or rounded to multiples of 0.5 ("quantized": many exact
// ties, which exercise the (weight desc, id asc) order at every top-k / top-p / CDF cut).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/sampling.h"
#include "tests/gpu/op_test.h"
#include "worker/backends/cuda/sampling_pack.h"
#include "worker/sampler.h"

namespace astr::gputest {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kLogprobTol = 1e-4;
const int kVocabs[] = {1000, 49152, 151936};

enum class Logits { kNormal, kPeaked, kQuantized, kMixed, kEdge, kTies };

// One sample row: its sampler state is SequenceSampler(params, sequence, prompt) + Append(each
// generated token).
struct RowSpec {
  SamplingParams params;
  uint64_t sequence = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  // A constraint's mask (structured outputs): the tokens allowed; empty with `masked` false: none.
  bool masked = false;
  std::vector<int32_t> allowed;
};

struct SamplingCase {
  std::string op;
  std::string shape;
  int vocab = 1000;
  int rows = 1;
  Logits logits = Logits::kMixed;
  uint64_t seed = 1;
  int max_mismatches = 0;
  // The row's spec, given its logits (to aim biases / stops / penalties at likely tokens).
  std::function<RowSpec(int row, const float* logits)> spec;
};

// Edge rows (Logits::kEdge), by row % 6: two +inf logits; NaNs sprinkled (none at 0); every
// logit -inf; NaN at 0 (greedy's CPU rule: token 0); huge logits that a tiny temperature sends to
// +inf (only those weigh); all equal (a uniform draw).
void FillEdge(int row, int vocab, std::mt19937_64& rng, float* x) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int i = 0; i < vocab; ++i) x[i] = nd(rng);
  switch (row % 6) {
    case 0:
      x[vocab / 3] = kInf, x[vocab - 2] = kInf;
      break;
    case 1:
      for (int i = 1; i < vocab; i += 97) x[i] = NAN;
      break;
    case 2:
      for (int i = 0; i < vocab; ++i) x[i] = -kInf;
      break;
    case 3:
      x[0] = NAN;
      break;
    case 4:
      x[5] = 5e33f, x[vocab / 2] = 5e33f, x[7] = 3e33f;  // / 1e-5: +inf, +inf, 3e38
      break;
    default:
      for (int i = 0; i < vocab; ++i) x[i] = 0.25f;
      break;
  }
}

// Tie rows (Logits::kTies), by row % 4: the maximum (20) at three ids, the lowest 17 + row; at id 0
// and vocab - 1; at two adjacent ids; every logit equal.
void FillTies(int row, int vocab, std::mt19937_64& rng, float* x) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int i = 0; i < vocab; ++i) x[i] = nd(rng);
  switch (row % 4) {
    case 0:
      x[vocab - 1] = 20.0f, x[vocab / 2] = 20.0f, x[17 + row] = 20.0f;
      break;
    case 1:
      x[vocab - 1] = 20.0f, x[0] = 20.0f;
      break;
    case 2:
      x[vocab / 3] = 20.0f, x[vocab / 3 + 1] = 20.0f;
      break;
    default:
      for (int i = 0; i < vocab; ++i) x[i] = -1.5f;
      break;
  }
}

void FillLogits(Logits kind, uint64_t seed, int row, int vocab, float* x) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(row));
  if (kind == Logits::kEdge) return FillEdge(row, vocab, rng, x);
  if (kind == Logits::kTies) return FillTies(row, vocab, rng, x);
  if (kind == Logits::kMixed) {
    kind = row % 3 == 0 ? Logits::kNormal : row % 3 == 1 ? Logits::kPeaked : Logits::kQuantized;
  }
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int i = 0; i < vocab; ++i) {
    const float v = nd(rng);
    x[i] = kind == Logits::kQuantized ? std::round(v * 2.0f) / 2.0f : v;
  }
  if (kind == Logits::kPeaked) {
    for (int j = 0; j < 6; ++j) x[rng() % vocab] = 9.0f + 1.5f * j;
  }
}

// The ids of the n largest logits (value desc, id asc).
std::vector<int32_t> TopIds(const float* x, int vocab, int n) {
  std::vector<int32_t> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  ids.resize(n);
  return ids;
}

bool LogprobClose(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (a == b) return true;  // also equal infinities
  return std::fabs(static_cast<double>(a) - b) <= kLogprobTol;
}

// Compares one row; returns "" when it agrees, else what differs. *lp_err: largest logprob diff.
std::string CompareRow(const SampleResult& want, const cuda::DeviceSampleResult& got,
                       double* lp_err) {
  if (want.token != got.token) return "token";
  if (!LogprobClose(want.logprob, got.logprob)) return "logprob";
  if (std::isfinite(want.logprob)) {
    *lp_err = std::max(*lp_err, std::fabs(static_cast<double>(want.logprob) - got.logprob));
  }
  if (want.num_top != got.num_top) return "num_top";
  std::vector<int32_t> a, b;
  for (int j = 0; j < want.num_top; ++j) a.push_back(want.top[j].id), b.push_back(got.top_ids[j]);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) return "top-n ids";
  for (int j = 0; j < want.num_top; ++j) {
    for (int k = 0; k < got.num_top; ++k) {
      if (got.top_ids[k] != want.top[j].id) continue;
      if (!LogprobClose(want.top[j].logprob, got.top_logprobs[k])) return "top-n logprob";
      if (std::isfinite(want.top[j].logprob)) {
        *lp_err = std::max(*lp_err, std::fabs(double{want.top[j].logprob} - got.top_logprobs[k]));
      }
    }
  }
  return "";
}

// Uploads v (at least one element, so that empty edit arrays still get a valid pointer).
template <typename T>
cudaError_t UploadAtLeastOne(std::vector<T> v, DeviceBuffer<T>* buf) {
  if (v.empty()) v.resize(1);
  return buf->Upload(v);
}

CaseResult RunSampling(const SamplingCase& c) {
  const int64_t row_len = c.vocab;
  std::vector<float> logits(c.rows * row_len);
  std::vector<SampleResult> want(c.rows);
  std::vector<uint64_t> seeds(c.rows);
  cuda::SamplingBatch batch;
  SamplerScratch scratch;
  const int words = (c.vocab + 31) / 32;
  std::vector<int32_t> mask_rows(c.rows, -1);
  std::vector<uint32_t> masks;  // the masked rows' words, back to back
  for (int r = 0; r < c.rows; ++r) {
    float* x = logits.data() + r * row_len;
    FillLogits(c.logits, c.seed, r, c.vocab, x);
    const RowSpec spec = c.spec(r, x);
    const Status valid = ValidateSamplingParams(spec.params, c.vocab);
    if (!valid.ok()) return Fail("row " + std::to_string(r) + ": " + valid.ToString());
    SequenceSampler state(spec.params, spec.sequence, spec.prompt);
    for (int32_t t : spec.generated) state.Append(t);
    std::vector<float> copy(x, x + row_len);
    const uint32_t* allowed = nullptr;
    if (spec.masked) {
      mask_rows[r] = static_cast<int32_t>(masks.size() / words);
      masks.resize(masks.size() + words, 0);
      uint32_t* m = masks.data() + masks.size() - words;
      for (int32_t t : spec.allowed) m[t / 32] |= 1u << (t % 32);
      allowed = m;
    }
    want[r] = Sample(copy.data(), c.vocab, state, scratch, allowed);
    cuda::PackSamplingRow(state, c.vocab, &batch);
    seeds[r] = spec.params.seed;
  }
  DeviceBuffer<float> d_logits, d_raw(logits.size());
  DeviceBuffer<cuda::DeviceSamplingParams> d_params;
  DeviceBuffer<int32_t> d_bias_ids, d_pen_ids, d_pen_gen;
  DeviceBuffer<float> d_bias_values;
  DeviceBuffer<cuda::DeviceSampleResult> d_results(c.rows);
  DeviceBuffer<int32_t> d_mask_rows;
  DeviceBuffer<uint32_t> d_masks;
  const bool any_mask = !masks.empty();
  if (any_mask) {
    ASTR_GPU_CHECK(d_mask_rows.Upload(mask_rows));
    ASTR_GPU_CHECK(d_masks.Upload(masks));
  }
  ASTR_GPU_CHECK(d_logits.Upload(logits));
  // The scratch row starts as NaN: a read before a write shows.
  ASTR_GPU_CHECK(cudaMemset(d_raw.get(), 0xff, logits.size() * sizeof(float)));
  ASTR_GPU_CHECK(d_params.Upload(batch.params));
  ASTR_GPU_CHECK(UploadAtLeastOne(batch.bias_ids, &d_bias_ids));
  ASTR_GPU_CHECK(UploadAtLeastOne(batch.bias_values, &d_bias_values));
  ASTR_GPU_CHECK(UploadAtLeastOne(batch.penalty_ids, &d_pen_ids));
  ASTR_GPU_CHECK(UploadAtLeastOne(batch.penalty_generated, &d_pen_gen));
  cuda::SamplingArgs args;
  args.logits = d_logits.get();
  args.num_rows = c.rows;
  args.vocab = c.vocab;
  args.params = d_params.get();
  args.bias_ids = d_bias_ids.get();
  args.bias_values = d_bias_values.get();
  args.penalty_ids = d_pen_ids.get();
  args.penalty_generated = d_pen_gen.get();
  args.raw_logits = d_raw.get();
  args.results = d_results.get();
  if (any_mask) {
    args.mask_rows = d_mask_rows.get();
    args.allowed = d_masks.get();
    args.mask_words = words;
  }
  ASTR_GPU_CHECK(cuda::LaunchSampling(args, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<cuda::DeviceSampleResult> got;
  ASTR_GPU_CHECK(d_results.Download(&got));

  int token_mismatches = 0;
  double lp_err = 0.0;
  std::string detail;
  bool other_failure = false;
  int listed = 0;
  for (int r = 0; r < c.rows; ++r) {
    const std::string diff = CompareRow(want[r], got[r], &lp_err);
    if (diff.empty()) continue;
    if (diff == "token") {
      ++token_mismatches;
    } else {
      other_failure = true;
    }
    if (++listed > 24) continue;  // the line stays readable; the count says how many
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%srow %d (seed %llu) %s: cpu %d gpu %d",
                  detail.empty() ? "" : "; ", r, static_cast<unsigned long long>(seeds[r]),
                  diff.c_str(), want[r].token, got[r].token);
    detail += buf;
  }
  if (other_failure || token_mismatches > c.max_mismatches) {
    return Fail(std::to_string(token_mismatches) + " token mismatches (allowed " +
                    std::to_string(c.max_mismatches) + "): " + detail,
                lp_err, kLogprobTol);
  }
  CaseResult ok = Pass(lp_err, kLogprobTol);
  if (token_mismatches > 0) ok.detail = "tolerated mismatches: " + detail;
  return ok;
}

std::string VocabShape(int vocab, int rows, const std::string& extra) {
  return "vocab=" + std::to_string(vocab) + " rows=" + std::to_string(rows) +
         (extra.empty() ? "" : " " + extra);
}

void AddCase(SamplingCase c) {
  RegisterCase({c.op, c.shape, [c] { return RunSampling(c); }});
}

// Seeds that differ per row and look nothing alike (the RNG key).
uint64_t RowSeed(uint64_t base, int row) { return base * 0x9E3779B97F4A7C15ull + row * 7919u + 1; }

SamplingCase Make(const std::string& op, int vocab, int rows, Logits logits, uint64_t seed,
                  int max_mismatches, const std::string& extra,
                  std::function<RowSpec(int, const float*)> spec) {
  SamplingCase c;
  c.op = op;
  c.vocab = vocab;
  c.rows = rows = CaseRows(rows);
  c.logits = logits;
  c.seed = seed;
  c.max_mismatches = max_mismatches;
  c.shape = VocabShape(vocab, rows, extra);
  c.spec = std::move(spec);
  return c;
}

void RegisterSamplingBasicCases() {
  for (int v : kVocabs) {
    // Greedy, with raw logprobs + top-5 on odd rows, processed + top-20 on rows % 4 == 2.
    AddCase(Make("sampling_greedy", v, 32, Logits::kMixed, 1, 0, "logprobs raw/processed",
                 [](int r, const float*) {
                   RowSpec s;
                   s.params.temperature = 0.0f;
                   if (r % 2 == 1) s.params.logprobs = 5;
                   if (r % 4 == 2) {
                     s.params.logprobs = 20;
                     s.params.logprobs_mode = LogprobsMode::kProcessed;
                   }
                   return s;
                 }));
    // Greedy ties: the maximum repeated at several ids -> the lowest; all-equal rows -> 0.
    AddCase(Make("sampling_greedy_ties", v, 8, Logits::kTies, 2, 0, "", [](int, const float*) {
      RowSpec s;
      s.params.temperature = 0.0f;
      s.params.return_logprob = true;
      return s;
    }));
    // Temperature draws over many seeds (different sequences and token indices too).
    for (float t : {0.7f, 1.0f, 1.5f}) {
      char extra[64];
      std::snprintf(extra, sizeof(extra), "T=%g", t);  // a seed per row
      AddCase(Make("sampling_temperature", v, 256, Logits::kMixed, 3, 1, extra,
                   [t](int r, const float*) {
                     RowSpec s;
                     s.params.temperature = t;
                     s.params.seed = RowSeed(3, r);
                     s.sequence = r % 4;
                     for (int g = 0; g < r % 5; ++g) s.generated.push_back(g * 13 % 1000);
                     return s;
                   }));
    }
  }
}

// Constraint masks (structured outputs): every other row masked to a few tokens or to most of the
// vocabulary (with the ids chosen from the row's logits so that masked and allowed tokens both
// matter), greedy and temperature draws, raw and processed logprobs, a logit bias on a masked
// token that must not bring it back.
void RegisterSamplingMaskCases() {
  for (int v : kVocabs) {
    for (float t : {0.0f, 1.0f}) {
      char extra[64];
      std::snprintf(extra, sizeof(extra), "T=%g masks", t);
      AddCase(Make("sampling_mask", v, 64, Logits::kMixed, 11, t == 0.0f ? 0 : 1, extra,
                   [t, v](int r, const float* x) {
                     RowSpec s;
                     s.params.temperature = t;
                     s.params.seed = RowSeed(11, r);
                     if (r % 3 == 1) s.params.logprobs = 5;
                     if (r % 3 == 2) {
                       s.params.logprobs = 5;
                       s.params.logprobs_mode = LogprobsMode::kProcessed;
                     }
                     if (r % 2 == 0) return s;
                     s.masked = true;
                     // The best token is masked out, the next ones are allowed.
                     const int best = static_cast<int>(std::max_element(x, x + v) - x);
                     if (r % 4 == 1) {
                       for (int i = 0; i < v; i += 997) {
                         if (i != best) s.allowed.push_back(i);
                       }
                     } else {
                       for (int i = 0; i < v; ++i) {
                         if (i != best && i % 7 != 0) s.allowed.push_back(i);
                       }
                     }
                     s.params.logit_bias[best] = 50.0f;
                     return s;
                   }));
    }
  }
}

void RegisterSamplingFilterCases() {
  for (int v : kVocabs) {
    for (int k : {1, 20, 50, 1000}) {
      AddCase(Make("sampling_top_k", v, 96, Logits::kMixed, 4, 1, "k=" + std::to_string(k),
                   [k](int r, const float*) {
                     RowSpec s;
                     s.params.top_k = k;
                     s.params.seed = RowSeed(4, r);
                     return s;
                   }));
    }
    for (float p : {0.05f, 0.5f, 0.9f, 0.99f}) {
      char extra[32];
      std::snprintf(extra, sizeof(extra), "p=%g", p);
      AddCase(Make("sampling_top_p", v, 96, Logits::kMixed, 5, 1, extra, [p](int r, const float*) {
        RowSpec s;
        s.params.top_p = p;
        s.params.seed = RowSeed(5, r);
        return s;
      }));
    }
    for (float m : {0.01f, 0.1f, 0.5f}) {
      char extra[32];
      std::snprintf(extra, sizeof(extra), "min_p=%g", m);
      AddCase(Make("sampling_min_p", v, 96, Logits::kMixed, 6, 1, extra, [m](int r, const float*) {
        RowSpec s;
        s.params.min_p = m;
        s.params.temperature = 1.2f;
        s.params.seed = RowSeed(6, r);
        return s;
      }));
    }
    AddCase(Make("sampling_combined", v, 128, Logits::kMixed, 7, 1,
                 "T=0.8 k=40 p=0.9 min_p=0.02 | T=1 p=0.95 min_p=0.05", [](int r, const float*) {
                   RowSpec s;
                   s.params.seed = RowSeed(7, r);
                   if (r % 2 == 0) {
                     s.params.temperature = 0.8f;
                     s.params.top_k = 40;
                     s.params.top_p = 0.9f;
                     s.params.min_p = 0.02f;
                   } else {
                     s.params.top_p = 0.95f;
                     s.params.min_p = 0.05f;
                   }
                   return s;
                 }));
    AddCase(Make("sampling_edge", v, 24, Logits::kEdge, 8, 0, "inf/nan/-inf rows, T=1e-5",
                 [](int r, const float*) {
                   RowSpec s;
                   s.params.seed = RowSeed(8, r);
                   // Greedy on the NaN-at-0 rows; a tiny temperature (not greedy: 1e-5 is not
                   // below kGreedyTemperature) on the huge-logit rows; T=1 elsewhere.
                   if (r % 6 == 3) s.params.temperature = 0.0f;
                   if (r % 6 == 4) s.params.temperature = 1e-5f;
                   if (r % 6 == 2 || r % 6 == 5) s.params.return_logprob = true;
                   return s;
                 }));
  }
}

void RegisterSamplingEditCases() {
  for (int v : kVocabs) {
    // Penalties over a history drawn from the likeliest tokens (so they matter), with and without
    // a window; greedy on every third row.
    AddCase(Make("sampling_penalties", v, 96, Logits::kMixed, 9, 1,
                 "rep=1.3 freq=0.4 pres=0.6 window=0/16", [v](int r, const float* x) {
                   RowSpec s;
                   s.params.seed = RowSeed(9, r);
                   s.params.repetition_penalty = r % 3 == 1 ? 1.0f : 1.3f;
                   s.params.frequency_penalty = r % 3 == 2 ? 0.0f : 0.4f;
                   s.params.presence_penalty = 0.6f;
                   s.params.penalty_window = r % 2 == 0 ? 0 : 16;
                   if (r % 3 == 0) s.params.temperature = 0.0f;
                   const std::vector<int32_t> top = TopIds(x, v, 20);
                   for (int i = 0; i < 40; ++i) s.prompt.push_back(top[(i * 7 + r) % 20]);
                   for (int i = 0; i < 12; ++i) s.generated.push_back(top[(i * 3 + r) % 10]);
                   return s;
                 }));
    // Logit bias: the argmax pushed to -100, a few others lifted by +8.
    AddCase(Make("sampling_logit_bias", v, 64, Logits::kMixed, 10, 1, "+8 x3, -100 on the argmax",
                 [v](int r, const float* x) {
                   RowSpec s;
                   s.params.seed = RowSeed(10, r);
                   if (r % 4 == 0) s.params.temperature = 0.0f;
                   const std::vector<int32_t> top = TopIds(x, v, 1);
                   s.params.logit_bias[top[0]] = -100.0f;
                   for (int j = 1; j <= 3; ++j) s.params.logit_bias[(r * 31 + j * 977) % v] = 8.0f;
                   return s;
                 }));
    // min_tokens: stop ids are the two likeliest tokens, EOS the third; rows have generated 0..4
    // tokens of min_tokens 3, so some are masked and some not; ignore_eos on odd rows.
    AddCase(Make("sampling_min_tokens", v, 60, Logits::kPeaked, 11, 1,
                 "min_tokens=3 generated=0..4 ignore_eos=odd", [v](int r, const float* x) {
                   RowSpec s;
                   s.params.seed = RowSeed(11, r);
                   if (r % 3 == 0) s.params.temperature = 0.0f;
                   const std::vector<int32_t> top = TopIds(x, v, 3);
                   s.params.stop_token_ids = {top[0], top[1]};
                   s.params.eos_token_ids = {top[2]};
                   s.params.ignore_eos = r % 2 == 1;
                   s.params.min_tokens = 3;
                   s.params.max_tokens = 10;
                   for (int g = 0; g < r % 5; ++g) s.generated.push_back(g + 1);
                   return s;
                 }));
    // Logprobs with every edit on: raw top-20 / processed top-5, temperature 0.7.
    AddCase(Make("sampling_logprobs", v, 64, Logits::kMixed, 12, 1,
                 "raw top-20 | processed top-5, T=0.7, bias+penalties", [v](int r, const float* x) {
                   RowSpec s;
                   s.params.seed = RowSeed(12, r);
                   s.params.temperature = 0.7f;
                   s.params.logprobs = r % 2 == 0 ? 20 : 5;
                   s.params.logprobs_mode =
                       r % 2 == 0 ? LogprobsMode::kRaw : LogprobsMode::kProcessed;
                   s.params.repetition_penalty = 1.2f;
                   s.params.presence_penalty = 0.5f;
                   const std::vector<int32_t> top = TopIds(x, v, 8);
                   s.params.logit_bias[top[1]] = 2.5f;
                   s.params.logit_bias[top[5]] = -4.0f;
                   for (int i = 0; i < 8; ++i) s.prompt.push_back(top[(i + r) % 8]);
                   return s;
                 }));
  }
}

void RegisterSamplingCases() {
  RegisterSamplingBasicCases();
  RegisterSamplingFilterCases();
  RegisterSamplingMaskCases();
  RegisterSamplingEditCases();
}

}  // namespace

ASTR_GPU_CASES(RegisterSamplingCases);

}  // namespace astr::gputest
