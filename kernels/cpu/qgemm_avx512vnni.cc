// AVX-512 VNNI tiles of the block-quantized GEMM (the tile itself: qgemm_avx512vnni_impl.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/qgemm_kernels.h"

namespace astr::cpu::internal {
namespace {

#include "kernels/cpu/qgemm_avx512vnni_impl.h"  // inside this anonymous namespace

// f16(x) as a float, rounded to nearest even (qgemm.cc's RoundF16).
float RoundF16Avx512(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }

// QuantizeRow32Fn: each block's 32 values in two vectors (masked past k: zeros, which neither
// change the max nor quantize to anything but 0).
void QuantizeRow32Avx512(const float* x, int64_t k, int64_t k_blocks, bool round_sum32, int8_t* q,
                         float* d, int32_t* s, float* sum16, float* sum32, float* dt, int64_t ldt) {
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const auto mask = [](int64_t n) {  // the first n lanes
    return n >= 16  ? static_cast<__mmask16>(0xFFFF)
           : n <= 0 ? static_cast<__mmask16>(0)
                    : static_cast<__mmask16>((1u << n) - 1);
  };
  for (int64_t b = 0; b < k_blocks; ++b) {
    const int64_t j0 = b * 32, left = k - j0;
    const __m512 x0 = _mm512_maskz_loadu_ps(mask(left), x + j0);
    const __m512 x1 = _mm512_maskz_loadu_ps(mask(left - 16), x + j0 + 16);
    // max(|x|, m) keeps m where |x| is NaN, as the scalar loop's std::max ignores NaN.
    __m512 m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
    m = _mm512_max_ps(_mm512_abs_ps(x1), m);
    const float amax = _mm512_reduce_max_ps(m);
    const float scale = RoundF16Avx512(amax / 127.0f);
    const __m512 mul = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    // Nearest even, as QuantizeSpanFn (NaN converts to INT_MIN, clamped to -127 like the others).
    const auto quantize = [&](__m512 v) {
      const __m512i i = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v, mul),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      return _mm512_min_epi32(_mm512_max_epi32(i, lo), hi);
    };
    const __m512i i0 = quantize(x0), i1 = quantize(x1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + j0), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + j0 + 16), _mm512_cvtepi32_epi8(i1));
    const int32_t h0 = _mm512_reduce_add_epi32(i0), h1 = _mm512_reduce_add_epi32(i1);
    d[b] = scale;
    s[2 * b] = h0;
    s[2 * b + 1] = h1;
    sum16[2 * b] = scale * static_cast<float>(h0);
    sum16[2 * b + 1] = scale * static_cast<float>(h1);
    const float whole = scale * static_cast<float>(h0 + h1);
    sum32[b] = round_sum32 ? RoundF16Avx512(whole) : whole;
    dt[b * ldt] = scale;
  }
}

}  // namespace

void UseAvx512ActivationLoops(QuantKernelSet* set) {
  UseAvx2ActivationLoops(set);
  set->quantize_row32 = QuantizeRow32Avx512;
}

const QuantKernelSet& QuantKernelsAvx512Vnni() {
  static const QuantKernelSet set = [] {
    QuantKernelSet s = MakeQuantKernelSet<QuantTileAvx512Vnni, 4, 2>();
    UseAvx512ActivationLoops(&s);
    return s;
  }();
  return set;
}

}  // namespace astr::cpu::internal
