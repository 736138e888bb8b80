// Op-table cases of the mixture-of-experts kernels (kernels/cuda/moe.h), each against the CPU
// backend's own routine (cpu::RouteTopK) or a plain reference written here:
//   moe_route        experts must be the CPU's exactly (both pick by the logits, ties to the lower
//                    expert), weights within 4 ulp-ish (2e-6 relative: CUDA's expf is <= 2 ulp
//                    from the CPU's, and a few f32 divisions follow);
//   moe_sort         the counting sort, slots and tile table must equal a reference sort exactly;
//   grouped_matmul   each tile's rows times its expert's weights against a double-precision
//                    product of the same bf16 values: f32 accumulation over k terms (<= k * 2^-24
//                    of the sum of |terms|), plus half a bf16 spacing for a bf16 output;
//   moe_combine      the same fma's in the same (expert) order as the CPU's Axpy: bit-exact;
//   add_shared_expert  Qwen2-MoE's gated shared expert against a double-precision gate.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/moe.h"
#include "tests/gpu/op_test.h"

namespace astr::gputest {
namespace {

using cuda::bf16;

std::string Shape(const char* fmt, long long a, long long b = 0, long long c = 0, long long d = 0) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), fmt, a, b, c, d);
  return buf;
}

// Each row's experts, from the CPU routine: picks spread over the experts by random logits.
std::vector<int32_t> RandomChoices(int tokens, int experts, int top_k, uint64_t seed,
                                   std::vector<float>* weights = nullptr) {
  const std::vector<float> logits = RandomVector(int64_t{tokens} * experts, seed, -4.0f, 4.0f);
  std::vector<int32_t> chosen(static_cast<size_t>(tokens) * top_k);
  std::vector<float> w(chosen.size());
  for (int t = 0; t < tokens; ++t) {
    cpu::RouteTopK(logits.data() + int64_t{t} * experts, experts, top_k, true,
                   chosen.data() + t * top_k, w.data() + t * top_k);
  }
  if (weights != nullptr) *weights = w;
  return chosen;
}

