// Internal: the AVX2 + FMA vector traits (8 float lanes, masked tails with vmaskmovps) that the
// kernels written over a traits class V use (attention_impl.h, vec_exp.h). Included only by files
// compiled with AVX2 flags; anonymous, so no instantiation is shared across ISAs.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace astr::cpu::internal {
namespace {

struct V256 {
  using T = __m256;
  static constexpr int64_t kLanes = 8;
  static constexpr int kRegs = 16;
  static __m256i Mask(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left < 8 ? left : 8)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static T Zero() { return _mm256_setzero_ps(); }
  static T Set1(float x) { return _mm256_set1_ps(x); }
  static T Load(const float* p) { return _mm256_loadu_ps(p); }
  static T LoadTail(const float* p, int64_t left) {
    return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, Mask(left));
  }
  static void Store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static void StoreTail(float* p, T v, int64_t left) {
    if (left >= 8) {
      _mm256_storeu_ps(p, v);
    } else {
      _mm256_maskstore_ps(p, Mask(left), v);
    }
  }
  static T Fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T Mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T Add(T a, T b) { return _mm256_add_ps(a, b); }
  static T Max(T a, T b) { return _mm256_max_ps(a, b); }
  static T Min(T a, T b) { return _mm256_min_ps(a, b); }
  static T RoundNearest(T v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static T Pow2(T n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static T ZeroBelow(T x, float t, T v) {
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_GE_OQ), v);
  }
  // Lanes i and i + 4, then pairs: the tree of ReduceAddLanes.
  static float ReduceAdd(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Lane e = ReduceAdd(v[e]): each level of ReduceAdd's tree, for all 8 vectors at once.
  static T ReduceAddLanes(const T (&v)[8]) {
    T t[4];  // t[p]: the 4 sums of v[2p] in lanes 0-3, of v[2p + 1] in lanes 4-7
    for (int p = 0; p < 4; ++p) {
      t[p] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20),
                           _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31));
    }
    T w[2];  // w[q]: half h holds the 2 sums of v[4q + h], then the 2 of v[4q + 2 + h]
    for (int q = 0; q < 2; ++q) {
      w[q] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * q], t[2 * q + 1], 0x44),
                           _mm256_shuffle_ps(t[2 * q], t[2 * q + 1], 0xEE));
    }
    // Lane 4h + i: the sum of v[2i + h].
    const T z =
        _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], 0x88), _mm256_shuffle_ps(w[0], w[1], 0xDD));
    return _mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }
};

}  // namespace
}  // namespace astr::cpu::internal
