// AVX-512F attention block kernels: 16 lanes, masked tails.
// GCC 12 flags the intentionally undefined pass-through operand inside AVX-512 intrinsics
// (_mm512_undefined_*) as (maybe-)uninitialized; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_impl.h"

namespace astr::cpu::internal {
namespace {

struct V512 {
  using T = __m512;
  static constexpr int64_t kLanes = 16;
  static constexpr int kRegs = 32;
  static __mmask16 Mask(int64_t left) {
    return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
  }
  static T Zero() { return _mm512_setzero_ps(); }
  static T Set1(float x) { return _mm512_set1_ps(x); }
  static T Load(const float* p) { return _mm512_loadu_ps(p); }
  static T LoadTail(const float* p, int64_t left) { return _mm512_maskz_loadu_ps(Mask(left), p); }
  static void Store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static void StoreTail(float* p, T v, int64_t left) { _mm512_mask_storeu_ps(p, Mask(left), v); }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T Mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static float ReduceAdd(T v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

const AttnKernels& AttnKernelsAvx512() {
  static const AttnKernels k{attn::Scores<V512>, attn::Accumulate<V512>};
  return k;
}

}  // namespace astr::cpu::internal
