// Token sampling on the GPU (see sampling.h for the contract and where it can differ from the CPU).
//
// Grid: one CTA of kThreads threads per sample row; thread i handles elements i, i + kThreads, ...
// (coalesced). A row never leaves global memory (152k floats do not fit in shared memory); each
// step below is one or more passes over it with a block reduction at the end.
//
// Keys. Every element gets a 64-bit key whose order is the CPU's order for that step:
//   weight key = bits(w) << id_bits | (vocab - 1 - id)   (w in [0, 1]: bits monotone; ties -> id
//   asc) logit key  = order(x) << id_bits | (vocab - 1 - id)  (order(): monotone map of float bits)
// Keys are distinct, so "the first n elements of the order" is exactly {key >= t} for one t, and
// top-k, top-p, min-p and the inverse-CDF draw each reduce to a threshold on the weight key.
//
// Search (SearchLargest): F(t) = sum over {key >= t} of a per-element value (1 to count, or the
// weight's fixed-point mass); F is a non-increasing step function of t. For a predicate P that is
// monotone in F, find the largest t with P(F(t)). Invariant: P(F(lo)) true, P(F(hi)) false. Each
// pass evaluates F at 3 thresholds splitting [lo, hi) in four (only elements in [lo, hi) are added:
// F(t) = F(hi) + their part, exact because the values are integers) and keeps the quarter where P
// flips. It stops when [lo, hi) holds exactly one element whose value is non-zero: F only changes
// at such elements, so that element's key is the answer; one more pass reads it.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/base/philox.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sampling.h"

namespace astr::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 32, "BlockReduce reduces the warp partials with one warp");
constexpr int kMaxReduce = 6;   // values reduced together
constexpr int kMassShift = 44;  // masses in units of 2^-44 (see QuantizedMass)
constexpr float kInf = __builtin_huge_valf();

struct Shared {
  uint64_t partial[kMaxReduce][kWarps];
  uint64_t total[kMaxReduce];
  double partial_d[kWarps];
  double total_d;
  float partial_f[kWarps];
  float total_f;
  uint64_t top_keys[kMaxTopLogprobs];
  int top_count;
  int top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// ---------------------------------------------------------------------------------------------
// Block reductions: result in every thread. Deterministic: a fixed shuffle tree in each warp, then
// warp 0 combines the 32 warp partials in a fixed tree. The leading barrier protects the shared
// slots from the previous reduction's readers.

struct SumOp {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a + b; }
};
struct MaxOp {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};
struct MinOp {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a < b ? a : b; }
};

template <int N, typename Op>
__device__ void BlockReduce(uint64_t (&v)[N], Op op, Shared& sh) {
  static_assert(N <= kMaxReduce);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    for (int off = 16; off > 0; off >>= 1) v[j] = op(v[j], __shfl_xor_sync(~0u, v[j], off));
  }
  __syncthreads();
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < N; ++j) sh.partial[j][warp] = v[j];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      uint64_t x = sh.partial[j][lane];
      for (int off = 16; off > 0; off >>= 1) x = op(x, __shfl_xor_sync(~0u, x, off));
      if (lane == 0) sh.total[j] = x;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = sh.total[j];
}

__device__ double BlockSumDouble(double v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(~0u, v, off);
  __syncthreads();
  if (lane == 0) sh.partial_d[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double x = sh.partial_d[lane];
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(~0u, x, off);
    if (lane == 0) sh.total_d = x;
  }
  __syncthreads();
  return sh.total_d;
}

// Max skipping NaN (fmaxf returns the other operand), like the CPU's std::max(m, x) loops.
__device__ float BlockMaxFloat(float v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, off));
  __syncthreads();
  if (lane == 0) sh.partial_f[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float x = sh.partial_f[lane];
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(~0u, x, off));
    if (lane == 0) sh.total_f = x;
  }
  __syncthreads();
  return sh.total_f;
}

// ---------------------------------------------------------------------------------------------
// Keys and values.

