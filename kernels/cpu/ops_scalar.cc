// Reference ops in plain C++ (baseline x86-64).
#include <cmath>
#include <cstring>

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
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
      y[i] = static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN: keep sign, force quiet
    } else {
      y[i] = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    }
  }
}

void Bf16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(&y[i], &bits, sizeof(bits));
  }
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    const uint32_t bits = 0x7F800000u | (mant << 13);  // inf or NaN
    std::memcpy(&mag, &bits, sizeof(mag));
  } else {
    const uint32_t bits = ((exp + 112) << 23) | (mant << 13);
    std::memcpy(&mag, &bits, sizeof(mag));
  }
  uint32_t out;
  std::memcpy(&out, &mag, sizeof(out));
  out |= sign;
  float f;
  std::memcpy(&f, &out, sizeof(f));
  return f;
}

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

}  // namespace

const OpsTable& OpsScalar() {
  static const OpsTable table = {SumSquares, ScaleMul,  AddSumSquares, RopeRotate,
                                 SiluMul,    Dot,       Axpy,          Scale,
                                 AddInPlace, F32ToBf16, Bf16ToF32,     F16ToF32};
  return table;
}

}  // namespace astr::cpu::internal
