#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

namespace astr::cpu {
namespace internal {
namespace {

void ScoresScalar(const float* q, int64_t group, int64_t hd, const float* const* k_rows, int64_t n,
                  float scale, float* scores, int64_t ld) {
  for (int64_t h = 0; h < group; ++h) {
    const float* qh = q + h * hd;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = k_rows[j];
      float s = 0.0f;
      for (int64_t d = 0; d < hd; ++d) s += qh[d] * k[d];
      scores[h * ld + j] = s * scale;
    }
  }
}

void AccumulateScalar(const float* p, int64_t ld, int64_t group, int64_t hd,
                      const float* const* v_rows, int64_t n, const float* correction, float* acc) {
  for (int64_t h = 0; h < group; ++h) {
    float* a = acc + h * hd;
    if (correction != nullptr) {
      for (int64_t d = 0; d < hd; ++d) a[d] *= correction[h];
    }
    for (int64_t j = 0; j < n; ++j) {
      const float w = p[h * ld + j];
      const float* v = v_rows[j];
      for (int64_t d = 0; d < hd; ++d) a[d] += w * v[d];
    }
  }
}

}  // namespace

// libm's exp, and the sum in row order.
void SoftmaxScalar(float* scores, int64_t ld, int64_t group, int64_t n, float* m, float* l,
                   float* correction) {
  for (int64_t h = 0; h < group; ++h) {
    float* sh = scores + h * ld;
    const float m_new = std::max(m[h], *std::max_element(sh, sh + n));
    correction[h] = std::exp(m[h] - m_new);
    float sum = l[h] * correction[h];
    for (int64_t j = 0; j < n; ++j) {
      sh[j] = std::exp(sh[j] - m_new);
      sum += sh[j];
    }
    l[h] = sum;
    m[h] = m_new;
  }
}

const AttnKernels& AttnKernelsScalar() {
  static const AttnKernels k{ScoresScalar, AccumulateScalar, SoftmaxScalar};
  return k;
}

}  // namespace internal

const AttnKernels& AttnKernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512:
      return internal::AttnKernelsAvx512();
    case Isa::kAvx2:
      return internal::AttnKernelsAvx2();
    case Isa::kScalar:
      break;
  }
  return internal::AttnKernelsScalar();
}

}  // namespace astr::cpu