struct RowKeys {
  int vocab;
  int id_bits;  // bits of vocab - 1
  __device__ uint64_t Make(uint32_t order_bits, int id) const {
    return (static_cast<uint64_t>(order_bits) << id_bits) | static_cast<uint32_t>(vocab - 1 - id);
  }
  __device__ int Token(uint64_t key) const {
    return vocab - 1 - static_cast<int>(key & ((uint64_t{1} << id_bits) - 1));
  }
  __device__ uint32_t OrderBits(uint64_t key) const {
    return static_cast<uint32_t>(key >> id_bits);
  }
  // One past the largest weight key: weight bits <= bits(1.0f) = 0x3F800000 < 2^30.
  __device__ uint64_t WeightEnd() const { return uint64_t{1} << (30 + id_bits); }
  __device__ uint64_t LogitEnd() const { return uint64_t{1} << (32 + id_bits); }
};

// Monotone map of a logit to 32 bits for the CPU's (value desc, id asc) orders: -0 ties with +0
// (the CPU compares values) and NaN ranks below -inf.
__device__ uint32_t LogitOrder(float x) {
  if (isnan(x)) return 0u;
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// round(w * 2^44) for w in [0, 1] given its bits, half up. w = 1 -> 2^44, so a row's total is at
// most vocab * 2^44 < 2^64. Weights below 2^-45 give 0: "non-contributing", never drawn.
__device__ uint64_t QuantizedMass(uint32_t bits) {
  // w = mant * 2^(e - 150) for a biased exponent e >= 1, so w * 2^44 = mant * 2^(e - kUnitExp).
  constexpr uint32_t kUnitExp = 150 - kMassShift;
  const uint32_t e = bits >> 23;
  if (e == 0) return 0;  // 0 or subnormal (< 2^-126)
  const uint64_t mant = (bits & 0x7FFFFFu) | 0x800000u;
  if (e >= kUnitExp) return mant << (e - kUnitExp);  // e <= 127 (w <= 1): shift <= 21
  const uint32_t s = kUnitExp - e;                   // >= 1
  if (s > 24) return 0;                              // mant < 2^24 <= 2^(s - 1): rounds to 0
  return (mant + (uint64_t{1} << (s - 1))) >> s;
}

// Views of a row for the searches: Key(i) and Value(key).
struct WeightCount {  // top-k: every element counts 1
  const float* w;
  RowKeys r;
  __device__ uint64_t Key(int i) const { return r.Make(__float_as_uint(w[i]), i); }
  __device__ uint64_t Value(uint64_t) const { return 1; }
};
struct WeightMass {  // top-p and the draw: the fixed-point weight
  const float* w;
  RowKeys r;
  __device__ uint64_t Key(int i) const { return r.Make(__float_as_uint(w[i]), i); }
  __device__ uint64_t Value(uint64_t key) const { return QuantizedMass(r.OrderBits(key)); }
};
struct LogitCount {  // top-n logprobs: every element counts 1
  const float* x;
  RowKeys r;
  __device__ uint64_t Key(int i) const { return r.Make(LogitOrder(x[i]), i); }
  __device__ uint64_t Value(uint64_t) const { return 1; }
};

// F(lower) and the number of elements with a non-zero value and key >= lower.
template <class View>
__device__ void SumAtLeast(const View& view, int vocab, uint64_t lower, uint64_t* f, uint64_t* n,
                           Shared& sh) {
  uint64_t acc[2] = {0, 0};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t k = view.Key(i);
    if (k < lower) continue;
    const uint64_t v = view.Value(k);
    acc[0] += v;
    acc[1] += v != 0;
  }
  BlockReduce(acc, SumOp{}, sh);
  *f = acc[0];
  *n = acc[1];
}

// The largest key in [lo, hi) whose value is non-zero, plus one; 0 if there is none.
template <class View>
__device__ uint64_t MaxKeyIn(const View& view, int vocab, uint64_t lo, uint64_t hi, Shared& sh) {
  uint64_t best[1] = {0};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t k = view.Key(i);
    if (k >= lo && k < hi && view.Value(k) != 0 && k + 1 > best[0]) best[0] = k + 1;
  }
  BlockReduce(best, MaxOp{}, sh);
  return best[0];
}

