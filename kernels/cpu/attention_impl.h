// Internal: the attention block kernels written once over a vector traits class V, included and
// instantiated only by attention_avx2.cc and attention_avx512.cc (each compiled with its ISA flags;
// V lives in an anonymous namespace there, so no instantiation is shared across ISAs).
//
// V provides: T (vector type), kLanes, kRegs (vector registers), Zero(), Set1(x), Load(p),
// LoadTail(p, left) / StoreTail(p, v, left) (first min(left, kLanes) lanes, the rest zero / kept),
// Store(p, v), Fma(a, b, c) = a * b + c, Mul(a, b), ReduceAdd(v) (a fixed tree) and
// ReduceAddLanes(v[kLanes]) (lane e = ReduceAdd(v[e]), bit for bit, from fewer instructions).
// Softmax (the AVX-512 path's) also needs LoadTailOr(p, left, x) (the rest x), Sub, First(v) (lane
// 0), ReduceMax(v) and what VecExp (vec_exp.h) needs.
//
// Order of operations, identical in every code path below (so it depends only on hd, never on n,
// the group size or a head's place in the group):
//   score(h, j) = ReduceAdd(Fma(q_c, k_c, ... Fma(q_0, k_0, Zero()))) * scale over chunks c of
//                 kLanes floats (the last one masked);
//   acc(h)      = acc(h) * correction[h], then Fma(Set1(p[h][j]), v_j, acc(h)) for j in order;
//   softmax     = Exp below lane by lane; l(h) = l(h) * correction + ReduceAdd(the sum of the
//                 block's chunks of p, in order, the tail lanes 0).
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/vec_exp.h"