// The kernel's routing of `logits` with `p` (choice bias given on the host) against
// cpu::RouteTopK's: experts exactly (both pick by the same scores, ties to the lower expert),
// weights within 2e-6 relative (CUDA's expf is <= 2 ulp from the CPU's, a few f32 ops follow).
CaseResult CheckRoute(const std::vector<float>& logits, int tokens, moe::RouteParams p) {
  const int experts = p.num_experts, top_k = p.top_k;
  std::vector<int32_t> want_e(static_cast<size_t>(tokens) * top_k);
  std::vector<float> want_w(want_e.size());
  for (int t = 0; t < tokens; ++t) {
    cpu::RouteTopK(logits.data() + int64_t{t} * experts, p, want_e.data() + t * top_k,
                   want_w.data() + t * top_k);
  }
  DeviceBuffer<float> dl, db, dw(want_w.size());
  DeviceBuffer<int32_t> de(want_e.size());
  ASTR_GPU_CHECK(dl.Upload(logits));
  if (p.choice_bias != nullptr) {
    ASTR_GPU_CHECK(db.Upload(std::vector<float>(p.choice_bias, p.choice_bias + experts)));
    p.choice_bias = db.get();
  }
  ASTR_GPU_CHECK(cuda::LaunchMoeRoute(dl.get(), tokens, p, de.get(), dw.get(), nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> got_e;
  std::vector<float> got_w;
  ASTR_GPU_CHECK(de.Download(&got_e));
  ASTR_GPU_CHECK(dw.Download(&got_w));
  if (got_e != want_e) return Fail("experts differ from cpu::RouteTopK's");
  double worst = 0;
  for (size_t i = 0; i < want_w.size(); ++i) {
    worst = std::max(worst, std::fabs(got_w[i] - want_w[i]) / (2e-6 * want_w[i] + 1e-12));
  }
  return worst <= 1.0 ? Pass(worst, 1.0) : Fail("weights", worst, 1.0);
}

CaseResult RunRoute(int tokens, int experts, int top_k, bool normalize) {
  moe::RouteParams p;
  p.num_experts = experts, p.top_k = top_k, p.normalize = normalize;
  return CheckRoute(RandomVector(int64_t{tokens} * experts, 101 + experts, -6.0f, 6.0f), tokens, p);
}

// DeepSeek-V3 / GLM-4.5 routing: sigmoid scores, a choice bias, expert groups, a scale.
CaseResult RunSigmoidRoute(int tokens, int experts, int top_k, int groups, int topk_groups) {
  const std::vector<float> bias = RandomVector(experts, 212, -0.3f, 0.3f);
  moe::RouteParams p;
  p.num_experts = experts, p.top_k = top_k, p.sigmoid = true, p.normalize = true;
  p.scale = 2.5f, p.choice_bias = bias.data(), p.groups = groups, p.topk_groups = topk_groups;
  return CheckRoute(RandomVector(int64_t{tokens} * experts, 211 + experts, -6.0f, 6.0f), tokens, p);
}

CaseResult RunSort(int tokens, int experts, int top_k) {
  const std::vector<int32_t> chosen = RandomChoices(tokens, experts, top_k, 7 + tokens);
  const int pairs = tokens * top_k;
  const int max_tiles = static_cast<int>(cuda::MoeMaxTiles(pairs, experts));
  // Reference: pairs in (expert, pair) order; tiles of kMoeTileRows per expert.
  std::vector<int32_t> order(pairs);
  for (int p = 0; p < pairs; ++p) order[p] = p;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return chosen[a] < chosen[b]; });
  std::vector<int32_t> want_row(pairs), want_slot(pairs), want_tiles;
  for (int i = 0; i < pairs; ++i) want_row[i] = order[i] / top_k, want_slot[order[i]] = i;
  for (int i = 0; i < pairs;) {
    int end = i;
    while (end < pairs && end - i < cuda::kMoeTileRows && chosen[order[end]] == chosen[order[i]]) {
      ++end;
    }
    want_tiles.insert(want_tiles.end(), {chosen[order[i]], i, end});
    i = end;
  }
  while (static_cast<int>(want_tiles.size()) < 3 * max_tiles) {
    want_tiles.insert(want_tiles.end(), {-1, 0, 0});
  }
  DeviceBuffer<int32_t> dc, drow(pairs), dslot(pairs), dtiles(3 * max_tiles);
  ASTR_GPU_CHECK(dc.Upload(chosen));
  ASTR_GPU_CHECK(cuda::LaunchMoeSort(dc.get(), pairs, top_k, experts, drow.get(), dslot.get(),
                                     dtiles.get(), max_tiles, nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> row, slot, tiles;
  ASTR_GPU_CHECK(drow.Download(&row));
  ASTR_GPU_CHECK(dslot.Download(&slot));
  ASTR_GPU_CHECK(dtiles.Download(&tiles));
  if (row != want_row) return Fail("pair rows differ");
  if (slot != want_slot) return Fail("slots differ");
  for (int t = 0; t < max_tiles; ++t) {
    const bool used = want_tiles[3 * t] >= 0;
    if (tiles[3 * t] != want_tiles[3 * t] ||
        (used && (tiles[3 * t + 1] != want_tiles[3 * t + 1] ||
                  tiles[3 * t + 2] != want_tiles[3 * t + 2]))) {
      return Fail(Shape("tile %lld is {%lld, %lld, ...}", t, tiles[3 * t], tiles[3 * t + 1]));
    }
  }
  return Pass(0, 0);
}

CaseResult RunGroupedMatmul(int tokens, int experts, int top_k, int n, int k, bool out_f32,
                            bool with_bias = false) {
  const std::vector<int32_t> chosen = RandomChoices(tokens, experts, top_k, 17 + n);
  const int pairs = tokens * top_k;
  const int max_tiles = static_cast<int>(cuda::MoeMaxTiles(pairs, experts));
  const std::vector<float> x = RoundBf16(RandomVector(int64_t{pairs} * k, 18 + k));
  const std::vector<float> w = RoundBf16(RandomVector(int64_t{experts} * n * k, 19 + n));
  // gpt-oss's expert biases: [experts][n] f32, added to the f32 sums.
  const std::vector<float> bias =
      with_bias ? RandomVector(int64_t{experts} * n, 20 + n, -2.0f, 2.0f) : std::vector<float>{};
  DeviceBuffer<int32_t> dc, drow(pairs), dslot(pairs), dtiles(3 * max_tiles);
  DeviceBuffer<uint16_t> dx, dw;
  DeviceBuffer<float> dbias;
  if (with_bias) ASTR_GPU_CHECK(dbias.Upload(bias));
  ASTR_GPU_CHECK(dc.Upload(chosen));
  ASTR_GPU_CHECK(dx.Upload(ToBf16(x)));
  ASTR_GPU_CHECK(dw.Upload(ToBf16(w)));
  ASTR_GPU_CHECK(cuda::LaunchMoeSort(dc.get(), pairs, top_k, experts, drow.get(), dslot.get(),
                                     dtiles.get(), max_tiles, nullptr));
  const int64_t ldy = n + 3;
  DeviceBuffer<float> yf(static_cast<size_t>(pairs) * ldy);
  DeviceBuffer<uint16_t> yb(static_cast<size_t>(pairs) * ldy);
  void* y = out_f32 ? static_cast<void*>(yf.get()) : static_cast<void*>(yb.get());
  ASTR_GPU_CHECK(cuda::LaunchGroupedMatmul(
      reinterpret_cast<const bf16*>(dx.get()), k, reinterpret_cast<const bf16*>(dw.get()),
      dtiles.get(), max_tiles, n, k, y, ldy, out_f32, nullptr, with_bias ? dbias.get() : nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> got;
  if (out_f32) {
    ASTR_GPU_CHECK(yf.Download(&got));
  } else {
    std::vector<uint16_t> bits;
    ASTR_GPU_CHECK(yb.Download(&bits));
    got = FromBf16(bits);
  }
  // Row i of x is sorted pair i: its expert is that of the pair the sort put there.
  std::vector<int32_t> slot;
  ASTR_GPU_CHECK(dslot.Download(&slot));
  std::vector<int32_t> expert_of(pairs);
  for (int p = 0; p < pairs; ++p) expert_of[slot[p]] = chosen[p];
  double worst = 0;
  for (int i = 0; i < pairs; ++i) {
    const float* we = w.data() + int64_t{expert_of[i]} * n * k;
    for (int c = 0; c < n; ++c) {
      double sum = with_bias ? bias[int64_t{expert_of[i]} * n + c] : 0.0, mag = std::fabs(sum);
      for (int q = 0; q < k; ++q) {
        const double term = double(x[int64_t{i} * k + q]) * we[int64_t{c} * k + q];
        sum += term, mag += std::fabs(term);
      }
      const double bound =
          k * std::ldexp(1.0, -24) * mag + (out_f32 ? 0.0 : 1.01 * std::fabs(sum) / 256.0) + 1e-30;
      worst = std::max(worst, std::fabs(got[int64_t{i} * ldy + c] - sum) / bound);
    }
  }
  return worst <= 1.0 ? Pass(worst, 1.0) : Fail("grouped product", worst, 1.0);
}

CaseResult RunCombine(int tokens, int experts, int top_k, int cols) {
  std::vector<float> weights;
  const std::vector<int32_t> chosen = RandomChoices(tokens, experts, top_k, 27 + cols, &weights);
  const int pairs = tokens * top_k;
  // Any permutation of the pairs will do as their slots: reverse order.
  std::vector<int32_t> slot(pairs);
  for (int p = 0; p < pairs; ++p) slot[p] = pairs - 1 - p;
  const std::vector<float> y = RandomVector(int64_t{pairs} * cols, 28 + cols, -3.0f, 3.0f);
  std::vector<float> want(static_cast<size_t>(tokens) * cols, 0.0f);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> order(top_k);
    for (int j = 0; j < top_k; ++j) order[j] = j;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return chosen[t * top_k + a] < chosen[t * top_k + b]; });
    for (int j : order) {
      const int p = t * top_k + j;
      for (int c = 0; c < cols; ++c) {
        float& o = want[int64_t{t} * cols + c];
        o = std::fmaf(weights[p], y[int64_t{slot[p]} * cols + c], o);
      }
    }
  }
  DeviceBuffer<float> dy, dw, dout(want.size());
  DeviceBuffer<int32_t> dc, ds;
  ASTR_GPU_CHECK(dy.Upload(y));
  ASTR_GPU_CHECK(dw.Upload(weights));
  ASTR_GPU_CHECK(dc.Upload(chosen));
  ASTR_GPU_CHECK(ds.Upload(slot));
  ASTR_GPU_CHECK(cuda::LaunchMoeCombine(dy.get(), cols, dc.get(), dw.get(), ds.get(), tokens, top_k,
                                        cols, dout.get(), nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> got;
  ASTR_GPU_CHECK(dout.Download(&got));
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return Fail(Shape("element %lld differs", static_cast<long long>(i)));
    }
  }
  return Pass(0, 0);
}

CaseResult RunAddSharedExpert(int tokens, int cols) {
  const std::vector<float> x = RoundBf16(RandomVector(int64_t{tokens} * cols, 41 + cols));
  const std::vector<float> gate = RoundBf16(RandomVector(cols, 42, -0.2f, 0.2f));
  const std::vector<float> y = RandomVector(int64_t{tokens} * cols, 43, -3.0f, 3.0f);
  const std::vector<float> out = RandomVector(int64_t{tokens} * cols, 44, -3.0f, 3.0f);
  // Reference: the gate's dot product in double; the GPU's f32 sum of cols products and its expf
  // move s by <= cols * 2^-24 * sum |x g| * s (1 - s) + a few ulp.
  std::vector<float> want(out.size());
  std::vector<double> bound(out.size());
  for (int t = 0; t < tokens; ++t) {
    double dot = 0, mag = 0;
    for (int c = 0; c < cols; ++c) {
      dot += double(x[int64_t{t} * cols + c]) * gate[c];
      mag += std::fabs(double(x[int64_t{t} * cols + c]) * gate[c]);
    }
    const double s = 1.0 / (1.0 + std::exp(-dot));
    const double ds = (cols * std::ldexp(1.0, -24) * mag + 1e-6) * s * (1 - s) + 4e-7 * s;
    for (int c = 0; c < cols; ++c) {
      const int64_t i = int64_t{t} * cols + c;
      want[i] = static_cast<float>(out[i] + s * y[i]);
      bound[i] = std::fabs(y[i]) * ds + std::ldexp(std::fabs(want[i]), -23);
    }
  }
  DeviceBuffer<uint16_t> dx, dg;
  DeviceBuffer<float> dy, dout;
  ASTR_GPU_CHECK(dx.Upload(ToBf16(x)));
  ASTR_GPU_CHECK(dg.Upload(ToBf16(gate)));
  ASTR_GPU_CHECK(dy.Upload(y));
  ASTR_GPU_CHECK(dout.Upload(out));
  ASTR_GPU_CHECK(cuda::LaunchAddSharedExpert(reinterpret_cast<const bf16*>(dx.get()), cols,
                                             reinterpret_cast<const bf16*>(dg.get()), dy.get(),
                                             tokens, cols, dout.get(), nullptr));
  ASTR_GPU_CHECK(cudaDeviceSynchronize());
  std::vector<float> got;
  ASTR_GPU_CHECK(dout.Download(&got));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - double(want[i])) / bound[i]);
  }
  return worst <= 1.0 ? Pass(worst, 1.0) : Fail("shared expert add", worst, 1.0);
}

