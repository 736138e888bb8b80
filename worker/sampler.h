// Token sampling on the host: one token per sampling row from an f32 logits row [vocab].
//
// Processing order for one draw (each step documented at its implementation in sampler.cc):
//   1. raw logprobs captured (logprobs_mode == kRaw and logprobs requested)
//   2. a constraint's mask (structured outputs): tokens it does not allow set to -inf; then
//      logit_bias added
//   3. min_tokens: stop ids (and EOS unless ignore_eos) set to -inf while fewer than min_tokens
//      tokens have been generated
//   4. repetition penalty (prompt + generated, within penalty_window), then frequency / presence
//      penalties (generated only, within penalty_window)
//   5. temperature == 0: greedy argmax (ties -> lowest id), done
//   6. divide by temperature; processed logprobs captured (logprobs_mode == kProcessed)
//   7. top-k, then top-p, then min-p over the candidates sorted by (prob desc, id asc)
//   8. renormalize, then inverse CDF over that sorted order with the Philox uniform for
//      (seed, sequence, token_index) — see common/base/philox.h for the bit recipe.
//   9. return_sampling_mask: the candidates step 7 kept whose logit is above -inf (NaN never is),
//      ascending — the support of the distribution step 8 drew from.
//
// Determinism: the chosen token depends only on (logits, params, prompt + generated tokens, seed,
// sequence, token_index); never on the batch, the order sequences are sampled in, or the scratch.
// Weights are expf(logit/T - max) in float; masses are summed in double, per weight bucket then
// bucket by bucket (see BucketOrder in sampler.cc). That summation order is fixed for a build,
// so results are bitwise reproducible across runs and batches; another backend reproduces the
// same tokens except where a draw falls within rounding distance of a CDF boundary.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/base/sampling_params.h"
#include "common/base/status.h"

namespace astr {

// Occurrence counts of token ids in a sequence's penalty window: an open-addressing hash table
// (power-of-two capacity, linear probing) sized at construction, so Add/Remove allocate nothing in
// the steady state. Entries whose counts drop to zero stay until a compaction rebuilds the table.
class TokenCounts {
 public:
  struct Entry {
    int32_t id = -1;        // -1 = empty slot
    int32_t context = 0;    // occurrences in prompt + generated (repetition penalty)
    int32_t generated = 0;  // occurrences among generated tokens (frequency / presence)
  };

  explicit TokenCounts(int64_t expected_distinct = 64);
  void Add(int32_t id, bool generated);
  void Remove(int32_t id, bool generated);
  // Calls fn(const Entry&) for every entry with a non-zero count, in table order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (uint32_t slot : used_) {
      const Entry& e = table_[slot];
      if (e.context > 0) fn(e);
    }
  }
  // Counts for one id (zeros if absent).
  Entry Get(int32_t id) const;

 private:
  uint32_t Find(int32_t id) const;  // slot holding id, or the empty slot where it would go
  void Rebuild(size_t capacity);

  std::vector<Entry> table_;
  std::vector<uint32_t> used_;  // occupied slots in insertion order
  int64_t live_ = 0;            // entries with context > 0
};

// Per-sequence sampling state. Rebuild it after a move to another worker by constructing it with
// the prompt and Append()ing every token generated so far: the RNG counters follow.
class SequenceSampler {
 public:
  // `params` must have passed ValidateSamplingParams(params, vocab_size). `sequence` is the sample
  // index within its request; it keys the RNG stream together with params.seed.
  SequenceSampler(SamplingParams params, uint64_t sequence, std::span<const int32_t> prompt);

  // Records a generated token: penalty counts, window and the token index of the next draw.
  void Append(int32_t token);
  // Records one more prompt token (context, not generated): penalty counts and window only. For
  // PromptScorer, whose context grows one scored token at a time.
  void AppendPrompt(int32_t token);

  // True if `token` ends the sequence: a stop id, or an EOS id unless ignore_eos.
  bool IsStopToken(int32_t token) const;

