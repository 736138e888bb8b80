// Internal: the one exp approximation of the CPU kernels (the softmax of attention, SiLU), written
// once over a vector traits class V (vec_avx2.h, vec_avx512.h) that provides T, Set1, Add, Mul,
// Fma, Max, Min, RoundNearest, Pow2 (2^n of integral n in [-126, 127]) and ZeroBelow(x, t, v) (v
// with 0 in the lanes where x < t). Included only by files compiled with the ISA flags of their V.
#pragma once

namespace astr::cpu::internal {

// Below kExpLowest exp is 0 (and for -inf, NaN stays NaN); above kExpHighest it is
// exp(kExpHighest): n = round(x log2 e) stays in [-126, 127], so 2^n is a normal float.
inline constexpr float kExpLowest = -87.33f;
inline constexpr float kExpHighest = 88.3f;

// exp(x) lane by lane: Cephes' expf, x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 split in two
// constants), a degree-7 polynomial in r, scaled by 2^n. 0.94 ulp at worst in cpu_attention_test.
template <class V>
inline typename V::T VecExp(typename V::T x) {
  using T = typename V::T;
  const T xc = V::Min(V::Max(x, V::Set1(kExpLowest)), V::Set1(kExpHighest));
  const T n = V::RoundNearest(V::Mul(xc, V::Set1(1.44269504088896341f)));
  T r = V::Fma(n, V::Set1(-0.693359375f), xc);
  r = V::Fma(n, V::Set1(2.12194440e-4f), r);
  T p = V::Set1(1.9875691500e-4f);
  p = V::Fma(p, r, V::Set1(1.3981999507e-3f));
  p = V::Fma(p, r, V::Set1(8.3334519073e-3f));
  p = V::Fma(p, r, V::Set1(4.1665795894e-2f));
  p = V::Fma(p, r, V::Set1(1.6666665459e-1f));
  p = V::Fma(p, r, V::Set1(5.0000001201e-1f));
  const T y = V::Fma(V::Mul(p, r), r, V::Add(r, V::Set1(1.0f)));
  return V::ZeroBelow(x, kExpLowest, V::Mul(y, V::Pow2(n)));
}

}  // namespace astr::cpu::internal