CaseResult RunInvalid() {
  const cudaError_t checks[] = {
      cuda::LaunchMoeRoute(nullptr, 1, 4, 5, true, nullptr, nullptr, nullptr),
      cuda::LaunchMoeRoute(nullptr, 1, cuda::kMaxMoeExperts + 1, 2, true, nullptr, nullptr,
                           nullptr),
      cuda::LaunchMoeSort(nullptr, 64, 2, 8, nullptr, nullptr, nullptr, 3, nullptr),
      cuda::LaunchGroupedMatmul(nullptr, 8, nullptr, nullptr, 4, 16, 16, nullptr, 16, true,
                                nullptr),
      cuda::LaunchMoeCombine(nullptr, 4, nullptr, nullptr, nullptr, 1, 2, 8, nullptr, nullptr)};
  for (cudaError_t e : checks) {
    if (e != cudaErrorInvalidValue) return Fail(std::string("accepted: ") + cudaGetErrorString(e));
  }
  cudaGetLastError();
  return Pass(0, 0);
}

void RegisterMoeCases() {
  for (int tokens : {1, 5, 40}) {
    const int t = CaseRows(tokens);
    for (auto [experts, top_k] : {std::pair{8, 2}, std::pair{64, 8}, std::pair{4, 1}}) {
      for (bool norm : {true, false}) {
        RegisterCase({"moe_route", Shape("T=%lld E=%lld k=%lld norm=%lld", t, experts, top_k, norm),
                      [=] { return RunRoute(t, experts, top_k, norm); }});
      }
      RegisterCase({"moe_sort", Shape("T=%lld E=%lld k=%lld", t, experts, top_k),
                    [=] { return RunSort(t, experts, top_k); }});
      RegisterCase({"moe_combine", Shape("T=%lld E=%lld k=%lld cols=96", t, experts, top_k),
                    [=] { return RunCombine(t, experts, top_k, 96); }});
    }
    for (bool f32 : {true, false}) {
      RegisterCase({"grouped_matmul",
                    Shape("T=%lld E=8 top=2 n=96 K=80 out=", t) + (f32 ? "f32" : "bf16"),
                    [=] { return RunGroupedMatmul(t, 8, 2, 96, 80, f32); }});
    }
    RegisterCase({"grouped_matmul", Shape("T=%lld E=16 top=4 n=70 K=33 out=f32", t),
                  [=] { return RunGroupedMatmul(t, 16, 4, 70, 33, true); }});
    for (bool f32 : {false, true}) {
      RegisterCase({"grouped_matmul",
                    Shape("T=%lld E=8 top=3 n=96 K=80 bias out=", t) + (f32 ? "f32" : "bf16"),
                    [=] { return RunGroupedMatmul(t, 8, 3, 96, 80, f32, true); }});
    }
    for (int cols : {96, 2048}) {
      RegisterCase({"add_shared_expert", Shape("T=%lld cols=%lld", t, cols),
                    [=] { return RunAddSharedExpert(t, cols); }});
    }
  }
  // Many pairs of one expert: tiles of kMoeTileRows rows (top-1 of 2 experts).
  RegisterCase({"moe_sort", "T=100 E=2 k=1", [] { return RunSort(100, 2, 1); }});
  for (const auto [experts, top_k, groups, topk_groups] :
       {std::array{8, 2, 4, 2}, std::array{16, 4, 4, 2}, std::array{128, 8, 8, 4},
        std::array{160, 6, 1, 1}}) {
    RegisterCase(
        {"moe_route_sigmoid",
         Shape("T=257 E=%lld k=%lld groups=%lld keep=%lld", experts, top_k, groups, topk_groups),
         [=] { return RunSigmoidRoute(257, experts, top_k, groups, topk_groups); }});
  }
  RegisterCase({"moe_invalid_arguments", "route/sort/gemm/combine", RunInvalid});
}

}  // namespace

ASTR_GPU_CASES(RegisterMoeCases);

}  // namespace astr::gputest
