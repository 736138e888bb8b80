// Host-side choice of the decode split count (see paged_decode.h).
#include <algorithm>

#include "kernels/cuda/paged_decode.h"

namespace astr::cuda {

int ChooseDecodeSplits(int batch, int num_kv_heads, int num_sms) {
  // One CTA per (entry, kv head, split). Two waves of CTAs keep every SM busy while the slowest
  // split finishes; more splits only add combine work. Empty splits (short contexts) return at
  // once, so over-splitting a short batch costs a launch slot, not memory traffic.
  const int64_t ctas = std::max<int64_t>(1, int64_t{batch} * std::max(1, num_kv_heads));
  const int64_t target = 2 * int64_t{std::max(1, num_sms)};
  const int64_t splits = (target + ctas - 1) / ctas;
  return static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxDecodeSplits));
}

}  // namespace astr::cuda
