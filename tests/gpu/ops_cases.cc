// Op-table cases of the elementwise / row ops (kernels/cuda/ops.h): each runs one op on one shape
// and compares with the CPU backend's own kernel (cpu::RmsNorm, cpu::AddRmsNorm, cpu::Rope,
// cpu::SiluMul, cpu::AddInPlace) or, where the CPU backend computes inline (the attention gate),
// the same scalar expression, on the same bf16-rounded inputs.
//
// Tolerances. A bf16 output is the GPU's f32 value rounded to nearest: at most half a bf16 spacing,
// i.e. <= 2^-8 |v| (8 significant bits). The f32 value itself differs from the CPU's by f32-level
// rounding only: the norms reduce their sum of squares in another order (<= ~1e-6 relative in
// inv_rms), silu / sigmoid use CUDA's expf (<= 2 ulp), RoPE's cos / sin are the same double values
// rounded to f32 and the rotation is the same unfused f32 arithmetic (the CPU's AVX path may fuse:
// <= 2^-24 of |xa| + |xb|). So a bf16 output must satisfy |gpu - cpu| <= 2^-8 |cpu| * 1.01 + a few
// 1e-6 (kBf16Rel / per-op absolute terms); anything a wrong index, a missed row or a skipped scale
// produces is orders of magnitude larger. Pure data movement (gathers), the residual update x +=
// delta (the same f32 add) and the bias add (same f32 add, same rounding) must be bit-exact, and
// everything an op must not touch (columns past `cols`, dims past rope_dim, padding) is checked to
// be unchanged.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/model/tensor_dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/op_test.h"

namespace astr::gputest {
namespace {

using cuda::bf16;

constexpr double kBf16Rel = 1.01 / 256.0;  // half a bf16 spacing (2^-8 |v|) plus 1% slack
constexpr float kEps = 1e-5f;

const int kTokens[] = {1, 3, 64, 257};

std::string Fmt(const char* fmt, long long a, long long b = 0, long long c = 0, long long d = 0,
                long long e = 0) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), fmt, a, b, c, d, e);
  return buf;
}

// Device bf16 buffer from already bf16-representable floats.
cudaError_t UploadBf16(const std::vector<float>& x, DeviceBuffer<uint16_t>* buf) {
  return buf->Upload(ToBf16(x));
}
bf16* Ptr(const DeviceBuffer<uint16_t>& buf) { return reinterpret_cast<bf16*>(buf.get()); }

// |got - want| <= rel * |want| + abs[i] for every element; abs[i] < 0 marks an element that must be
// bit-identical (untouched, or exact by construction). Reports max |diff| / bound (tol 1).
CaseResult Bounded(const std::vector<float>& got, const std::vector<float>& want, double rel,
                   const std::vector<double>& abs) {
  if (got.size() != want.size()) return Fail("size mismatch");
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double ratio;
    if (abs[i] < 0) {
      const bool same = std::memcmp(&got[i], &want[i], sizeof(float)) == 0 ||
                        (std::isnan(got[i]) && std::isnan(want[i]));
      ratio = same ? 0.0 : INFINITY;
    } else {
      const double bound = rel * std::fabs(static_cast<double>(want[i])) + abs[i];
      const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
      ratio = std::isnan(diff) ? INFINITY : (bound > 0 ? diff / bound : (diff > 0 ? INFINITY : 0));
    }
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  if (worst <= 1.0) return Pass(worst, 1.0);
  char buf[200];
  std::snprintf(buf, sizeof(buf), "worst at %zu: got %.8g want %.8g (%s)", worst_i, got[worst_i],
                want[worst_i], abs[worst_i] < 0 ? "must be exact" : "bounded");
  return Fail(buf, worst, 1.0);
}

CaseResult Exact(const std::vector<float>& got, const std::vector<float>& want) {
  return Bounded(got, want, 0.0, std::vector<double>(want.size(), -1.0));
}

// ---------------------------------------------------------------------------------------------
// (Add +) RMSNorm. x is the f32 residual stream (not rounded), out bf16. `offset` shifts every
// pointer by one element so the element-by-element path runs at an aligned-looking shape.