namespace astr::cpu::internal::attn {

// Chunk counts with a register-resident kernel; larger head dims take the generic loops.
constexpr int kMaxChunks = 16;

// Heads per pass: HP heads of NC chunks each stay in registers, plus one per head and a shared one.
template <class V>
constexpr int HeadsPerPass(int nc) {
  for (int hp = 4; hp > 1; --hp) {
    if (hp * (nc + 1) + 1 <= V::kRegs) return hp;
  }
  return 1;
}

// Heads per pass of the scores: a divisor of kLanes (ScoresHeads reduces kLanes dot products
// together), HP heads' q and one accumulator each in registers, plus two.
template <class V>
constexpr int ScoresHeadsPerPass(int nc) {
  for (int hp = 4; hp > 1; hp /= 2) {
    if (hp * (nc + 2) + 2 <= V::kRegs) return hp;
  }
  return 1;
}

template <class V, int NC, int HP>
inline void ScoresHeads(const float* q, int64_t hd, const float* const* k_rows, int64_t n,
                        float scale, float* scores, int64_t ld) {
  using T = typename V::T;
  constexpr int64_t L = V::kLanes;
  const int64_t tail = hd - (NC - 1) * L;
  T qv[HP][NC];
  for (int h = 0; h < HP; ++h) {
    for (int c = 0; c < NC - 1; ++c) qv[h][c] = V::Load(q + h * hd + c * L);
    qv[h][NC - 1] = V::LoadTail(q + h * hd + (NC - 1) * L, tail);
  }
  if constexpr (L % HP == 0) {
    // kLanes scores at a time: J rows for each of the HP heads, their dot products reduced
    // together (ReduceAddLanes: the same sums as one ReduceAdd each, a third of the instructions).
    constexpr int J = static_cast<int>(L / HP);
    for (int64_t j0 = 0; j0 < n; j0 += J) {
      const int64_t nj = n - j0 < J ? n - j0 : J;
      T dots[L];
      for (int jj = 0; jj < J; ++jj) {
        // Past the block's end: row j0 again, its sums not stored.
        const float* k = k_rows[j0 + (jj < nj ? jj : 0)];
        T acc[HP];
        for (int h = 0; h < HP; ++h) acc[h] = V::Zero();
        for (int c = 0; c < NC; ++c) {
          const T kc = c < NC - 1 ? V::Load(k + c * L) : V::LoadTail(k + c * L, tail);
          for (int h = 0; h < HP; ++h) acc[h] = V::Fma(qv[h][c], kc, acc[h]);
        }
        for (int h = 0; h < HP; ++h) dots[h * J + jj] = acc[h];
      }
      alignas(64) float out[L];
      V::Store(out, V::Mul(V::ReduceAddLanes(dots), V::Set1(scale)));
      for (int h = 0; h < HP; ++h) {
        for (int64_t jj = 0; jj < nj; ++jj) scores[h * ld + j0 + jj] = out[h * J + jj];
      }
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* k = k_rows[j];
    T acc[HP];
    for (int h = 0; h < HP; ++h) acc[h] = V::Zero();
    for (int c = 0; c < NC; ++c) {
      const T kc = c < NC - 1 ? V::Load(k + c * L) : V::LoadTail(k + c * L, tail);
      for (int h = 0; h < HP; ++h) acc[h] = V::Fma(qv[h][c], kc, acc[h]);
    }
    for (int h = 0; h < HP; ++h) scores[h * ld + j] = V::ReduceAdd(acc[h]) * scale;
  }
}

template <class V, int NC, int HP>
inline void AccumulateHeads(const float* p, int64_t ld, int64_t hd, const float* const* v_rows,
                            int64_t n, const float* correction, float* acc) {
  using T = typename V::T;
  constexpr int64_t L = V::kLanes;
  const int64_t tail = hd - (NC - 1) * L;
  T a[HP][NC];
  for (int h = 0; h < HP; ++h) {
    for (int c = 0; c < NC - 1; ++c) a[h][c] = V::Load(acc + h * hd + c * L);
    a[h][NC - 1] = V::LoadTail(acc + h * hd + (NC - 1) * L, tail);
    if (correction != nullptr) {
      const T corr = V::Set1(correction[h]);
      for (int c = 0; c < NC; ++c) a[h][c] = V::Mul(a[h][c], corr);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* v = v_rows[j];
    T w[HP];
    for (int h = 0; h < HP; ++h) w[h] = V::Set1(p[h * ld + j]);
    for (int c = 0; c < NC; ++c) {
      const T vc = c < NC - 1 ? V::Load(v + c * L) : V::LoadTail(v + c * L, tail);
      for (int h = 0; h < HP; ++h) a[h][c] = V::Fma(w[h], vc, a[h][c]);
    }
  }
  for (int h = 0; h < HP; ++h) {
    for (int c = 0; c < NC - 1; ++c) V::Store(acc + h * hd + c * L, a[h][c]);
    V::StoreTail(acc + h * hd + (NC - 1) * L, a[h][NC - 1], tail);
  }
}

// The online-softmax update of one block (AttnKernels::softmax), a head at a time.
template <class V>
void Softmax(float* scores, int64_t ld, int64_t group, int64_t n, float* m, float* l,
             float* correction) {
  using T = typename V::T;
  constexpr int64_t L = V::kLanes;
  constexpr float kNegInf = -__builtin_huge_valf();
  for (int64_t h = 0; h < group; ++h) {
    float* sh = scores + h * ld;
    T mx = V::Set1(m[h]);
    for (int64_t j = 0; j < n; j += L) mx = V::Max(mx, V::LoadTailOr(sh + j, n - j, kNegInf));
    const T m_new = V::Set1(V::ReduceMax(mx));
    const float corr = V::First(VecExp<V>(V::Sub(V::Set1(m[h]), m_new)));
    T sum = V::Zero();
    for (int64_t j = 0; j < n; j += L) {
      const T p = VecExp<V>(V::Sub(V::LoadTailOr(sh + j, n - j, kNegInf), m_new));
      V::StoreTail(sh + j, p, n - j);
      sum = V::Add(sum, p);
    }
    correction[h] = corr;
    l[h] = l[h] * corr + V::ReduceAdd(sum);
    m[h] = V::First(m_new);
  }
}

// Whole group: passes of HP heads, the remainder with fewer.
template <class V, int NC, int HP>
void ScoresGroup(const float* q, int64_t group, int64_t hd, const float* const* k_rows, int64_t n,
                 float scale, float* scores, int64_t ld) {
  int64_t h = 0;
  for (; h + HP <= group; h += HP) {
    ScoresHeads<V, NC, HP>(q + h * hd, hd, k_rows, n, scale, scores + h * ld, ld);
  }
  if constexpr (HP > 1) {
    if (h < group) {
      ScoresGroup<V, NC, HP - 1>(q + h * hd, group - h, hd, k_rows, n, scale, scores + h * ld, ld);
    }
  }
}

template <class V, int NC, int HP>
void AccumulateGroup(const float* p, int64_t ld, int64_t group, int64_t hd,
                     const float* const* v_rows, int64_t n, const float* correction, float* acc) {
  int64_t h = 0;
  for (; h + HP <= group; h += HP) {
    AccumulateHeads<V, NC, HP>(p + h * ld, ld, hd, v_rows, n,
                               correction != nullptr ? correction + h : nullptr, acc + h * hd);
  }
  if constexpr (HP > 1) {
    if (h < group) {
      AccumulateGroup<V, NC, HP - 1>(p + h * ld, ld, group - h, hd, v_rows, n,
                                     correction != nullptr ? correction + h : nullptr,
                                     acc + h * hd);
    }
  }
}

// Generic head dims (more than kMaxChunks chunks): the same operation order, from memory.
template <class V>
void ScoresGeneric(const float* q, int64_t group, int64_t hd, const float* const* k_rows, int64_t n,
                   float scale, float* scores, int64_t ld) {
  using T = typename V::T;
  constexpr int64_t L = V::kLanes;
  for (int64_t h = 0; h < group; ++h) {
    const float* qh = q + h * hd;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = k_rows[j];
      T acc = V::Zero();
      for (int64_t i = 0; i < hd; i += L) {
        acc = V::Fma(V::LoadTail(qh + i, hd - i), V::LoadTail(k + i, hd - i), acc);
      }
      scores[h * ld + j] = V::ReduceAdd(acc) * scale;
    }
  }
}

template <class V>
void AccumulateGeneric(const float* p, int64_t ld, int64_t group, int64_t hd,
                       const float* const* v_rows, int64_t n, const float* correction, float* acc) {
  using T = typename V::T;
  constexpr int64_t L = V::kLanes;
  for (int64_t h = 0; h < group; ++h) {
    float* ah = acc + h * hd;
    for (int64_t i = 0; i < hd; i += L) {
      T a = V::LoadTail(ah + i, hd - i);
      if (correction != nullptr) a = V::Mul(a, V::Set1(correction[h]));
      for (int64_t j = 0; j < n; ++j) {
        a = V::Fma(V::Set1(p[h * ld + j]), V::LoadTail(v_rows[j] + i, hd - i), a);
      }
      V::StoreTail(ah + i, a, hd - i);
    }
  }
}

template <class V, int NC = 1>
void Scores(const float* q, int64_t group, int64_t hd, const float* const* k_rows, int64_t n,
            float scale, float* scores, int64_t ld) {
  if constexpr (NC <= kMaxChunks) {
    if ((hd + V::kLanes - 1) / V::kLanes == NC) {
      ScoresGroup<V, NC, ScoresHeadsPerPass<V>(NC)>(q, group, hd, k_rows, n, scale, scores, ld);
    } else {
      Scores<V, NC + 1>(q, group, hd, k_rows, n, scale, scores, ld);
    }
  } else {
    ScoresGeneric<V>(q, group, hd, k_rows, n, scale, scores, ld);
  }
}

template <class V, int NC = 1>
void Accumulate(const float* p, int64_t ld, int64_t group, int64_t hd, const float* const* v_rows,
                int64_t n, const float* correction, float* acc) {
  if constexpr (NC <= kMaxChunks) {
    if ((hd + V::kLanes - 1) / V::kLanes == NC) {
      AccumulateGroup<V, NC, HeadsPerPass<V>(NC)>(p, ld, group, hd, v_rows, n, correction, acc);
    } else {
      Accumulate<V, NC + 1>(p, ld, group, hd, v_rows, n, correction, acc);
    }
  } else {
    AccumulateGeneric<V>(p, ld, group, hd, v_rows, n, correction, acc);
  }
}

}  // namespace astr::cpu::internal::attn
