#include "kernels/cpu/attention.h"

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

const AttnKernels& AttnKernelsScalar() {
  static const AttnKernels k{ScoresScalar, AccumulateScalar};
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
