#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops_kernels.h"

namespace astr::cpu {
namespace {

using internal::OpsTable;

const OpsTable& Table(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512:
      return internal::OpsAvx512();
    case Isa::kAvx2:
      return internal::OpsAvx2();
    case Isa::kScalar:
      break;
  }
  return internal::OpsScalar();
}

float InvRms(float sum_squares, int64_t dim, float eps) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(sum_squares) / dim + eps));
}

// Pairs per chunk of cos/sin computed at once (stack tables; rot_dim has no upper limit).
constexpr int64_t kRopeChunk = 128;

}  // namespace

void RmsNormIsa(Isa isa, const float* x, int64_t ldx, const float* w, float eps, int64_t rows,
                int64_t dim, float* y, int64_t ldy) {
  const OpsTable& t = Table(isa);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    t.scale_mul(xr, InvRms(t.sum_squares(xr, dim), dim, eps), w, y + r * ldy, dim);
  }
}

void AddRmsNormIsa(Isa isa, float* x, int64_t ldx, const float* d, int64_t ldd, const float* w,
                   float eps, int64_t rows, int64_t dim, float* y, int64_t ldy) {
  const OpsTable& t = Table(isa);
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * ldx;
    const float ss = t.add_sum_squares(xr, d + r * ldd, dim);
    t.scale_mul(xr, InvRms(ss, dim, eps), w, y + r * ldy, dim);
  }
}

void RopeIsa(Isa isa, float* x, int64_t ldx, int64_t tokens, int64_t heads, int64_t head_dim,
             int64_t rot_dim, const int32_t* positions, const float* inv_freq_short,
             bool interleaved, const RopeMore& more) {
  const OpsTable& t = Table(isa);
  const int64_t half = rot_dim / 2;
  // Interleaved tables hold two entries per pair.
  alignas(64) float c[2 * kRopeChunk];
  alignas(64) float s[2 * kRopeChunk];
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const double pos = positions[tok];
    const float* inv_freq =
        more.use_long != nullptr && more.use_long[tok] != 0 ? more.inv_freq_long : inv_freq_short;
    for (int64_t i0 = 0; i0 < half; i0 += kRopeChunk) {
      const int64_t count = std::min(kRopeChunk, half - i0);
      for (int64_t j = 0; j < count; ++j) {
        // Double angle and trig: a float angle at pos ~1e5 would already be off by ~1e-2 rad.
        const double angle = pos * static_cast<double>(inv_freq[i0 + j]);
        auto cj = static_cast<float>(std::cos(angle));
        auto sj = static_cast<float>(std::sin(angle));
        if (more.scale != 1.0f) cj *= more.scale, sj *= more.scale;
        if (interleaved) {
          c[2 * j] = cj, c[2 * j + 1] = cj;
          s[2 * j] = -sj, s[2 * j + 1] = sj;
        } else {
          c[j] = cj, s[j] = sj;
        }
      }
      t.rope_rotate(x + tok * ldx, heads, head_dim, half, i0, count, c, s, interleaved);
    }
  }
}

void SiluMulIsa(Isa isa, const float* gate_up, int64_t tokens, int64_t f, float* out, int64_t ldo) {
  const OpsTable& t = Table(isa);
  for (int64_t r = 0; r < tokens; ++r) {
    const float* g = gate_up + r * 2 * f;
    t.silu_mul(g, g + f, out + r * ldo, f);
  }
}

void GeluTanhMulIsa(Isa isa, const float* gate_up, int64_t tokens, int64_t f, float* out,
                    int64_t ldo) {
  const OpsTable& t = Table(isa);
  for (int64_t r = 0; r < tokens; ++r) {
    const float* g = gate_up + r * 2 * f;
    t.gelu_tanh_mul(g, g + f, out + r * ldo, f);
  }
}

