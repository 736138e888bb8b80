// AVX2 + FMA attention block kernels: 8 lanes, masked tails (vmaskmovps).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/vec_avx2.h"

namespace astr::cpu::internal {
const AttnKernels& AttnKernelsAvx2() {
  // The softmax is the scalar one (libm's exp, the sum in row order): the greedy goldens of the
  // quantized models are taken on this path, and a greedy answer follows the last bit.
  static const AttnKernels k{attn::Scores<V256>, attn::Accumulate<V256>, SoftmaxScalar};
  return k;
}

}  // namespace astr::cpu::internal
