#include "common/base/finish_rule.h"

#include <algorithm>

namespace astr {
namespace {

bool Contains(std::span<const int32_t> ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kAbort:
      return "abort";
  }
  return "none";
}

bool IsStopToken(const StopConditions& c, int32_t token) {
  return Contains(c.stop_token_ids, token) || (!c.ignore_eos && Contains(c.eos_token_ids, token));
}

bool ReachedLength(const StopConditions& c, int64_t num_generated, int64_t num_tokens) {
  return num_generated >= c.max_tokens ||
         (c.max_context_tokens > 0 && num_tokens >= c.max_context_tokens);
}

FinishDecision DecideFinish(const StopConditions& c, int32_t token, int64_t num_generated,
                            int64_t num_tokens) {
  if (num_generated > c.min_tokens) {
    if (!c.ignore_eos && Contains(c.eos_token_ids, token)) return {FinishReason::kEos, -1};
    if (Contains(c.stop_token_ids, token)) return {FinishReason::kStop, token};
  }
  if (ReachedLength(c, num_generated, num_tokens)) return {FinishReason::kLength, -1};
  return {};
}

}  // namespace astr
