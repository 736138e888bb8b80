#include "common/chat/jinja/render_budget.h"

#include <limits>
#include <string>

namespace astr::jinja {
namespace {

Status BytesExhausted(size_t max_bytes) {
  return ResourceExhaustedError("template values and output exceed " + std::to_string(max_bytes) +
                                " bytes (max_bytes)");
}

}  // namespace

Status RenderBudget::Reserve(size_t bytes) {
  if (!ok()) return status();  // nothing more once any limit has been passed
  if (bytes <= remaining_bytes()) return OkStatus();
  Exhaust(Limit::kBytes);
  return status();
}

Status RenderBudget::status() const {
  switch (exhausted_) {
    case Limit::kNone:
      return OkStatus();
    case Limit::kSteps:
      return ResourceExhaustedError("template evaluation exceeded " + std::to_string(max_steps_) +
                                    " steps (max_steps)");
    case Limit::kBytes:
      return BytesExhausted(max_bytes_);
    case Limit::kDepth:
      return ResourceExhaustedError("template values nested deeper than " +
                                    std::to_string(max_depth_) + " levels (max_depth)");
  }
  return OkStatus();
}

Status RenderBudget::NamespaceTooDeep(int depth) const {
  return ResourceExhaustedError("a namespace attribute may hold values nested at most " +
                                std::to_string(namespace_depth() - 1) + " levels deep, not " +
                                std::to_string(depth) + " (max_depth / 2)");
}

Status ReserveBytes(size_t bytes) {
  if (RenderBudget* budget = RenderBudget::Current()) return budget->Reserve(bytes);
  return bytes <= kDefaultMaxBytes ? OkStatus() : BytesExhausted(kDefaultMaxBytes);
}

size_t SaturatingMul(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<size_t>::max() : r;
}

}  // namespace astr::jinja
