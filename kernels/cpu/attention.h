// Block kernels of paged attention: the scores of a GQA group of query heads against a block of KV
// rows, and the probability-weighted accumulation of V rows. One dispatch covers a whole block.
//
// Reduction order (the same on every call, whatever n, the group size or the head's place in the
// group): a score is one dot product over d in a fixed per-ISA order, then times `scale`; an
// accumulator element is updated by one fused multiply-add per row, in row order. A row's result
// therefore depends only on its own q, K/V rows and their order, never on the batch.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"

namespace astr::cpu {

struct AttnKernels {
  // scores[h * ld + j] = dot(q[h * hd .. +hd), k_rows[j][0 .. hd)) * scale, h < group, j < n.
  void (*scores)(const float* q /*[group, hd]*/, int64_t group, int64_t hd,
                 const float* const* k_rows /*[n] -> [hd]*/, int64_t n, float scale,
                 float* scores /*[group, ld]*/, int64_t ld);
  // For h < group: acc_h *= correction[h] (skipped when correction is null), then for j = 0..n-1
  // in order: acc_h = fma(p[h * ld + j], v_rows[j], acc_h).
  void (*accumulate)(const float* p /*[group, ld]*/, int64_t ld, int64_t group, int64_t hd,
                     const float* const* v_rows /*[n] -> [hd]*/, int64_t n,
                     const float* correction /*[group] or null*/, float* acc /*[group, hd]*/);
  // The online-softmax update of one block of n >= 1 scores, for h < group: m_new = max(m[h], the
  // largest of scores[h * ld + 0 .. n)); correction[h] = exp(m[h] - m_new) (0 while m[h] is
  // -inf); scores[h * ld + j] = exp(scores[h * ld + j] - m_new); l[h] = l[h] * correction[h] +
  // the sum of those n values; m[h] = m_new. The exp and the sum follow a fixed per-ISA order.
  void (*softmax)(float* scores /*[group, ld]*/, int64_t ld, int64_t group, int64_t n,
                  float* m /*[group]*/, float* l /*[group]*/, float* correction /*[group]*/);
};

// The kernels of one ISA path (any Isa this CPU can run; see AvailableIsas()).
const AttnKernels& AttnKernelsFor(Isa isa);

namespace internal {
const AttnKernels& AttnKernelsScalar();
const AttnKernels& AttnKernelsAvx2();
const AttnKernels& AttnKernelsAvx512();
// The scalar path's softmax (libm's exp, the sum in row order), which the AVX2 path shares.
void SoftmaxScalar(float* scores, int64_t ld, int64_t group, int64_t n, float* m, float* l,
                   float* correction);
}  // namespace internal

}  // namespace astr::cpu
