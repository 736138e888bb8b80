// AVX-512F attention block kernels: 16 lanes, masked tails.
// GCC 12 flags the intentionally undefined pass-through operand inside AVX-512 intrinsics
// (_mm512_undefined_*) as (maybe-)uninitialized; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/vec_avx512.h"

namespace astr::cpu::internal {
const AttnKernels& AttnKernelsAvx512() {
  static const AttnKernels k{attn::Scores<V512>, attn::Accumulate<V512>, attn::Softmax<V512>};
  return k;
}

}  // namespace astr::cpu::internal
