// AVX-512F ops: 16 lanes, masked tails (no scalar remainder loops).
// GCC 12 flags the intentionally undefined pass-through operand inside AVX-512 intrinsics
// (_mm512_undefined_*) as (maybe-)uninitialized; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/ops_kernels.h"
#include "kernels/cpu/vec_avx512.h"
#include "kernels/cpu/vec_exp.h"

namespace astr::cpu::internal {
namespace {

float SumSquares(const float* x, int64_t dim) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= dim; i += 64) {
    for (int u = 0; u < 4; ++u) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * u);
      acc[u] = _mm512_fmadd_ps(v, v, acc[u]);
    }
  }
  for (; i < dim; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(V512::Mask(dim - i), x + i);
    acc[0] = _mm512_fmadd_ps(v, v, acc[0]);
  }
  return _mm512_reduce_add_ps(
      _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

void ScaleMul(const float* x, float scale, const float* w, float* y, int64_t dim) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < dim; i += 16) {
    const __mmask16 m = V512::Mask(dim - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
  }
}

float AddSumSquares(float* x, const float* d, int64_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(d + i));
    const __m512 v1 = _mm512_add_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(d + i + 16));
    _mm512_storeu_ps(x + i, v0);
    _mm512_storeu_ps(x + i + 16, v1);
    acc0 = _mm512_fmadd_ps(v0, v0, acc0);
    acc1 = _mm512_fmadd_ps(v1, v1, acc1);
  }
  for (; i < dim; i += 16) {
    const __mmask16 m = V512::Mask(dim - i);
    const __m512 v =
        _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, d + i));
    _mm512_mask_storeu_ps(x + i, m, v);
    acc0 = _mm512_fmadd_ps(v, v, acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void RopeRotate(float* x, int64_t heads, int64_t head_dim, int64_t half, int64_t i0, int64_t count,
                const float* c, const float* s, bool interleaved) {
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    if (interleaved) {
      float* xa = xh + 2 * i0;
      for (int64_t j = 0; j < 2 * count; j += 16) {
        const __mmask16 m = V512::Mask(2 * count - j);  // 2 * count is even: pairs never split
        const __m512 v = _mm512_maskz_loadu_ps(m, xa + j);
        const __m512 swapped = _mm512_permute_ps(v, 0xB1);  // (x1, x0, x3, x2, ...)
        const __m512 r = _mm512_fmadd_ps(swapped, _mm512_maskz_loadu_ps(m, s + j),
                                         _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, c + j)));
        _mm512_mask_storeu_ps(xa + j, m, r);
      }
    } else {
      float* xa = xh + i0;
      float* xb = xh + i0 + half;
      for (int64_t j = 0; j < count; j += 16) {
        const __mmask16 m = V512::Mask(count - j);
        const __m512 a = _mm512_maskz_loadu_ps(m, xa + j), b = _mm512_maskz_loadu_ps(m, xb + j);
        const __m512 cj = _mm512_maskz_loadu_ps(m, c + j), sj = _mm512_maskz_loadu_ps(m, s + j);
        _mm512_mask_storeu_ps(xa + j, m, _mm512_fmsub_ps(a, cj, _mm512_mul_ps(b, sj)));
        _mm512_mask_storeu_ps(xb + j, m, _mm512_fmadd_ps(b, cj, _mm512_mul_ps(a, sj)));
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t f) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < f; i += 16) {
    const __mmask16 m = V512::Mask(f - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 silu =
        _mm512_div_ps(g, _mm512_add_ps(one, VecExp<V512>(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void GeluTanhMul(const float* gate, const float* up, float* out, int64_t f) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 neg_k2 = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  const __m512 c = _mm512_set1_ps(0.044715f);
  for (int64_t i = 0; i < f; i += 16) {
    const __mmask16 m = V512::Mask(f - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(c, g), _mm512_mul_ps(g, g), g);
    const __m512 gelu =
        _mm512_div_ps(g, _mm512_add_ps(one, VecExp<V512>(_mm512_mul_ps(neg_k2, inner))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(gelu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = V512::Mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m512 a = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = V512::Mask(n - i);
    _mm512_mask_storeu_ps(
        y + i, m,
        _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void Scale(float* y, float alpha, int64_t n) {
  const __m512 a = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = V512::Mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = V512::Mask(n - i);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}

void F32ToBf16(const float* x, uint16_t* y, int64_t n) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  const __m512i bias = _mm512_set1_epi32(0x7FFF);
  const __m512i one = _mm512_set1_epi32(1);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = V512::Mask(n - i);
    const __m512i b = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, bias), lsb), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, exp_mask), inf);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtepi32_epi16(r));
  }
}

void Bf16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = V512::Mask(n - i);
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
  }
}

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = V512::Mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}

}  // namespace

const OpsTable& OpsAvx512() {
  static const OpsTable table = {SumSquares,  ScaleMul,  AddSumSquares, RopeRotate, SiluMul,
                                 GeluTanhMul, Dot,       Axpy,          Scale,      AddInPlace,
                                 F32ToBf16,   Bf16ToF32, F16ToF32,      ArgmaxLanes};
  return table;
}

}  // namespace astr::cpu::internal