  const SamplingParams& params() const { return params_; }
  uint64_t sequence() const { return sequence_; }
  int64_t num_generated() const { return num_generated_; }
  const TokenCounts& counts() const { return counts_; }

 private:
  struct WindowToken {
    int32_t id;
    bool generated;
  };
  void Push(int32_t id, bool generated);

  SamplingParams params_;
  uint64_t sequence_;
  int64_t num_generated_ = 0;
  TokenCounts counts_;
  // Ring buffer of the last penalty_window context tokens (empty when the window is off).
  std::vector<WindowToken> window_;
  size_t window_head_ = 0;  // oldest element once full
  size_t window_size_ = 0;
};

// Buffers reused across draws (one per sampling thread). They grow to the vocabulary size on
// first use and are never shrunk, so steady-state sampling allocates nothing.
struct SamplerScratch {
  std::vector<float> raw_logits;       // [vocab] copy of the input when raw logprobs are needed
  std::vector<float> weights;          // [vocab] exp(logit/T - max), unnormalized
  std::vector<int32_t> ids;            // [vocab] top-k selection
  std::vector<int32_t> order;          // [vocab] candidates grouped by weight bucket
  std::vector<double> bucket_mass;     // per weight bucket (see sampler.cc BucketOrder)
  std::vector<int64_t> bucket_begin;   // per weight bucket: first position in `order`
  std::vector<int64_t> bucket_end;     // per weight bucket: one past the last position
  std::vector<uint8_t> bucket_sorted;  // per weight bucket: sorted this draw
};

struct SampleResult {
  int32_t token = 0;
  // The chosen token's logprob per logprobs_mode; 0 when neither return_logprob nor logprobs.
  float logprob = 0.0f;
  int32_t num_top = 0;  // = params.logprobs
  // top[0..num_top): the highest-logprob tokens, logprob desc, ties by id asc.
  std::array<TokenLogprob, kMaxLogprobs> top{};
  // With params.return_sampling_mask (step 9): count >= 1 and `token` among the ids (or count ==
  // vocab and no ids). A greedy draw (refused by validation) and a row with every logit -inf or
  // NaN give the drawn token alone. Else count 0 and no ids.
  SamplingMask mask;
};

// Sets logits[t] to -inf for every token t whose bit (t % 32) of allowed[t / 32] is clear.
void ApplyAllowedMask(float* logits, int64_t vocab, const uint32_t* allowed);

// Samples the next token of `state` from `logits` [vocab], which is overwritten (scratch). Does
// not Append(): the caller does that once it accepts the token. `allowed`: a constraint's token
// mask (ApplyAllowedMask), or null. The caller guarantees that it allows some token.
SampleResult Sample(float* logits, int64_t vocab, const SequenceSampler& state,
                    SamplerScratch& scratch, const uint32_t* allowed = nullptr);

// Scores given tokens one position after another (prompt scoring, GenerateRequest.logprob_start):
// the logprob each token gets from the logits of the position before it, as Sample() would report
// it for a token drawn there with the same parameters, and the top alternatives. Nothing is drawn.
//   kRaw        log_softmax of the raw logits.
//   kProcessed  steps 2, 4 and 6 of Sample(): logit_bias, penalties, temperature (skipped when
//               greedy). The tokens before a scored one are its context, as prompt tokens: the
//               repetition penalty counts them (within penalty_window); the frequency and
//               presence penalties count generated tokens only, and min_tokens masking (step 3)
//               is about generated tokens, so neither applies.
class PromptScorer {
 public:
  // `params` as for SequenceSampler; `context` is every token before the first one scored.
  PromptScorer(SamplingParams params, uint64_t sequence, std::span<const int32_t> context);

  // The logprob of `token` from `logits` [vocab] (overwritten): result.token = token,
  // result.logprob, and result.top[0..params.logprobs). Then `token` joins the context, so the next
  // call scores the token after it.
  SampleResult Score(float* logits, int64_t vocab, int32_t token);

 private:
  SequenceSampler context_;  // penalty counts over the context; never draws
};

}  // namespace astr
