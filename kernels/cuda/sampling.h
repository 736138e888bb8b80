// Token sampling on the GPU: one CTA per sample row draws a token from the row's f32 logits with
// the same processing order and the same Philox draw as the CPU sampler (worker/sampler.h, steps
// 1-8), and computes the chosen token's logprob and the top-n alternatives.
//
// How (sampling.cu): no sort. Each candidate gets a 64-bit key (weight bits, then the id reversed),
// so "key >= t" is exactly a prefix of the CPU's sampling order (weight desc, id asc). top-k, top-p
// and the inverse-CDF draw are each a search for the largest threshold t whose prefix count / mass
// passes a test, narrowed 4x per pass over the row (block reductions), which ends on the one
// element that decides it. Masses are sums of the weights rounded to multiples of 2^-44, added as
// 64-bit integers: exact, so every pass sees the same mass for the same prefix and the search is
// deterministic whatever the thread order.
//
// Same seed, same logits -> same token as the CPU, except within rounding distance of a CDF
// boundary. The weights are exp in double rounded to f32, which equals glibc's expf (the CPU's) on
// all but ~1e-4 of inputs (measured; one ulp off there), so ties and the order agree and prefix
// masses move by ~1e-6 of a weight at most; the masses are also summed differently:
//   - the GPU rounds each weight to a multiple of 2^-44 (error <= 2^-45) and sums exactly; the CPU
//     sums in double per weight bucket. A prefix mass differs by < vocab * 2^-45 absolute (~1e-11
//     typical), so u * total (or top-p's target) must land that close to a boundary to differ;
//   - weights below 2^-45 count as mass 0 (never drawn); the CPU draws one of them with probability
//     < vocab * 2^-45 / total (< 5e-9 for 152k tokens).
// Logprobs: the same definitions; log-sum-exp from CUDA's expf (<= 2 ulp) summed in double, so
// within ~1e-6 of the CPU. Top-n: the same ids (chosen by logit, then id); two entries whose
// rounded logprobs differ by an ulp may swap. NaN logits rank below -inf in the top-n (the CPU's
// order with NaNs depends on where they sit).
//
// The host packs per-row parameters and the sparse per-row edits (logit bias, min_tokens masks,
// penalty counts) into flat arrays (worker/backends/cuda/sampling_pack.h: PackSamplingRow, plain
// C++ unit-tested on the CPU).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/base/sampling_limits.h"

namespace astr::cuda {

inline constexpr int kMaxTopLogprobs = kMaxLogprobs;
// Keys hold the token id in 20 bits and the 2^-44 fixed-point masses of a whole row must fit in
// 64 bits: vocab < 2^20.
inline constexpr int kMaxSamplingVocab = (1 << 20) - 1;

// Per sample row. Mirrors SamplingParams; the token-level state (counts, RNG counter) is flattened.
struct DeviceSamplingParams {
  int32_t greedy;            // 1: argmax (temperature < kGreedyTemperature, decided by the host)
  float temperature;         // > 0 when !greedy
  int32_t top_k;             // 0 = off (the host also maps top_k >= vocab to 0)
  float top_p;               // 1 = off
  float min_p;               // 0 = off
  float repetition_penalty;  // 1 = off
  float frequency_penalty;
  float presence_penalty;
  uint64_t seed;
  uint64_t sequence;     // RNG stream (sample index within its request)
  uint64_t token_index;  // tokens generated before this draw (RNG counter)
  int32_t num_top;       // top-n alternatives to return (0..kMaxTopLogprobs)
  int32_t
      want_logprob;  // 1 = compute the chosen token's logprob (the host sets it when num_top > 0)
  int32_t processed_logprobs;  // 0 = raw (before any edit), 1 = processed (after temperature)
  // Sparse edits for this row, ranges into the batch's edit arrays:
  //   bias: finite values are added (logit_bias; each id at most once per row), then -inf values
  //   set the logit to -inf (min_tokens masks; an id may repeat). The CPU's order: bias, then
  //   masks.
  int32_t bias_begin, bias_end;
  //   penalty: the ids with a non-zero count in the penalty window (each id once per row) and how
  //   often each was generated. The repetition penalty applies to every listed id (it occurs in
  //   prompt + generated), frequency / presence only where generated > 0.
  int32_t penalty_begin, penalty_end;
};

// The whole batch's parameters, in host memory, ready to upload (one copy per array). Clear() keeps
// the capacity, so packing a step allocates nothing in the steady state.
struct SamplingBatch {
  std::vector<DeviceSamplingParams> params;  // [S]
  std::vector<int32_t> bias_ids;             // [sum of bias ranges]
  std::vector<float> bias_values;            // [same]
  std::vector<int32_t> penalty_ids;          // [sum of penalty ranges]
  std::vector<int32_t> penalty_generated;    // [same] occurrences among generated tokens (window)
  void Clear() {
    params.clear();
    bias_ids.clear();
    bias_values.clear();
    penalty_ids.clear();
    penalty_generated.clear();
  }
};

struct DeviceSampleResult {
  int32_t token;
  float logprob;  // 0 unless want_logprob or num_top > 0
  int32_t num_top;
  int32_t top_ids[kMaxTopLogprobs];  // logprob desc, ties by id asc; zeros past num_top
  float top_logprobs[kMaxTopLogprobs];
};

struct SamplingArgs {
  float* logits = nullptr;  // [num_rows, vocab] f32, overwritten (scratch)
  int num_rows = 0;
  int vocab = 0;                                 // 1..kMaxSamplingVocab
  const DeviceSamplingParams* params = nullptr;  // [num_rows] device
  const int32_t* bias_ids = nullptr;             // [bias entries] device
  const float* bias_values = nullptr;            // [bias entries] device
  const int32_t* penalty_ids = nullptr;          // [penalty entries] device
  const int32_t* penalty_generated = nullptr;    // [penalty entries] device
  // [num_rows, vocab] f32 workspace, always required: the raw row (raw logprobs) or the weights
  // (processed logprobs, whose scaled logits must stay in `logits`).
  float* raw_logits = nullptr;
  DeviceSampleResult* results = nullptr;  // [num_rows] device
  // Constraint masks (structured outputs), optional: row r's mask is allowed[mask_rows[r] *
  // mask_words ...] (bit t % 32 of word t / 32 allows token t; mask_rows[r] < 0: none). Applied
  // after the raw row is kept and before the bias (worker/sampler.h step 2): a masked token's
  // logit becomes -inf. Both null: no masks.
  const int32_t* mask_rows = nullptr;  // [num_rows] device
  const uint32_t* allowed = nullptr;   // [masked rows, mask_words] device
  int mask_words = 0;                  // (vocab + 31) / 32 when masks are given
};

// Enqueues the sampling kernel (grid num_rows, 1024 threads). Allocates nothing.
// cudaErrorInvalidValue for a vocab outside 1..kMaxSamplingVocab or missing buffers.
cudaError_t LaunchSampling(const SamplingArgs& args, cudaStream_t stream);

}  // namespace astr::cuda