// The largest t in [lo, end) with pred(F(t)) (see the file comment), as key + 1 (0: none found,
// which exact sums make impossible when the preconditions hold).
// Preconditions: pred(F(lo)) true; pred(0) false (F(end) = 0); n_lo = elements with key >= lo and
// a non-zero value. Block-uniform arguments; every thread returns the same value.
template <class View, class Pred>
__device__ uint64_t SearchLargest(const View& view, int vocab, uint64_t lo, uint64_t end,
                                  uint64_t n_lo, Pred pred, Shared& sh) {
  uint64_t hi = end, f_hi = 0, n_hi = 0;
  // n_lo - n_hi elements with a non-zero value lie in [lo, hi); keys are distinct, so hi - lo == 1
  // implies at most one.
  while (n_lo - n_hi > 1) {
    // Thresholds t1 < t2 < t3 split [lo, hi) in four; span >= 2 here, so t2 lies strictly inside
    // (lo, hi) and the kept quarter is strictly smaller. span < 2^52: span * 3 cannot overflow.
    const uint64_t span = hi - lo;
    const uint64_t t1 = lo + span / 4, t2 = lo + span / 2, t3 = lo + span * 3 / 4;
    // s_j: value in [t_j, hi); c_j: non-zero elements there. Scalars, not arrays: a runtime index
    // into an array would put it in local memory.
    uint64_t s1 = 0, s2 = 0, s3 = 0, c1 = 0, c2 = 0, c3 = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const uint64_t k = view.Key(i);
      if (k < t1 || k >= hi) continue;
      const uint64_t v = view.Value(k), nz = v != 0;
      s1 += v, c1 += nz;
      if (k >= t2) s2 += v, c2 += nz;
      if (k >= t3) s3 += v, c3 += nz;
    }
    uint64_t acc[6] = {s1, s2, s3, c1, c2, c3};
    BlockReduce(acc, SumOp{}, sh);
    s1 = acc[0], s2 = acc[1], s3 = acc[2], c1 = acc[3], c2 = acc[4], c3 = acc[5];
    // Keep the quarter where pred flips: the largest t_j with pred true (lo: true by the
    // invariant). F(t_j) = F(hi) + s_j; pred is monotone in F, F is non-increasing in t.
    const uint64_t f = f_hi, n = n_hi;
    if (pred(f + s3)) {
      lo = t3, n_lo = n + c3;
    } else if (pred(f + s2)) {
      lo = t2, n_lo = n + c2, hi = t3, f_hi = f + s3, n_hi = n + c3;
    } else if (pred(f + s1)) {
      lo = t1, n_lo = n + c1, hi = t2, f_hi = f + s2, n_hi = n + c2;
    } else {
      hi = t1, f_hi = f + s1, n_hi = n + c1;
    }
  }
  return MaxKeyIn(view, vocab, lo, hi, sh);
}

// ---------------------------------------------------------------------------------------------
// Steps of one row.

// Steps 2-4 (worker/sampler.cc ApplyBiasMaskPenalties): additive bias, then the -inf masks, then
// the penalties, each a parallel loop over distinct ids separated by barriers.
__device__ void ApplyEdits(float* logits, const DeviceSamplingParams& p, const SamplingArgs& a) {
  for (int i = p.bias_begin + threadIdx.x; i < p.bias_end; i += kThreads) {
    const float b = a.bias_values[i];
    if (b != -kInf) logits[a.bias_ids[i]] += b;
  }
  __syncthreads();
  for (int i = p.bias_begin + threadIdx.x; i < p.bias_end; i += kThreads) {
    if (a.bias_values[i] == -kInf) logits[a.bias_ids[i]] = -kInf;
  }
  __syncthreads();
  const float rep = p.repetition_penalty;
  for (int i = p.penalty_begin + threadIdx.x; i < p.penalty_end; i += kThreads) {
    float& l = logits[a.penalty_ids[i]];
    float v = l;
    if (rep != 1.0f) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
    const int32_t generated = a.penalty_generated[i];
    if (generated > 0) {
      // The CPU's l -= freq * float(generated) + presence, rounded per operation (no FMA).
      v = __fsub_rn(v, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(generated)),
                                 p.presence_penalty));
    }
    l = v;
  }
  __syncthreads();
}