int32_t ArgmaxIsa(Isa isa, const float* x, int64_t n) { return Table(isa).argmax(x, n); }
float DotIsa(Isa isa, const float* a, const float* b, int64_t n) { return Table(isa).dot(a, b, n); }
void AxpyIsa(Isa isa, float alpha, const float* x, float* y, int64_t n) {
  Table(isa).axpy(alpha, x, y, n);
}
void ScaleIsa(Isa isa, float* y, float alpha, int64_t n) { Table(isa).scale(y, alpha, n); }
void AddInPlaceIsa(Isa isa, float* y, const float* x, int64_t n) {
  Table(isa).add_in_place(y, x, n);
}
void F32ToBf16Isa(Isa isa, const float* x, uint16_t* y, int64_t n) {
  Table(isa).f32_to_bf16(x, y, n);
}
void Bf16ToF32Isa(Isa isa, const uint16_t* x, float* y, int64_t n) {
  Table(isa).bf16_to_f32(x, y, n);
}
void F16ToF32Isa(Isa isa, const uint16_t* x, float* y, int64_t n) {
  Table(isa).f16_to_f32(x, y, n);
}

void RmsNorm(const float* x, int64_t ldx, const float* w, float eps, int64_t rows, int64_t dim,
             float* y, int64_t ldy) {
  RmsNormIsa(ActiveIsa(), x, ldx, w, eps, rows, dim, y, ldy);
}
void AddRmsNorm(float* x, int64_t ldx, const float* d, int64_t ldd, const float* w, float eps,
                int64_t rows, int64_t dim, float* y, int64_t ldy) {
  AddRmsNormIsa(ActiveIsa(), x, ldx, d, ldd, w, eps, rows, dim, y, ldy);
}
void Rope(float* x, int64_t ldx, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim,
          const int32_t* positions, const float* inv_freq, bool interleaved, const RopeMore& more) {
  RopeIsa(ActiveIsa(), x, ldx, tokens, heads, head_dim, rot_dim, positions, inv_freq, interleaved,
          more);
}
void SiluMul(const float* gate_up, int64_t tokens, int64_t f, float* out, int64_t ldo) {
  SiluMulIsa(ActiveIsa(), gate_up, tokens, f, out, ldo);
}
void GeluTanhMul(const float* gate_up, int64_t tokens, int64_t f, float* out, int64_t ldo) {
  GeluTanhMulIsa(ActiveIsa(), gate_up, tokens, f, out, ldo);
}
void SwigluClampedMul(const float* gate_up, int64_t tokens, int64_t f, float alpha, float limit,
                      float* out, int64_t ldo) {
  for (int64_t r = 0; r < tokens; ++r) {
    const float* gate = gate_up + r * 2 * f;
    const float* up = gate + f;
    float* o = out + r * ldo;
    for (int64_t i = 0; i < f; ++i) {
      const float g = std::min(gate[i], limit);
      const float u = std::clamp(up[i], -limit, limit);
      o[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
    }
  }
}
float Dot(const float* a, const float* b, int64_t n) { return DotIsa(ActiveIsa(), a, b, n); }
void Axpy(float alpha, const float* x, float* y, int64_t n) {
  AxpyIsa(ActiveIsa(), alpha, x, y, n);
}
void Scale(float* y, float alpha, int64_t n) { ScaleIsa(ActiveIsa(), y, alpha, n); }
void AddInPlace(float* y, const float* x, int64_t n) { AddInPlaceIsa(ActiveIsa(), y, x, n); }

void RouteTopK(const float* logits, const moe::RouteParams& p, int32_t* experts, float* weights) {
  moe::RouteRow(
      logits, p, [](float x) { return std::exp(x); }, experts, weights);
}
void RouteTopK(const float* logits, int64_t n, int64_t k, bool normalize, int32_t* experts,
               float* weights) {
  moe::RouteParams p;
  p.num_experts = static_cast<int>(n);
  p.top_k = static_cast<int>(k);
  p.normalize = normalize;
  RouteTopK(logits, p, experts, weights);
}
void F32ToBf16(const float* x, uint16_t* y, int64_t n) { F32ToBf16Isa(ActiveIsa(), x, y, n); }
void Bf16ToF32(const uint16_t* x, float* y, int64_t n) { Bf16ToF32Isa(ActiveIsa(), x, y, n); }
void F16ToF32(const uint16_t* x, float* y, int64_t n) { F16ToF32Isa(ActiveIsa(), x, y, n); }
int32_t Argmax(const float* x, int64_t n) { return ArgmaxIsa(ActiveIsa(), x, n); }

}  // namespace astr::cpu
