// When a generated sequence ends: the one rule the scheduler loop and the offline engine
// (worker/engine.cc) apply after each accepted token. Plain values only, so that it builds on the
// bare GPU machine (no protobuf); the scheduler maps FinishReason to the proto enum at its edge.
#pragma once

#include <cstdint>
#include <span>

namespace astr {

enum class FinishReason { kNone, kLength, kStop, kEos, kAbort };
// "none", "length", "stop", "eos", "abort".
const char* FinishReasonName(FinishReason reason);

// What ends a sequence, as the request set it.
struct StopConditions {
  std::span<const int32_t> eos_token_ids;   // the model's
  std::span<const int32_t> stop_token_ids;  // the request's
  bool ignore_eos = false;                  // EOS does not stop
  int32_t min_tokens = 0;  // neither EOS nor a stop id ends the sequence before this many tokens
  int32_t max_tokens = 0;  // generated tokens at the most (>= 1)
  int64_t max_context_tokens = 0;  // prompt + generated at the most; 0 = unknown (no limit)
};

struct FinishDecision {
  FinishReason reason = FinishReason::kNone;
  int32_t stop_token_id = -1;  // the stop id that matched (kStop from stop_token_ids), else -1
};

// Whether `token` is a stop id or (unless ignore_eos) an EOS id: one that ends a sequence past
// min_tokens, and that the sampler masks before it.
bool IsStopToken(const StopConditions& c, int32_t token);

// Whether a sequence with `num_generated` generated and `num_tokens` tokens in all (prompt +
// generated) is at its length: max_tokens generated, or the context full.
bool ReachedLength(const StopConditions& c, int64_t num_generated, int64_t num_tokens);

// The decision after `token` was accepted as the `num_generated`-th generated token, the
// sequence holding `num_tokens` tokens with it. EOS wins over a stop id, both over the length.
// The sampler masks stop ids and EOS while fewer than min_tokens were generated before a draw;
// this rule matches it, so a stop id ends a sequence only past min_tokens.
FinishDecision DecideFinish(const StopConditions& c, int32_t token, int64_t num_generated,
                            int64_t num_tokens);

}  // namespace astr
