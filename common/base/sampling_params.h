// The sampling parameters of one sequence as plain values, and their one validation: the request
// builder (scheduler front), the worker's plan validation and the CLI flags all call
// ValidateSamplingParams, so a range is defined and worded in one place.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/finish_rule.h"
#include "common/base/sampling_limits.h"
#include "common/base/status.h"

namespace astr {

// Temperatures below this are greedy.
inline constexpr float kGreedyTemperature = 1e-5f;

enum class LogprobsMode : int32_t {
  // log_softmax of the model's raw logits, before any sampling parameter touched them.
  kRaw = 0,
  // log_softmax over the whole vocabulary after logit_bias, min_tokens masking, penalties and
  // temperature (temperature 0 counts as 1), before top-k / top-p / min-p filtering.
  kProcessed = 1,
};

struct SamplingParams {
  float temperature = 1.0f;             // 0 = greedy
  int32_t top_k = 0;                    // 0 = off; >= vocab is also off
  float top_p = 1.0f;                   // (0, 1]; 1 = off
  float min_p = 0.0f;                   // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;      // > 0; 1 = off (HF semantics, prompt + generated)
  float frequency_penalty = 0.0f;       // [-2, 2] (OpenAI semantics, generated only)
  float presence_penalty = 0.0f;        // [-2, 2] (OpenAI semantics, generated only)
  int32_t penalty_window = 0;           // 0 = whole context; else only the last W context tokens
  std::map<int32_t, float> logit_bias;  // token id -> additive bias in [-100, 100]
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;
  std::vector<int32_t> eos_token_ids;  // from the model
  bool ignore_eos = false;             // EOS neither stops nor is masked by min_tokens
  int32_t min_tokens = 0;              // stop ids masked to -inf until this many generated
  int32_t max_tokens = 16;             // >= 1
  // Compute the chosen token's logprob. Implied by logprobs > 0. Off by default so that greedy
  // decoding stays a single pass over the logits.
  bool return_logprob = false;
  int32_t logprobs = 0;  // top-n alternatives to return, 0..kMaxLogprobs ("top_logprobs")
  LogprobsMode logprobs_mode = LogprobsMode::kRaw;
  // Return each draw's SamplingMask. Needs temperature >= kGreedyTemperature (a greedy draw has
  // no distribution to mask; vLLM refuses it too). Host sampler only: a step that asks for it
  // draws on the host on every backend (worker/step_sampling.h).
  bool return_sampling_mask = false;
};

// One token and its logprob: a top-n alternative of a sampled token.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// The tokens one draw chose among (SamplingParams.return_sampling_mask): every id left with a
// logit above -inf after the constraint's mask and min_tokens masking that top-k, top-p and min-p
// then kept. count == vocabulary size says nothing was removed (ids stays empty: the mask of an
// untruncated draw costs nothing to send).
struct SamplingMask {
  int32_t count = 0;         // surviving ids; 0 = no mask
  std::vector<int32_t> ids;  // ascending, count of them; empty when count == vocabulary size
};

// OK, or INVALID_ARGUMENT naming the first bad field after `field_prefix` (e.g. "sampling.") and
// the value, as "top_p must be in (0, 1], got 0". Token ids (logit_bias keys, stop and EOS ids)
// must lie in [0, vocab_size).
Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size,
                              std::string_view field_prefix = "");

// The finish rule's view of `params` (spans into its vectors; `params` must outlive it).
StopConditions StopConditionsOf(const SamplingParams& params, int64_t max_context_tokens = 0);

// The shortest text that reads back as `v` ("0", "1.5", "-2", "nan", "inf"), for error messages.
std::string FormatNumber(float v);

}  // namespace astr