CaseResult RunAddRmsNorm(int t, int hidden, bool with_delta, int offset) {
  const int64_t n = int64_t{t} * hidden;
  std::vector<float> x = RandomVector(n, 11 + hidden, -2.0f, 2.0f);
  const std::vector<float> delta = RandomVector(n, 12 + hidden, -1.0f, 1.0f);
  const std::vector<float> w = RandomVector(hidden, 13 + hidden, 0.5f, 1.5f);
  std::vector<float> x_cpu = x, want(n);
  if (with_delta) {
    cpu::AddRmsNorm(x_cpu.data(), hidden, delta.data(), hidden, w.data(), kEps, t, hidden,
                    want.data(), hidden);
  } else {
    cpu::RmsNorm(x_cpu.data(), hidden, w.data(), kEps, t, hidden, want.data(), hidden);
  }
  auto padded = [offset](std::vector<float> v) {
    v.insert(v.begin(), offset, 0.0f);
    return v;
  };
  DeviceBuffer<float> dx, dd, dw;
  DeviceBuffer<uint16_t> dout(n + offset);
  ASTR_GPU_CHECK(dx.Upload(padded(x)));
  ASTR_GPU_CHECK(dd.Upload(padded(delta)));
  ASTR_GPU_CHECK(dw.Upload(padded(w)));
  ASTR_GPU_CHECK(cuda::LaunchAddRmsNorm(dx.get() + offset, with_delta ? dd.get() + offset : nullptr,
                                        dw.get() + offset, kEps, t, hidden, Ptr(dout) + offset,
                                        nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> x_gpu;
  std::vector<uint16_t> out_bits;
  ASTR_GPU_CHECK(dx.Download(&x_gpu));
  ASTR_GPU_CHECK(dout.Download(&out_bits));
  x_gpu.erase(x_gpu.begin(), x_gpu.begin() + offset);
  out_bits.erase(out_bits.begin(), out_bits.begin() + offset);
  CaseResult rx = Exact(x_gpu, x_cpu);
  if (rx.kind != CaseResult::kPass) {
    rx.detail = "residual x: " + rx.detail;
    return rx;
  }
  return Bounded(FromBf16(out_bits), want, kBf16Rel, std::vector<double>(n, 1e-6));
}

// ---------------------------------------------------------------------------------------------
// Per-head RMSNorm on the q part of a qkv-like row: `heads` slices, then 2 * head_dim columns the
// op must not touch.

CaseResult RunHeadRmsNorm(int t, int heads, int head_dim) {
  const int64_t stride = int64_t{heads + 2} * head_dim;
  const std::vector<float> rows = RoundBf16(RandomVector(t * stride, 21 + head_dim, -2.0f, 2.0f));
  const std::vector<float> w = RandomVector(head_dim, 22, 0.5f, 1.5f);
  std::vector<float> want = rows;
  for (int r = 0; r < t; ++r) {
    float* row = want.data() + r * stride;
    cpu::RmsNorm(row, head_dim, w.data(), kEps, heads, head_dim, row, head_dim);
  }
  DeviceBuffer<uint16_t> d;
  DeviceBuffer<float> dw;
  ASTR_GPU_CHECK(UploadBf16(rows, &d));
  ASTR_GPU_CHECK(dw.Upload(w));
  ASTR_GPU_CHECK(
      cuda::LaunchHeadRmsNorm(Ptr(d), stride, t, heads, head_dim, dw.get(), kEps, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits;
  ASTR_GPU_CHECK(d.Download(&bits));
  std::vector<double> abs(want.size(), -1.0);
  for (int r = 0; r < t; ++r) {
    for (int64_t c = 0; c < int64_t{heads} * head_dim; ++c) abs[r * stride + c] = 1e-6;
  }
  return Bounded(FromBf16(bits), want, kBf16Rel, abs);
}

// ---------------------------------------------------------------------------------------------
// RoPE on `heads` heads of rows with two extra heads' worth of columns after them, positions up to
// max_pos (the first token at max_pos, the second at 0, the rest random).

std::vector<float> InvFreq(int rope_dim, double theta) {
  std::vector<float> f(rope_dim / 2);
  for (int i = 0; i < rope_dim / 2; ++i) {
    f[i] = static_cast<float>(std::pow(theta, -2.0 * i / rope_dim));
  }
  return f;
}

// With `longrope`: LongRoPE's cos / sin factor, and every third token on a second (long) table.
CaseResult RunRope(int t, int heads, int head_dim, int rope_dim, bool interleaved, int max_pos,
                   bool longrope = false) {
  const int64_t stride = int64_t{heads + 2} * head_dim;
  const std::vector<float> rows = RoundBf16(RandomVector(t * stride, 31 + t, -2.0f, 2.0f));
  const std::vector<float> inv_freq = InvFreq(rope_dim, 1e6);
  const std::vector<float> inv_freq_long = InvFreq(rope_dim, 3e7);
  std::vector<int32_t> pos(t);
  const std::vector<float> u = RandomVector(t, 32, 0.0f, 1.0f);
  for (int i = 0; i < t; ++i) pos[i] = i == 0 ? max_pos : i == 1 ? 0 : int(u[i] * max_pos);
  std::vector<uint8_t> use_long(t);
  std::vector<int32_t> use_long32(t);
  for (int i = 0; i < t; ++i) use_long[i] = use_long32[i] = i % 3 == 2;
  const float scale = longrope ? 1.1902f : 1.0f;
  std::vector<float> want = rows;
  cpu::RopeMore more;
  more.scale = scale;
  if (longrope) more.inv_freq_long = inv_freq_long.data(), more.use_long = use_long.data();
  cpu::Rope(want.data(), stride, t, heads, head_dim, rope_dim, pos.data(), inv_freq.data(),
            interleaved, more);
  DeviceBuffer<uint16_t> d;
  DeviceBuffer<int32_t> dpos, dlong;
  DeviceBuffer<float> dfreq, dfreq_long;
  ASTR_GPU_CHECK(UploadBf16(rows, &d));
  ASTR_GPU_CHECK(dpos.Upload(pos));
  ASTR_GPU_CHECK(dfreq.Upload(inv_freq));
  cuda::RopeMore dmore;
  dmore.scale = scale;
  if (longrope) {
    ASTR_GPU_CHECK(dlong.Upload(use_long32));
    ASTR_GPU_CHECK(dfreq_long.Upload(inv_freq_long));
    dmore.inv_freq_long = dfreq_long.get(), dmore.use_long = dlong.get();
  }
  ASTR_GPU_CHECK(cuda::LaunchRope(Ptr(d), stride, t, heads, head_dim, rope_dim, dpos.get(),
                                  dfreq.get(), interleaved, nullptr, dmore));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits;
  ASTR_GPU_CHECK(d.Download(&bits));
  // Rotated dims: bf16 rounding plus 2^-22 (|xa| + |xb| <= 4) for fused vs unfused f32 rotation
  // and a last-bit difference in cos / sin. Everything else (dims >= rope_dim, the extra heads)
  // must be untouched.
  std::vector<double> abs(want.size(), -1.0);
  for (int r = 0; r < t; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < rope_dim; ++i) abs[r * stride + h * head_dim + i] = 4.0 / (1 << 22);
    }
  }
  return Bounded(FromBf16(bits), want, kBf16Rel, abs);
}

// ---------------------------------------------------------------------------------------------
// SiLU * mul, bias add, sigmoid gate.

// A gated activation (`launch` on the device, `cpu` the reference) on T x ffn random bf16 rows.
template <typename Cpu, typename Launch>
CaseResult RunGatedAct(int t, int ffn, uint64_t seed, Cpu cpu, Launch launch) {
  const std::vector<float> gu =
      RoundBf16(RandomVector(int64_t{t} * 2 * ffn, seed + ffn, -4.0f, 4.0f));
  std::vector<float> want(int64_t{t} * ffn);
  cpu(gu.data(), t, ffn, want.data(), ffn);
  DeviceBuffer<uint16_t> din, dout(want.size());
  ASTR_GPU_CHECK(UploadBf16(gu, &din));
  ASTR_GPU_CHECK(launch(Ptr(din), t, ffn, Ptr(dout), nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits;
  ASTR_GPU_CHECK(dout.Download(&bits));
  // The same f32 formula, expf within 2 ulp: the result moves by <= ~1e-6 relative; 1e-6
  // absolute covers |out| < 16.
  return Bounded(FromBf16(bits), want, kBf16Rel + 1e-6, std::vector<double>(want.size(), 1e-6));
}

CaseResult RunSiluMul(int t, int ffn) {
  return RunGatedAct(t, ffn, 41, cpu::SiluMul, cuda::LaunchSiluMul);
}

CaseResult RunGeluTanhMul(int t, int ffn) {
  return RunGatedAct(t, ffn, 43, cpu::GeluTanhMul, cuda::LaunchGeluTanhMul);
}

// gpt-oss's clamped SwiGLU at its released constants and at a limit that clamps most values
// (gate and up are drawn from [-4, 4)).
CaseResult RunSwigluClamped(int t, int ffn, float limit) {
  return RunGatedAct(
      t, ffn, 47,
      [limit](const float* gu, int64_t tokens, int64_t f, float* out, int64_t ldo) {
        cpu::SwigluClampedMul(gu, tokens, f, 1.702f, limit, out, ldo);
      },
      [limit](const bf16* gu, int tokens, int f, bf16* out, cudaStream_t s) {
        return cuda::LaunchSwigluClampedMul(gu, tokens, f, 1.702f, limit, out, s);
      });
}

// f32 rows += an f32 bias (o_proj's and the router's in gpt-oss): the same single f32 add.
CaseResult RunAddBiasF32(int t, int cols, int64_t stride) {
  const std::vector<float> rows = RandomVector(t * stride, 53 + cols, -3.0f, 3.0f);
  const std::vector<float> bias = RandomVector(cols, 54, -1.0f, 1.0f);
  std::vector<float> want = rows;
  for (int r = 0; r < t; ++r) cpu::AddInPlace(want.data() + r * stride, bias.data(), cols);
  DeviceBuffer<float> d, db;
  ASTR_GPU_CHECK(d.Upload(rows));
  ASTR_GPU_CHECK(db.Upload(bias));
  ASTR_GPU_CHECK(cuda::LaunchAddBiasF32(d.get(), stride, t, cols, db.get(), nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> got;
  ASTR_GPU_CHECK(d.Download(&got));
  return Exact(got, want);
}

CaseResult RunAddBias(int t, int cols, int64_t stride) {
  const std::vector<float> rows = RoundBf16(RandomVector(t * stride, 51 + cols, -3.0f, 3.0f));
  const std::vector<float> bias = RandomVector(cols, 52, -1.0f, 1.0f);
  std::vector<float> want = rows;
  for (int r = 0; r < t; ++r) cpu::AddInPlace(want.data() + r * stride, bias.data(), cols);
  // The CPU's f32 sums rounded to bf16 once: the GPU does the same f32 add and the same rounding.
  std::vector<float> want_bf16 = want;
  for (int r = 0; r < t; ++r) {
    for (int c = 0; c < cols; ++c) {
      want_bf16[r * stride + c] = model::Bf16ToF32(model::F32ToBf16(want[r * stride + c]));
    }
  }
  DeviceBuffer<uint16_t> d;
  DeviceBuffer<float> db;
  ASTR_GPU_CHECK(UploadBf16(rows, &d));
  ASTR_GPU_CHECK(db.Upload(bias));
  ASTR_GPU_CHECK(cuda::LaunchAddBias(Ptr(d), stride, t, cols, db.get(), nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits;
  ASTR_GPU_CHECK(d.Download(&bits));
  return Exact(FromBf16(bits), want_bf16);
}

CaseResult RunSigmoidGate(int t, int cols) {
  const int64_t attn_stride = cols + 8, gate_stride = 3 * int64_t{cols};
  const std::vector<float> attn = RoundBf16(RandomVector(t * attn_stride, 61, -2.0f, 2.0f));
  const std::vector<float> gate = RoundBf16(RandomVector(t * gate_stride, 62, -6.0f, 6.0f));
  std::vector<float> want = attn;
  std::vector<double> abs(want.size(), -1.0);
  for (int r = 0; r < t; ++r) {
    for (int c = 0; c < cols; ++c) {
      // The CPU backend's expression (cpu_backend.cc, gated attention).
      float& a = want[r * attn_stride + c];
      a *= 1.0f / (1.0f + std::exp(-gate[r * gate_stride + c]));
      abs[r * attn_stride + c] = 1e-6;
    }
  }
  DeviceBuffer<uint16_t> da, dg;
  ASTR_GPU_CHECK(UploadBf16(attn, &da));
  ASTR_GPU_CHECK(UploadBf16(gate, &dg));
  ASTR_GPU_CHECK(
      cuda::LaunchSigmoidGate(Ptr(da), attn_stride, Ptr(dg), gate_stride, t, cols, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits;
  ASTR_GPU_CHECK(da.Download(&bits));
  return Bounded(FromBf16(bits), want, kBf16Rel + 1e-6, abs);
}

// RMSNorm of f32 rows in place (sandwich norms) against cpu::RmsNorm: the same formula, the sum of
// squares reduced in another order.
CaseResult RunRmsNormRows(int t, int hidden) {
  const int64_t n = int64_t{t} * hidden;
  const std::vector<float> x = RandomVector(n, 21 + hidden, -3.0f, 3.0f);
  const std::vector<float> w = RandomVector(hidden, 22 + hidden, 0.5f, 1.5f);
  std::vector<float> want(n);
  cpu::RmsNorm(x.data(), hidden, w.data(), kEps, t, hidden, want.data(), hidden);
  DeviceBuffer<float> dx, dw;
  ASTR_GPU_CHECK(dx.Upload(x));
  ASTR_GPU_CHECK(dw.Upload(w));
  ASTR_GPU_CHECK(cuda::LaunchRmsNormRows(dx.get(), dw.get(), kEps, t, hidden, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> got;
  ASTR_GPU_CHECK(dx.Download(&got));
  return Bounded(got, want, 1e-5, std::vector<double>(n, 1e-6));
}

// Final logit soft-capping in place against cap * std::tanh(x / cap) on float (the CPU backend's).
CaseResult RunSoftcap(int64_t n, float cap) {
  std::vector<float> x = RandomVector(n, 31 + n, -200.0f, 200.0f);
  std::vector<float> want = x;
  for (float& v : want) v = cap * std::tanh(v / cap);
  DeviceBuffer<float> dx;
  ASTR_GPU_CHECK(dx.Upload(x));
  ASTR_GPU_CHECK(cuda::LaunchSoftcap(dx.get(), n, cap, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> got;
  ASTR_GPU_CHECK(dx.Download(&got));
  return Bounded(got, want, 1e-6, std::vector<double>(n, 1e-5));
}

// ---------------------------------------------------------------------------------------------
// Gathers: bit-exact.

// The scale is applied to the f32 value as the CPU backend does (x[i] *= scale after the gather).
CaseResult RunEmbeddingGather(int t, int hidden, float scale) {
  const int vocab = 1000;
  const std::vector<float> table = RoundBf16(RandomVector(int64_t{vocab} * hidden, 71, -1, 1));
  std::vector<int32_t> ids(t);
  for (int i = 0; i < t; ++i) ids[i] = (i * 7919 + 3) % vocab;
  ids[0] = vocab - 1;
  std::vector<float> want(int64_t{t} * hidden);
  for (int i = 0; i < t; ++i) {
    std::memcpy(&want[int64_t{i} * hidden], &table[int64_t{ids[i]} * hidden],
                hidden * sizeof(float));
  }
  for (float& v : want) v *= scale;
  DeviceBuffer<uint16_t> dt;
  DeviceBuffer<int32_t> di;
  DeviceBuffer<float> dout(want.size());
  ASTR_GPU_CHECK(UploadBf16(table, &dt));
  ASTR_GPU_CHECK(di.Upload(ids));
  ASTR_GPU_CHECK(
      cuda::LaunchEmbeddingGather(Ptr(dt), di.get(), t, hidden, scale, dout.get(), nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> got;
  ASTR_GPU_CHECK(dout.Download(&got));
  return Exact(got, want);
}

// Rows [0, t) of `in`; output row i takes in[(i * 5) % t], every fourth is padding (-1 -> zeros).
// The output has 8 spare columns per row that must stay as they were (NaN).
CaseResult RunGatherRows(int t, int cols) {
  const int64_t in_stride = cols + 3, out_stride = cols + 8;
  const std::vector<float> in = RoundBf16(RandomVector(t * in_stride, 81, -1, 1));
  std::vector<int32_t> rows(t);
  for (int i = 0; i < t; ++i) rows[i] = i % 4 == 3 ? -1 : (i * 5) % t;
  std::vector<float> want(t * out_stride, NAN);
  for (int i = 0; i < t; ++i) {
    for (int c = 0; c < cols; ++c) {
      want[i * out_stride + c] = rows[i] < 0 ? 0.0f : in[rows[i] * in_stride + c];
    }
  }
  DeviceBuffer<uint16_t> din, dout;
  DeviceBuffer<int32_t> dr;
  ASTR_GPU_CHECK(UploadBf16(in, &din));
  ASTR_GPU_CHECK(dout.Upload(std::vector<uint16_t>(want.size(), 0x7fc0)));  // NaN
  ASTR_GPU_CHECK(dr.Upload(rows));
  ASTR_GPU_CHECK(cuda::LaunchGatherRows(Ptr(din), in_stride, dr.get(), t, cols, Ptr(dout),
                                        out_stride, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits;
  ASTR_GPU_CHECK(dout.Download(&bits));
  return Exact(FromBf16(bits), want);
}

// Aligned variant: strides multiples of 8 (the 16-byte path).
CaseResult RunGatherRowsAligned(int t, int cols) {
  const std::vector<float> in = RoundBf16(RandomVector(int64_t{t} * cols, 82, -1, 1));
  std::vector<int32_t> rows(t);
  for (int i = 0; i < t; ++i) rows[i] = i % 4 == 3 ? -1 : t - 1 - i;
  std::vector<float> want(int64_t{t} * cols);
  for (int i = 0; i < t; ++i) {
    for (int c = 0; c < cols; ++c) {
      want[int64_t{i} * cols + c] = rows[i] < 0 ? 0.0f : in[int64_t{rows[i]} * cols + c];
    }
  }
  DeviceBuffer<uint16_t> din, dout;
  DeviceBuffer<int32_t> dr;
  ASTR_GPU_CHECK(UploadBf16(in, &din));
  ASTR_GPU_CHECK(dout.Upload(std::vector<uint16_t>(want.size(), 0x7fc0)));
  ASTR_GPU_CHECK(dr.Upload(rows));
  ASTR_GPU_CHECK(
      cuda::LaunchGatherRows(Ptr(din), cols, dr.get(), t, cols, Ptr(dout), cols, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits;
  ASTR_GPU_CHECK(dout.Download(&bits));
  return Exact(FromBf16(bits), want);
}

// Arguments the kernels cannot handle are refused before any launch.
CaseResult RunInvalidArguments() {
  struct Check {
    const char* what;
    cudaError_t got;
  };
  const Check checks[] = {
      {"rope odd rope_dim",
       cuda::LaunchRope(nullptr, 64, 1, 1, 64, 63, nullptr, nullptr, false, nullptr)},
      {"rope rope_dim > head_dim",
       cuda::LaunchRope(nullptr, 64, 1, 1, 64, 128, nullptr, nullptr, false, nullptr)},
      {"rope stride < heads * head_dim",
       cuda::LaunchRope(nullptr, 100, 1, 2, 64, 64, nullptr, nullptr, false, nullptr)},
      {"rope use_long without inv_freq_long",
       cuda::LaunchRope(nullptr, 64, 1, 1, 64, 64, nullptr, nullptr, false, nullptr,
                        {1.0f, nullptr, reinterpret_cast<const int32_t*>(&kEps)})},
      {"rms hidden 0",
       cuda::LaunchAddRmsNorm(nullptr, nullptr, nullptr, kEps, 1, 0, nullptr, nullptr)},
      {"gather stride < cols",
       cuda::LaunchGatherRows(nullptr, 4, nullptr, 1, 8, nullptr, 8, nullptr)},
  };
  for (const Check& c : checks) {
    if (c.got != cudaErrorInvalidValue) {
      return Fail(std::string(c.what) + ": " + cudaGetErrorString(c.got));
    }
  }
  // Zero tokens: nothing launched, success.
  if (cuda::LaunchSiluMul(nullptr, 0, 64, nullptr, nullptr) != cudaSuccess) {
    return Fail("silu_mul with 0 tokens did not return cudaSuccess");
  }
  cudaGetLastError();
  return Pass(0, 0);
}

void Add(std::string op, std::string shape, std::function<CaseResult()> run) {
  RegisterCase({std::move(op), std::move(shape), std::move(run)});
}

void RegisterOpsCases() {
  for (int t : kTokens) {
    for (int hidden : {64, 576, 4096, 5120, 30}) {
      for (bool delta : {true, false}) {
        Add(delta ? "add_rms_norm" : "rms_norm", Fmt("T=%lld hidden=%lld", t, hidden),
            [=] { return RunAddRmsNorm(t, hidden, delta, 0); });
      }
    }
    Add("add_rms_norm", Fmt("T=%lld hidden=4096 offset=1", t),
        [=] { return RunAddRmsNorm(t, 4096, true, 1); });
    for (int hd : {64, 128}) {
      Add("head_rms_norm", Fmt("T=%lld heads=5 hd=%lld", t, hd),
          [=] { return RunHeadRmsNorm(t, 5, hd); });
      for (int rope_dim : {hd, hd / 2}) {
        for (bool inter : {false, true}) {
          const char* layout = inter ? "interleaved" : "neox";
          Add("rope",
              Fmt("T=%lld heads=3 hd=%lld rope=%lld ", t, hd, rope_dim) + layout + " pos<=100000",
              [=] { return RunRope(t, 3, hd, rope_dim, inter, 100000); });
        }
        Add("rope",
            Fmt("T=%lld heads=3 hd=%lld rope=%lld neox longrope pos<=8192", t, hd, rope_dim),
            [=] { return RunRope(t, 3, hd, rope_dim, false, 8192, /*longrope=*/true); });
      }
    }
    for (int ffn : {64, 576, 4096, 5120, 13}) {
      Add("silu_mul", Fmt("T=%lld ffn=%lld", t, ffn), [=] { return RunSiluMul(t, ffn); });
      Add("gelu_tanh_mul", Fmt("T=%lld ffn=%lld", t, ffn), [=] { return RunGeluTanhMul(t, ffn); });
    }
    for (float limit : {7.0f, 0.5f}) {
      Add("swiglu_clamped_mul",
          Fmt("T=%lld ffn=%lld limit=", t, 2880) + (limit == 7.0f ? "7" : "0.5"),
          [=] { return RunSwigluClamped(t, 2880, limit); });
    }
    Add("swiglu_clamped_mul", Fmt("T=%lld ffn=%lld limit=7", t, 13),
        [=] { return RunSwigluClamped(t, 13, 7.0f); });
    Add("add_bias_f32", Fmt("T=%lld cols=2880 stride=2880", t),
        [=] { return RunAddBiasF32(t, 2880, 2880); });
    Add("add_bias_f32", Fmt("T=%lld cols=37 stride=41", t),
        [=] { return RunAddBiasF32(t, 37, 41); });
    Add("add_bias", Fmt("T=%lld cols=4608 stride=4608", t),
        [=] { return RunAddBias(t, 4608, 4608); });
    Add("add_bias", Fmt("T=%lld cols=1000 stride=1003", t),
        [=] { return RunAddBias(t, 1000, 1003); });
    Add("sigmoid_gate", Fmt("T=%lld cols=4096", t), [=] { return RunSigmoidGate(t, 4096); });
    Add("sigmoid_gate", Fmt("T=%lld cols=37", t), [=] { return RunSigmoidGate(t, 37); });
    for (int hidden : {576, 4096, 13}) {
      Add("embedding_gather", Fmt("T=%lld hidden=%lld", t, hidden),
          [=] { return RunEmbeddingGather(t, hidden, 1.0f); });
    }
    Add("embedding_gather", Fmt("T=%lld hidden=640 scale=sqrt(640)", t),
        [=] { return RunEmbeddingGather(t, 640, std::sqrt(640.0f)); });
    Add("softcap", Fmt("n=%lld cap=30", t * 1000), [=] { return RunSoftcap(t * 1000, 30.0f); });
    for (int hidden : {640, 1152, 30}) {
      Add("rms_norm_rows", Fmt("T=%lld hidden=%lld", t, hidden),
          [=] { return RunRmsNormRows(t, hidden); });
    }
    Add("gather_rows", Fmt("T=%lld cols=4096", t), [=] { return RunGatherRowsAligned(t, 4096); });
    Add("gather_rows", Fmt("T=%lld cols=576 strides=579/584", t),
        [=] { return RunGatherRows(t, 576); });
  }
  Add("ops_invalid_arguments", "rope/rms/gather", RunInvalidArguments);
}

}  // namespace

ASTR_GPU_CASES(RegisterOpsCases);

}  // namespace astr::gputest