// The CPU's Argmax: strict > from x[0], so the lowest id among equal maxima, NaN never wins, and a
// NaN at x[0] wins (nothing compares greater than it).
__device__ int Argmax(const float* x, RowKeys r, Shared& sh) {
  if (isnan(x[0])) return 0;
  uint64_t best[1] = {0};
  for (int i = threadIdx.x; i < r.vocab; i += kThreads) {
    const uint64_t k = r.Make(LogitOrder(x[i]), i);
    if (k > best[0]) best[0] = k;
  }
  BlockReduce(best, MaxOp{}, sh);
  return r.Token(best[0]);
}

// Step 7 on the weights w [vocab]: top-k, then top-p, then min-p. Each keeps a prefix of the
// (weight desc, id asc) order, i.e. the weight keys >= some bound, so the candidates left are the
// keys >= the largest of the bounds, which is returned.
__device__ uint64_t CandidatesLower(const float* w, float w_max, const DeviceSamplingParams& p,
                                    RowKeys r, Shared& sh) {
  const int vocab = r.vocab;
  uint64_t lower = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    // The key of the k-th candidate. Never "none": F(0) = vocab >= k.
    const uint64_t k = static_cast<uint64_t>(p.top_k);
    const auto at_least_k = [k](uint64_t f) { return f >= k; };
    lower = SearchLargest(WeightCount{w, r}, vocab, 0, r.WeightEnd(), vocab, at_least_k, sh) - 1;
  }
  if (p.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p of the total (the crossing token is kept).
    const WeightMass mass{w, r};
    uint64_t total, n;
    SumAtLeast(mass, vocab, lower, &total, &n, sh);
    const double target = static_cast<double>(p.top_p) * static_cast<double>(total);
    const auto reaches = [target](uint64_t f) { return static_cast<double>(f) >= target; };
    const uint64_t found = SearchLargest(mass, vocab, lower, r.WeightEnd(), n, reaches, sh);
    if (found != 0) lower = found - 1;
  }
  if (p.min_p > 0.0f) {
    // Keep w >= min_p * w_max: the same threshold on the weight bits (weights are >= 0).
    const uint64_t threshold = r.Make(__float_as_uint(p.min_p * w_max), vocab - 1);
    if (threshold > lower) lower = threshold;
  }
  return lower;
}

// Step 8: the inverse CDF over the candidates {weight key >= lower}: the first (in sampling order)
// at which the running mass exceeds u * total.
__device__ int Draw(const float* w, uint64_t lower, double u, RowKeys r, Shared& sh) {
  const int vocab = r.vocab;
  const WeightMass mass{w, r};
  uint64_t total, n;
  SumAtLeast(mass, vocab, lower, &total, &n, sh);
  const double target = u * static_cast<double>(total);
  uint64_t found = 0;
  if (static_cast<double>(total) > target) {
    const auto exceeds = [target](uint64_t f) { return static_cast<double>(f) > target; };
    found = SearchLargest(mass, vocab, lower, r.WeightEnd(), n, exceeds, sh);
  }
  if (found != 0) return r.Token(found - 1);
  // Rounding kept the total at the target (u within 2^-53 of 1): the CPU's fallback, the last
  // candidate with a positive weight. It exists: the largest weight (1) is always a candidate.
  uint64_t least[1] = {~uint64_t{0}};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = mass.Key(i);
    if (key >= lower && mass.Value(key) != 0 && key < least[0]) least[0] = key;
  }
  BlockReduce(least, MinOp{}, sh);
  return r.Token(least[0]);
}

