// Internal: the AVX-512F vector traits (16 float lanes, masked tails) that the kernels written over
// a traits class V use (attention_impl.h, vec_exp.h). Included only by files compiled with AVX-512
// flags; anonymous, so no instantiation is shared across ISAs.
#pragma once

// GCC 12 flags the intentionally undefined pass-through operand inside AVX-512 intrinsics
// (_mm512_undefined_*) as (maybe-)uninitialized; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

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
  static T LoadTailOr(const float* p, int64_t left, float x) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(x), Mask(left), p);
  }
  static T Mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T Add(T a, T b) { return _mm512_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T Max(T a, T b) { return _mm512_max_ps(a, b); }
  static T Min(T a, T b) { return _mm512_min_ps(a, b); }
  static float First(T v) { return _mm512_cvtss_f32(v); }
  static T RoundNearest(T v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT); }
  static T Pow2(T n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static T ZeroBelow(T x, float t, T v) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_GE_OQ), v);
  }
  // Lanes i and i + 8, then i and i + 4 of each half, then pairs: the tree of ReduceAddLanes.
  static float ReduceAdd(T v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float ReduceMax(T v) { return _mm512_reduce_max_ps(v); }
  // Lane e = ReduceAdd(v[e]): each level of ReduceAdd's tree, for all 16 vectors at once.
  static T ReduceAddLanes(const T (&v)[16]) {
    T t[8];  // t[p]: the 8 sums of v[2p] in lanes 0-7, of v[2p + 1] in lanes 8-15
    for (int p = 0; p < 8; ++p) {
      t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                           _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
    }
    T u[4];  // u[q]: quarter c holds the 4 sums of v[4q + c]
    for (int q = 0; q < 4; ++q) {
      u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], 0x88),
                           _mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], 0xDD));
    }
    T w[2];  // w[r]: quarter c holds the 2 sums of v[8r + c], then the 2 of v[8r + 4 + c]
    for (int r = 0; r < 2; ++r) {
      w[r] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * r], u[2 * r + 1], 0x44),
                           _mm512_shuffle_ps(u[2 * r], u[2 * r + 1], 0xEE));
    }
    // Lane 4c + i: the sum of v[4i + c].
    const T z =
        _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
  }
};

}  // namespace
}  // namespace astr::cpu::internal
