#include "common/base/sampling_params.h"

#include <charconv>
#include <cmath>

namespace astr {
namespace {

// Builds the messages of one validation; `prefix` goes before every field name.
class FieldErrors {
 public:
  FieldErrors(std::string_view prefix, int64_t vocab_size)
      : prefix_(prefix), vocab_size_(vocab_size) {}

  Status Invalid(std::string_view field, const std::string& what) const {
    return FieldError(std::string(prefix_) + std::string(field), " " + what);
  }

  // `v` must lie in [lo, hi] (open ends when lo_open / hi_open); NaN never does.
  Status CheckRange(std::string_view field, float v, float lo, float hi, bool lo_open,
                    bool hi_open) const {
    const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (ok) return OkStatus();
    return Invalid(field, std::string("must be in ") + (lo_open ? "(" : "[") + FormatNumber(lo) +
                              ", " + FormatNumber(hi) + (hi_open ? ")" : "]") + ", got " +
                              FormatNumber(v));
  }

  // `field` is the id's field ("stop_token_ids[1]", "logit_bias"), `label` what follows it in the
  // message (": key" for a logit_bias key).
  Status CheckTokenId(const std::string& field, int32_t id, const char* label = "") const {
    if (id >= 0 && id < vocab_size_) return OkStatus();
    return FieldError(std::string(prefix_) + field, label + (" = " + std::to_string(id)) +
                                                        " is outside the vocabulary [0, " +
                                                        std::to_string(vocab_size_) + ")");
  }

  Status CheckTokenIds(const char* field, const std::vector<int32_t>& ids) const {
    for (size_t i = 0; i < ids.size(); ++i) {
      ASTR_RETURN_IF_ERROR(CheckTokenId(field + ("[" + std::to_string(i) + "]"), ids[i]));
    }
    return OkStatus();
  }

 private:
  std::string_view prefix_;
  int64_t vocab_size_;
};

}  // namespace

StopConditions StopConditionsOf(const SamplingParams& p, int64_t max_context_tokens) {
  return {.eos_token_ids = p.eos_token_ids,
          .stop_token_ids = p.stop_token_ids,
          .ignore_eos = p.ignore_eos,
          .min_tokens = p.min_tokens,
          .max_tokens = p.max_tokens,
          .max_context_tokens = max_context_tokens};
}

std::string FormatNumber(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

Status ValidateSamplingParams(const SamplingParams& p, int64_t vocab_size,
                              std::string_view field_prefix) {
  const FieldErrors e(field_prefix, vocab_size);
  if (vocab_size <= 0) return e.Invalid("vocab_size", "must be > 0");
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return e.Invalid("temperature", "must be >= 0 and finite, got " + FormatNumber(p.temperature));
  }
  if (p.top_k < 0) {
    return e.Invalid("top_k", "must be >= 0 (0 = off), got " + std::to_string(p.top_k));
  }
  ASTR_RETURN_IF_ERROR(e.CheckRange("top_p", p.top_p, 0.0f, 1.0f, true, false));
  ASTR_RETURN_IF_ERROR(e.CheckRange("min_p", p.min_p, 0.0f, 1.0f, false, false));
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return e.Invalid("repetition_penalty",
                     "must be > 0 and finite, got " + FormatNumber(p.repetition_penalty));
  }
  ASTR_RETURN_IF_ERROR(e.CheckRange("frequency_penalty", p.frequency_penalty, -kMaxPenalty,
                                    kMaxPenalty, false, false));
  ASTR_RETURN_IF_ERROR(e.CheckRange("presence_penalty", p.presence_penalty, -kMaxPenalty,
                                    kMaxPenalty, false, false));
  if (p.penalty_window < 0) {
    return e.Invalid("penalty_window",
                     "must be >= 0 (0 = whole context), got " + std::to_string(p.penalty_window));
  }
  for (const auto& [id, bias] : p.logit_bias) {  // a std::map: the first bad id is the lowest
    ASTR_RETURN_IF_ERROR(e.CheckTokenId("logit_bias", id, ": key"));
    ASTR_RETURN_IF_ERROR(e.CheckRange("logit_bias[" + std::to_string(id) + "]", bias,
                                      -kMaxLogitBias, kMaxLogitBias, false, false));
  }
  ASTR_RETURN_IF_ERROR(e.CheckTokenIds("stop_token_ids", p.stop_token_ids));
  ASTR_RETURN_IF_ERROR(e.CheckTokenIds("eos_token_ids", p.eos_token_ids));
  if (p.max_tokens < 1) {
    return e.Invalid("max_tokens", "must be >= 1, got " + std::to_string(p.max_tokens));
  }
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    return e.Invalid("min_tokens", "must be in [0, max_tokens=" + std::to_string(p.max_tokens) +
                                       "], got " + std::to_string(p.min_tokens));
  }
  if (p.logprobs < 0 || p.logprobs > kMaxLogprobs) {
    return e.Invalid("top_logprobs", "must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
                                         std::to_string(p.logprobs));
  }
  if (p.logprobs_mode != LogprobsMode::kRaw && p.logprobs_mode != LogprobsMode::kProcessed) {
    return FieldError(std::string(field_prefix) + "logprobs_mode",
                      ": unknown value " + std::to_string(static_cast<int32_t>(p.logprobs_mode)));
  }
  if (p.return_sampling_mask && p.temperature < kGreedyTemperature) {
    return e.Invalid("return_sampling_mask",
                     "needs temperature >= " + FormatNumber(kGreedyTemperature) +
                         ": a greedy draw (temperature " + FormatNumber(p.temperature) +
                         ") takes the argmax and has no distribution to mask");
  }
  return OkStatus();
}

}  // namespace astr