// Steps 6-8 (SampleScaled) on logits that are edited but not yet divided by the temperature.
// Leaves x = logits / T in `logits`; `w` receives the weights [vocab] (may be `logits` itself).
__device__ int SampleTemperature(float* logits, float* w, const DeviceSamplingParams& p, RowKeys r,
                                 Shared& sh) {
  const int vocab = r.vocab;
  float m = -kInf;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = __fdiv_rn(logits[i], p.temperature);
    logits[i] = x;
    m = fmaxf(m, x);
  }
  m = BlockMaxFloat(m, sh);
  if (!(m > -kInf)) return Argmax(logits, r, sh);  // everything masked (or NaN)
  // Weights as the CPU: exp(x - m) of the f32 difference; with m = +inf only the +inf logits weigh
  // (1 each). The exp is taken in double and rounded to f32, which matches glibc's expf on all but
  // ~1e-4 of inputs (CUDA's expf is off by up to 2 ulp far more often), so both sides see the same
  // weights, ties and order. Cost: one double exp per element, once per row. The clamp only guards
  // the [0, 1] range that the keys and masses rely on.
  const bool inf_max = isinf(m);
  float w_max = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = logits[i], d = x - m;
    const float e = static_cast<float>(exp(static_cast<double>(d)));
    const float wi = inf_max ? (x == m ? 1.0f : 0.0f) : (isnan(d) ? 0.0f : fminf(e, 1.0f));
    w[i] = wi;
    w_max = fmaxf(w_max, wi);
  }
  w_max = BlockMaxFloat(w_max, sh);  // also the barrier that publishes w

  const uint64_t lower = CandidatesLower(w, w_max, p, r, sh);
  return Draw(w, lower, philox::UniformDouble(p.seed, p.sequence, p.token_index), r, sh);
}

// log(sum(exp(x))) as the CPU's LogSumExp: max skipping NaN, f32 exps summed in double.
__device__ double LogSumExp(const float* x, int vocab, Shared& sh) {
  float m = -kInf;
  for (int i = threadIdx.x; i < vocab; i += kThreads) m = fmaxf(m, x[i]);
  m = BlockMaxFloat(m, sh);
  if (!(m > -kInf)) return m;
  double sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += static_cast<double>(expf(x[i] - m));
  return static_cast<double>(m) + log(BlockSumDouble(sum, sh));
}

// The CPU's FillLogprobs: the chosen token's logprob and the top-n alternatives of log_softmax(x),
// first the n best logits (value desc, id asc), then ordered by (rounded logprob desc, id asc).
// Returns the chosen token's logprob; the alternatives go to sh.top_ids / sh.top_logprobs [0, n).
__device__ float FillLogprobs(const float* x, int token, int n, RowKeys r, Shared& sh) {
  const int vocab = r.vocab;
  const double lse = LogSumExp(x, vocab, sh);
  const float logprob = static_cast<float>(static_cast<double>(x[token]) - lse);
  const int count = n < vocab ? n : vocab;
  if (count <= 0) return logprob;
  const LogitCount view{x, r};
  const uint64_t c = static_cast<uint64_t>(count);
  const uint64_t cut =
      SearchLargest(
          view, vocab, 0, r.LogitEnd(), vocab, [c](uint64_t f) { return f >= c; }, sh) -
      1;
  if (threadIdx.x == 0) sh.top_count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t k = view.Key(i);
    if (k >= cut) {  // exactly `count` elements
      const int slot = atomicAdd(&sh.top_count, 1);
      if (slot < kMaxTopLogprobs) sh.top_keys[slot] = k;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // Insertion sort by key desc = (logit desc, id asc), then logprobs, then the CPU's stable
    // re-sort by (logprob desc, id asc): insertion sort is stable.
    for (int a = 1; a < count; ++a) {
      const uint64_t k = sh.top_keys[a];
      int b = a;
      for (; b > 0 && sh.top_keys[b - 1] < k; --b) sh.top_keys[b] = sh.top_keys[b - 1];
      sh.top_keys[b] = k;
    }
    for (int a = 0; a < count; ++a) {
      const int id = r.Token(sh.top_keys[a]);
      const float lp = static_cast<float>(static_cast<double>(x[id]) - lse);
      int b = a;
      for (; b > 0 && (sh.top_logprobs[b - 1] < lp ||
                       (sh.top_logprobs[b - 1] == lp && sh.top_ids[b - 1] > id));
           --b) {
        sh.top_logprobs[b] = sh.top_logprobs[b - 1];
        sh.top_ids[b] = sh.top_ids[b - 1];
      }
      sh.top_logprobs[b] = lp;
      sh.top_ids[b] = id;
    }
  }
  __syncthreads();
  return logprob;
}

