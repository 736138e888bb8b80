// Internal: per-ISA tables of the ops in ops.h, dispatched by ops.cc. Not part of the public API.
#pragma once

#include <cstdint>

namespace astr::cpu::internal {

struct OpsTable {
  // One row: sum of squares of x[0, dim) (the norm's reduction).
  float (*sum_squares)(const float* x /*[dim]*/, int64_t dim);
  // One row: y = x * scale * w.
  void (*scale_mul)(const float* x /*[dim]*/, float scale, const float* w /*[dim]*/,
                    float* y /*[dim]*/, int64_t dim);
  // One row: x += d, returns the sum of squares of the new x.
  float (*add_sum_squares)(float* x /*[dim]*/, const float* d /*[dim]*/, int64_t dim);
  // Rotates one token's heads over a chunk of pairs [i0, i0 + count) of each head.
  //   interleaved=false: pairs (i, i + half); c, s [count] are cos/sin of pair i0 + j.
  //   interleaved=true:  dims [2 i0, 2 (i0 + count)); c [2 count] = cos duplicated per pair,
  //                      s [2 count] = (-sin, +sin) per pair; x' = x * c + swap_pairs(x) * s.
  void (*rope_rotate)(float* x /*[heads, head_dim]*/, int64_t heads, int64_t head_dim, int64_t half,
                      int64_t i0, int64_t count, const float* c, const float* s, bool interleaved);
  void (*silu_mul)(const float* gate /*[f]*/, const float* up /*[f]*/, float* out /*[f]*/,
                   int64_t f);
  // out = gelu_tanh(gate) * up (GeGLU; ops.h GeluTanhMul).
  void (*gelu_tanh_mul)(const float* gate /*[f]*/, const float* up /*[f]*/, float* out /*[f]*/,
                        int64_t f);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float alpha, const float* x, float* y, int64_t n);
  void (*scale)(float* y, float alpha, int64_t n);
  void (*add_in_place)(float* y, const float* x, int64_t n);
  void (*f32_to_bf16)(const float* x, uint16_t* y, int64_t n);
  void (*bf16_to_f32)(const uint16_t* x, float* y, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // ops.h Argmax.
  int32_t (*argmax)(const float* x, int64_t n);
};

// ops.h Argmax as sixteen lanes, each keeping its first strict maximum, then merged by value and
// lowest id: the same id as one loop over the row, in a form the compiler vectorizes. `static`:
// each ops_*.cc compiles its own copy with its ISA's flags (no copy is shared across ISAs).
static inline int32_t ArgmaxLanes(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float best[kLanes];
  int32_t at[kLanes];
  for (int l = 0; l < kLanes; ++l) best[l] = x[0], at[l] = 0;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const bool greater = x[i + l] > best[l];
      best[l] = greater ? x[i + l] : best[l];
      at[l] = greater ? static_cast<int32_t>(i + l) : at[l];
    }
  }
  float best_value = x[0];
  int32_t best_id = 0;
  for (; i < n; ++i) {
    if (x[i] > best_value) best_value = x[i], best_id = static_cast<int32_t>(i);
  }
  for (int l = 0; l < kLanes; ++l) {
    if (best[l] > best_value || (best[l] == best_value && at[l] < best_id)) {
      best_value = best[l], best_id = at[l];
    }
  }
  return best_id;
}

const OpsTable& OpsScalar();
const OpsTable& OpsAvx2();
const OpsTable& OpsAvx512();

}  // namespace astr::cpu::internal
