// AVX2 ops: 8 lanes with scalar tails.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/base/half.h"
#include "kernels/cpu/ops_kernels.h"
#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_exp.h"

namespace astr::cpu::internal {
namespace {

float SumSquares(const float* x, int64_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    acc0 = _mm256_fmadd_ps(v0, v0, acc0);
    acc1 = _mm256_fmadd_ps(v1, v1, acc1);
  }
  float s = V256::ReduceAdd(_mm256_add_ps(acc0, acc1));
  for (; i < dim; ++i) s += x[i] * x[i];
  return s;
}

void ScaleMul(const float* x, float scale, const float* w, float* y, int64_t dim) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    _mm256_storeu_ps(
        y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
  }
  for (; i < dim; ++i) y[i] = x[i] * scale * w[i];
}

float AddSumSquares(float* x, const float* d, int64_t dim) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(d + i));
    _mm256_storeu_ps(x + i, v);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  float s = V256::ReduceAdd(acc);
  for (; i < dim; ++i) {
    x[i] += d[i];
    s += x[i] * x[i];
  }
  return s;
}

void RopeRotate(float* x, int64_t heads, int64_t head_dim, int64_t half, int64_t i0, int64_t count,
                const float* c, const float* s, bool interleaved) {
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    if (interleaved) {
      float* xa = xh + 2 * i0;
      int64_t j = 0;
      for (; j + 8 <= 2 * count; j += 8) {
        const __m256 v = _mm256_loadu_ps(xa + j);
        const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x1, x0, x3, x2, ...)
        _mm256_storeu_ps(xa + j, _mm256_fmadd_ps(swapped, _mm256_loadu_ps(s + j),
                                                 _mm256_mul_ps(v, _mm256_loadu_ps(c + j))));
      }
      for (; j < 2 * count; j += 2) {
        const float a = xa[j], b = xa[j + 1];
        xa[j] = a * c[j] + b * s[j];
        xa[j + 1] = b * c[j + 1] + a * s[j + 1];
      }
    } else {
      float* xa = xh + i0;
      float* xb = xh + i0 + half;
      int64_t j = 0;
      for (; j + 8 <= count; j += 8) {
        const __m256 a = _mm256_loadu_ps(xa + j), b = _mm256_loadu_ps(xb + j);
        const __m256 cj = _mm256_loadu_ps(c + j), sj = _mm256_loadu_ps(s + j);
        _mm256_storeu_ps(xa + j, _mm256_fmsub_ps(a, cj, _mm256_mul_ps(b, sj)));
        _mm256_storeu_ps(xb + j, _mm256_fmadd_ps(b, cj, _mm256_mul_ps(a, sj)));
      }
      for (; j < count; ++j) {
        const float a = xa[j], b = xb[j];
        xa[j] = a * c[j] - b * s[j];
        xb[j] = b * c[j] + a * s[j];
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t f) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= f; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 silu =
        _mm256_div_ps(g, _mm256_add_ps(one, VecExp<V256>(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < f; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeluTanhMul(const float* gate, const float* up, float* out, int64_t f) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 neg_k2 = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  const __m256 c = _mm256_set1_ps(0.044715f);
  int64_t i = 0;
  for (; i + 8 <= f; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(c, g), _mm256_mul_ps(g, g), g);
    const __m256 gelu =
        _mm256_div_ps(g, _mm256_add_ps(one, VecExp<V256>(_mm256_mul_ps(neg_k2, inner))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(up + i)));
  }
  constexpr float k2 = 2.0f * 0.7978845608028654f;
  for (; i < f; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-k2 * (g + 0.044715f * g * g * g))) * up[i];
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = V256::ReduceAdd(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float* y, float alpha, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(a, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= alpha;
}

void AddInPlace(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  }
  for (; i < n; ++i) y[i] += x[i];
}

void F32ToBf16(const float* x, uint16_t* y, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, bias), lsb), 16);
    const __m256i nan_val = _mm256_or_si256(_mm256_srli_epi32(b, 16), quiet);
    // Signed compare is right here: |b| and inf are both non-negative as int32.
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, nan_val, is_nan);
    // Pack the 8 low halves: packus within 128-bit lanes, then fix the lane order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) y[i] = ::astr::F32ToBf16(x[i]);
}

void Bf16ToF32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  for (; i < n; ++i) y[i] = ::astr::Bf16ToF32(x[i]);
}

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  if (i < n) {  // tail through a zero-padded vector: F16C handles subnormals/inf/NaN exactly
    alignas(16) uint16_t tmp[8] = {};
    alignas(32) float out[8];
    for (int64_t j = i; j < n; ++j) tmp[j - i] = x[j];
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp))));
    for (int64_t j = i; j < n; ++j) y[j] = out[j - i];
  }
}

}  // namespace

const OpsTable& OpsAvx2() {
  static const OpsTable table = {SumSquares,  ScaleMul,  AddSumSquares, RopeRotate, SiluMul,
                                 GeluTanhMul, Dot,       Axpy,          Scale,      AddInPlace,
                                 F32ToBf16,   Bf16ToF32, F16ToF32,      ArgmaxLanes};
  return table;
}

}  // namespace astr::cpu::internal
