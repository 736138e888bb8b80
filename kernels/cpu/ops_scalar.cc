// Reference ops in plain C++ (baseline x86-64).
#include <cmath>
#include <cstring>

#include "common/base/half.h"
#include "kernels/cpu/ops_kernels.h"

namespace astr::cpu::internal {
namespace {

float SumSquares(const float* x, int64_t dim) {
  double s = 0;
  for (int64_t i = 0; i < dim; ++i) s += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(s);
}

void ScaleMul(const float* x, float scale, const float* w, float* y, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * scale * w[i];
}

float AddSumSquares(float* x, const float* d, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i) x[i] += d[i];
  return SumSquares(x, dim);
}

void RopeRotate(float* x, int64_t heads, int64_t head_dim, int64_t half, int64_t i0, int64_t count,
                const float* c, const float* s, bool interleaved) {
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t a = interleaved ? 2 * (i0 + j) : i0 + j;
      const int64_t b = interleaved ? a + 1 : a + half;
      const float cj = interleaved ? c[2 * j] : c[j];
      const float sj = interleaved ? s[2 * j + 1] : s[j];
      const float xa = xh[a], xb = xh[b];
      xh[a] = xa * cj - xb * sj;
      xh[b] = xb * cj + xa * sj;
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t f) {
  for (int64_t i = 0; i < f; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeluTanhMul(const float* gate, const float* up, float* out, int64_t f) {
  constexpr float k2 = 2.0f * 0.7978845608028654f;  // 2 sqrt(2 / pi)
  for (int64_t i = 0; i < f; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-k2 * (g + 0.044715f * g * g * g))) * up[i];
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float* y, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void F32ToBf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ::astr::F32ToBf16(x[i]);
}

void Bf16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ::astr::Bf16ToF32(x[i]);
}

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ::astr::F16ToF32(x[i]);
}

}  // namespace

const OpsTable& OpsScalar() {
  static const OpsTable table = {SumSquares,  ScaleMul,  AddSumSquares, RopeRotate, SiluMul,
                                 GeluTanhMul, Dot,       Axpy,          Scale,      AddInPlace,
                                 F32ToBf16,   Bf16ToF32, F16ToF32,      ArgmaxLanes};
  return table;
}

}  // namespace astr::cpu::internal