__global__ void __launch_bounds__(kThreads, 1) SamplingKernel(SamplingArgs a) {
  __shared__ Shared sh;
  const int row = blockIdx.x;
  const DeviceSamplingParams& p = a.params[row];  // read where used (keeps registers free)
  const RowKeys r{a.vocab, a.vocab > 1 ? 32 - __clz(a.vocab - 1) : 0};
  float* logits = a.logits + static_cast<int64_t>(row) * a.vocab;
  float* scratch = a.raw_logits + static_cast<int64_t>(row) * a.vocab;
  const bool want_logprob = p.want_logprob != 0 || p.num_top > 0;
  const bool raw_logprobs = want_logprob && p.processed_logprobs == 0;
  // Step 1: the raw row, kept whole (the chosen token is not known yet).
  if (raw_logprobs) {
    for (int i = threadIdx.x; i < r.vocab; i += kThreads) scratch[i] = logits[i];
  }
  __syncthreads();  // the edits below touch elements other threads copied
  // Step 2a: the constraint's mask, before the bias (the CPU's order).
  if (a.mask_rows != nullptr && a.mask_rows[row] >= 0) {
    const uint32_t* m = a.allowed + static_cast<int64_t>(a.mask_rows[row]) * a.mask_words;
    for (int i = threadIdx.x; i < r.vocab; i += kThreads) {
      if (((m[i >> 5] >> (i & 31)) & 1u) == 0) logits[i] = -kInf;
    }
    __syncthreads();
  }
  ApplyEdits(logits, p, a);
  int token;
  if (p.greedy != 0) {
    token = Argmax(logits, r, sh);
  } else {
    // Processed logprobs need the scaled logits kept: the weights go to the scratch row then.
    float* w = want_logprob && !raw_logprobs ? scratch : logits;
    token = SampleTemperature(logits, w, p, r, sh);
  }
  float logprob = 0.0f;
  const int num_top =
      want_logprob ? (p.num_top < kMaxTopLogprobs ? p.num_top : kMaxTopLogprobs) : 0;
  if (want_logprob) logprob = FillLogprobs(raw_logprobs ? scratch : logits, token, num_top, r, sh);
  if (threadIdx.x == 0) {
    DeviceSampleResult& out = a.results[row];
    out.token = token;
    out.logprob = logprob;
    out.num_top = num_top;
    const int filled = num_top < r.vocab ? num_top : r.vocab;
    for (int j = 0; j < kMaxTopLogprobs; ++j) {
      out.top_ids[j] = j < filled ? sh.top_ids[j] : 0;
      out.top_logprobs[j] = j < filled ? sh.top_logprobs[j] : 0.0f;
    }
  }
}

}  // namespace

cudaError_t LaunchSampling(const SamplingArgs& args, cudaStream_t stream) {
  if (args.num_rows < 0 || args.vocab < 1 || args.vocab > kMaxSamplingVocab) {
    return cudaErrorInvalidValue;
  }
  if (args.num_rows == 0) return cudaSuccess;
  if (args.logits == nullptr || args.raw_logits == nullptr || args.params == nullptr ||
      args.results == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (args.mask_rows != nullptr &&
      (args.allowed == nullptr || args.mask_words != (args.vocab + 31) / 32)) {
    return cudaErrorInvalidValue;
  }
  ASTR_LAUNCH_KERNEL(SamplingKernel, args.num_rows, kThreads, 0, stream)(args);
  return cudaGetLastError();
}

}  // namespace astr::cuda
