// The GPU op-table runner: runs every registered case (or those matching --filter) and prints one
// line per case; exits 0 if none failed, 1 otherwise, 77 (ctest: skipped) without a usable GPU.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/gpu/op_test.h"

namespace astr::gputest {

std::vector<OpCase>& Registry() {
  static std::vector<OpCase> cases;
  return cases;
}
void RegisterCase(OpCase c) { Registry().push_back(std::move(c)); }

CaseResult Pass(double max_err, double tol) { return {CaseResult::kPass, max_err, tol, ""}; }
CaseResult Fail(std::string detail, double max_err, double tol) {
  return {CaseResult::kFail, max_err, tol, std::move(detail)};
}
CaseResult Unsupported(std::string why) { return {CaseResult::kUnsupported, 0, 0, std::move(why)}; }

double MaxAbsDiff(const float* a, const float* b, int64_t n, int64_t* worst) {
  double m = 0.0;
  int64_t w = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (d > m || std::isnan(d)) {
      m = std::isnan(d) ? INFINITY : d;
      w = i;
    }
  }
  if (worst != nullptr) *worst = w;
  return m;
}

CaseResult Compare(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  if (got.size() != want.size()) {
    return Fail("size " + std::to_string(got.size()) + " != " + std::to_string(want.size()));
  }
  int64_t worst = 0;
  const double err = MaxAbsDiff(got.data(), want.data(), static_cast<int64_t>(got.size()), &worst);
  if (err <= tol) return Pass(err, tol);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "worst at %lld: got %.6g want %.6g",
                static_cast<long long>(worst), got.empty() ? 0.0 : got[worst],
                want.empty() ? 0.0 : want[worst]);
  return Fail(buf, err, tol);
}

std::string FirstBitDiff(const char* what, const std::vector<uint16_t>& got,
                         const std::vector<uint16_t>& want, int64_t slot_elems) {
  if (got.size() != want.size()) return std::string(what) + ": size differs";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s: slot %lld element %lld is 0x%04x, want 0x%04x", what,
                  static_cast<long long>(i / slot_elems), static_cast<long long>(i % slot_elems),
                  got[i], want[i]);
    return buf;
  }
  return "";
}

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = model::F32ToBf16(x[i]);
  return out;
}
std::vector<float> FromBf16(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = model::Bf16ToF32(x[i]);
  return out;
}
std::vector<float> RoundBf16(const std::vector<float>& x) { return FromBf16(ToBf16(x)); }

std::vector<float> RandomVector(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::string SharedPath(const std::string& relative) {
  const char* env = std::getenv("ASTR_SHARED_DIR");
  std::string dir = env != nullptr && *env != '\0' ? env : ASTR_DEFAULT_SHARED_DIR;
  return dir + "/" + relative;
}

}  // namespace astr::gputest

// ASTR_OP_TEST_NO_MAIN: the helpers above only (tests that reuse the fixtures).
#ifndef ASTR_OP_TEST_NO_MAIN
namespace {

const char* KindName(astr::gputest::CaseResult::Kind k) {
  switch (k) {
    case astr::gputest::CaseResult::kPass:
      return "pass";
    case astr::gputest::CaseResult::kFail:
      return "FAIL";
    case astr::gputest::CaseResult::kUnsupported:
      return "unsupported";
  }
  return "?";
}

int Usage() {
  using astr::gputest::kEmulated;
  std::printf(
      "Usage: %s [--filter SUBSTRING] [--json PATH] [--list] [--stop-on-failure]\n"
      "Runs the CUDA op table%s: every kernel (and the whole CUDA backend) against the CPU "
      "backend.\n"
      "  --filter S  run only the cases whose name contains S\n"
      "  --json P    also write the results as JSON to P\n"
      "  --list      print the case names and exit\n"
      "  --stop-on-failure  stop at the first failed case (scripts/emu_mutations.sh)\n"
      "Exit status: 0 all passed, 1 a case failed, %s2 usage error.\n",
      kEmulated ? "astr-test-backend-ops-emu" : "astr-test-backend-ops",
      kEmulated ? " on the emulated CUDA device (kernels/cuda/emu; ASTR_CUDA_EMU_PROFILE picks "
                  "the device profile)"
                : "",
      kEmulated ? "" : "77 no usable GPU (skipped), ");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace astr::gputest;
  std::string filter, json_path;
  bool list = false, stop_on_failure = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return Usage();
    if (arg == "--list") {
      list = true;
    } else if (arg == "--stop-on-failure") {
      stop_on_failure = true;
    } else if ((arg == "--filter" || arg == "--json") && i + 1 < argc) {
      (arg == "--filter" ? filter : json_path) = argv[++i];
    } else {
      std::fprintf(stderr, "unknown argument '%s' (see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (list) {
    for (const OpCase& c : Registry()) std::printf("%s\n", c.name().c_str());
    return 0;
  }
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("skipped: no usable GPU (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  nlohmann::json report = {{"device", prop.name}, {"cases", nlohmann::json::array()}};
  int passed = 0, failed = 0, unsupported = 0;
  for (const OpCase& c : Registry()) {
    const std::string name = c.name();
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    const auto t0 = std::chrono::steady_clock::now();
    CaseResult r;
    try {
      r = c.run();
    } catch (const std::exception& e) {
      r = Fail(std::string("exception: ") + e.what());
    }
    // A sticky CUDA error (illegal address) poisons every later case: report it and stop.
    const cudaError_t sticky = cudaDeviceSynchronize();
    if (sticky != cudaSuccess && r.kind != CaseResult::kFail) {
      r = Fail(std::string("device error after the case: ") + cudaGetErrorString(sticky));
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    (r.kind == CaseResult::kPass ? passed : r.kind == CaseResult::kFail ? failed : unsupported)++;
    std::printf("%-12s %s  err=%.3g tol=%.3g  %.1f ms%s%s\n", KindName(r.kind), name.c_str(),
                r.max_err, r.tol, ms, r.detail.empty() ? "" : "  ", r.detail.c_str());
    std::fflush(stdout);
    report["cases"].push_back({{"name", name},
                               {"result", KindName(r.kind)},
                               {"max_err", r.max_err},
                               {"tol", r.tol},
                               {"ms", ms},
                               {"detail", r.detail}});
    if (sticky != cudaSuccess) {
      std::printf("stopping: the device is in an error state\n");
      break;
    }
    if (stop_on_failure && r.kind == CaseResult::kFail) {
      std::printf("stopping at the first failure (--stop-on-failure)\n");
      break;
    }
  }
  std::printf("%d passed, %d failed, %d unsupported\n", passed, failed, unsupported);
  report["passed"] = passed;
  report["failed"] = failed;
  report["unsupported"] = unsupported;
  if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
  return failed == 0 ? 0 : 1;
}
#endif  // ASTR_OP_TEST_NO_MAIN
