// Bounds of the sampling parameters (DESIGN.md "Sampling and determinism"): one definition for
// the scheduler's request validation and the worker's sampler, which must agree on them.
#pragma once

#include <cstdint>

namespace astr {

// The most top-n alternatives a request may ask for (OpenAI's limit).
inline constexpr int32_t kMaxLogprobs = 20;
// Frequency and presence penalties lie in [-kMaxPenalty, kMaxPenalty] (OpenAI semantics).
inline constexpr float kMaxPenalty = 2.0f;
// Each logit bias lies in [-kMaxLogitBias, kMaxLogitBias].
inline constexpr float kMaxLogitBias = 100.0f;

}  // namespace astr
