// astr-bench-gemm: throughput of the CPU GEMM paths on the model's decode and prefill shapes.
//
// Prints one JSON document: for every shape, m and ISA path, the effective weight read rate (GB/s:
// packed weight bytes / time) and GFLOP/s (2 m n k / time). Weights rotate through enough copies to
// exceed the last-level cache, so decode (small m) figures reflect DRAM streaming as in a real
// step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/base/flags.h"
#include "common/base/logging.h"
#include "common/model/tensor_dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/backends/cpu/quant_format.h"

namespace {

using astr::cpu::Isa;
using astr::cpu::PackedMatrix;

struct Shape {
  int64_t n, k;
};

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  astr::FlagSet fs("astr-bench-gemm",
                   "Benchmark the CPU GEMM kernels (bf16 weights) and print JSON.");
  int64_t threads = 2;
  std::string ms_text = "1,4,16,64,128";
  int64_t cache_mb = 600;
  double min_seconds = 0.3;
  bool f32 = false;
  std::string quant_text;
  std::string shapes_text = "5632x2048,2048x5632,32000x2048";
  fs.Int("threads", &threads, "Threads (including the caller).");
  fs.String("m", &ms_text, "Comma-separated row counts (tokens per call).");
  fs.Int("rotate-mb", &cache_mb,
         "Weights rotated through per shape, in MB (exceed the last-level cache to measure DRAM).");
  fs.Double("min-seconds", &min_seconds, "Minimum timed duration per measurement.");
  fs.Bool("f32", &f32, "Also benchmark f32 weights.");
  fs.String("quant", &quant_text,
            "Comma-separated GGUF block types to benchmark as quantized weights (random quants), "
            "e.g. q4_k,q6_k,q8_0; empty: none.");
  fs.String("shapes", &shapes_text,
            "Comma-separated weight shapes NxK (outputs x inputs); the default is the 0.85B "
            "llama's MLP and output projection.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  (void)astr::InitLogging(argv[0], astr::LogOptions());
  auto ms = astr::ParseIntList(ms_text, "m");
  if (!ms.ok()) {
    std::fprintf(stderr, "%s\n", ms.status().ToString().c_str());
    return 2;
  }

  astr::cpu::ThreadPool pool(static_cast<int>(threads));
  std::vector<Shape> shapes;
  for (size_t b = 0, e; b < shapes_text.size(); b = e + 1) {
    e = shapes_text.find(',', b);
    if (e == std::string::npos) e = shapes_text.size();
    const std::string item = shapes_text.substr(b, e - b);
    long long n = 0, k = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lldx%lld%c", &n, &k, &tail) != 2 || n <= 0 || k <= 0) {
      std::fprintf(stderr, "--shapes: '%s' is not NxK with positive N and K\n", item.c_str());
      return 2;
    }
    shapes.push_back({n, k});
  }
  // "bf16", "f32", then the block types.
  std::vector<std::string> types = {"bf16"};
  if (f32) types.push_back("f32");
  for (size_t b = 0, e; b < quant_text.size(); b = e + 1) {
    e = quant_text.find(',', b);
    if (e == std::string::npos) e = quant_text.size();
    auto dtype = astr::model::ParseDType(quant_text.substr(b, e - b));
    if (!dtype.ok() || !astr::model::QuantLayoutOf(*dtype)) {
      std::fprintf(stderr, "--quant: '%s' is not a GGUF block type\n",
                   quant_text.substr(b, e - b).c_str());
      return 2;
    }
    types.push_back(quant_text.substr(b, e - b));
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);

  std::printf("{\n  \"threads\": %lld,\n  \"detected_isa\": \"%s\",\n  \"results\": [",
              static_cast<long long>(threads), astr::cpu::IsaName(astr::cpu::DetectIsa()));
  bool first = true;
  for (const std::string& type : types) {
    for (const Shape& s : shapes) {
      std::vector<float> w(s.n * s.k);
      for (float& v : w) v = dist(rng);
      auto make = [&]() {
        if (type == "bf16" || type == "f32") {
          return PackedMatrix::FromF32(
              w.data(), s.n, s.k,
              type == "f32" ? astr::cpu::WeightType::kF32 : astr::cpu::WeightType::kBF16, &pool);
        }
        const astr::cpu::QuantFormat fmt = astr::QuantKernelFormat(*astr::model::ParseDType(type));
        const int max_q = (1 << fmt.bits) - 1;
        return PackedMatrix::FromQuantRows(
            s.n, s.k, fmt,
            [&](int64_t r, const astr::cpu::QuantRowOut& out) {
              for (int64_t c = 0; c < s.k; ++c)
                out.q[c] = static_cast<uint8_t>((r * 7 + c * 13) % (max_q + 1));
              for (int64_t b = 0; b < s.k / fmt.sub; ++b) {  // 0.01 and -0.05 in f16 terms
                if (fmt.super) {
                  out.sc[b] = 5;
                  if (out.m != nullptr) out.m[b] = 25;
                } else {
                  out.scale[b] = 0.01f;
                  if (out.min != nullptr) out.min[b] = -0.05f;
                }
              }
              for (int64_t u = 0; fmt.super && u < s.k / 256; ++u) {
                out.d[u] = 0.001953125f;
                if (out.dmin != nullptr) out.dmin[u] = -0.001953125f;
              }
              for (int64_t b = 0; fmt.super && b < s.k / fmt.sub; ++b) {
                out.scale[b] = out.d[0] * out.sc[b];
                if (out.min != nullptr) out.min[b] = out.dmin[0] * out.m[b];
              }
            },
            &pool);
      };
      std::vector<PackedMatrix> copies;
      copies.push_back(make());
      const size_t bytes = copies[0].bytes();
      const size_t num_copies = std::max<size_t>(1, cache_mb * (size_t{1} << 20) / bytes);
      while (copies.size() < num_copies) copies.push_back(make());
      const int64_t max_m = *std::max_element(ms.value().begin(), ms.value().end());
      std::vector<float> x(max_m * s.k), y(max_m * s.n);
      for (float& v : x) v = dist(rng);
      for (Isa isa : astr::cpu::AvailableIsas()) {
        for (int64_t m : ms.value()) {
          if (isa == Isa::kScalar && m > 1)
            continue;  // the reference path is minutes-slow at large m
          size_t c = 0;
          astr::cpu::GemmIsa(isa, x.data(), s.k, m, copies[c], y.data(), s.n, false,
                             &pool);  // warm
          int64_t iters = 0;
          const double t0 = Seconds();
          double t1 = t0;
          while (t1 - t0 < min_seconds || iters < 3) {
            c = (c + 1) % copies.size();
            astr::cpu::GemmIsa(isa, x.data(), s.k, m, copies[c], y.data(), s.n, false, &pool);
            ++iters;
            t1 = Seconds();
          }
          const double per_call = (t1 - t0) / iters;
          std::printf(
              "%s\n    {\"weights\": \"%s\", \"n\": %lld, \"k\": %lld, \"m\": %lld, "
              "\"isa\": \"%s\", \"us_per_call\": %.1f, \"gb_per_s\": %.2f, "
              "\"gflop_per_s\": %.2f}",
              first ? "" : ",", type.c_str(), static_cast<long long>(s.n),
              static_cast<long long>(s.k), static_cast<long long>(m), astr::cpu::IsaName(isa),
              per_call * 1e6, bytes / per_call / 1e9, 2.0 * m * s.n * s.k / per_call / 1e9);
          std::fflush(stdout);
          first = false;
        }
      }
    }
  }
  std::printf("\n  ]\n}\n");
  return 0;
}
