// Backend choice: --backend / ASTR_BACKEND parsing, auto falling back to the CPU with a reason, an
// explicit cuda that cannot run being an error, and the CUDA plugin loaded at run time (a missing
// or unusable plugin named in the error; the real plugin probed on a machine without a GPU).
#include "worker/backend_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/model/model_file.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

TEST(BackendLoaderTest, ParsesTheThreeKinds) {
  EXPECT_EQ(*ParseBackendKind("auto", "--backend"), BackendKind::kAuto);
  EXPECT_EQ(*ParseBackendKind("cpu", "--backend"), BackendKind::kCpu);
  EXPECT_EQ(*ParseBackendKind("cuda", "--backend"), BackendKind::kCuda);
  auto bad = ParseBackendKind("gpu", "--backend (from ASTR_BACKEND)");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "--backend (from ASTR_BACKEND): 'gpu' is not one of auto, cpu, cuda");
}

TEST(BackendLoaderTest, CpuAndAutoAndCuda) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto file = model::ModelFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  BackendOptions o;
  o.num_pages = 8;
  o.threads = 1;
  auto cpu = CreateBackend(**file, o, BackendKind::kCpu);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)->name(), "cpu");

  const std::string reason = CudaUnavailableReason();
  std::string note = "unset";
  auto chosen = CreateBackend(**file, o, BackendKind::kAuto, &note);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  auto cuda = CreateBackend(**file, o, BackendKind::kCuda);
  if (reason.empty()) {  // a machine with a usable GPU and the plugin
    EXPECT_EQ((*chosen)->name(), "cuda");
    EXPECT_EQ(note, "");
    ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
    EXPECT_EQ((*cuda)->name(), "cuda");
    return;
  }
  EXPECT_EQ((*chosen)->name(), "cpu");
  EXPECT_EQ(note, reason);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cuda.status().message(), "the CUDA backend cannot run: " + reason);
  if (!NvidiaDriverPresent()) {
    EXPECT_NE(reason.find("no NVIDIA driver"), std::string::npos) << reason;
  }
}

std::string RunAstr(const std::string& env, const std::string& args) {
  const std::string path = testing::SharedFile("models/stories260K.gguf");
  auto r = testing::RunCommand(env + " " + testing::BinDir() + "/astr run --model " + path +
                               " --prompt-ids 1,403 --max-tokens 3 " + args + " 2>&1");
  return std::to_string(r.exit_code) + ":" + r.out;
}

TEST(BackendLoaderTest, CudaFlagsTakeOnOrOff) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  for (const char* flag : {"--cuda-graphs", "--cuda-sampling"}) {
    const std::string out = RunAstr("", std::string(flag) + " maybe");
    EXPECT_EQ(out.rfind("1:", 0), 0u) << out;
    EXPECT_NE(out.find(std::string(flag) + " must be on or off, got 'maybe'"), std::string::npos)
        << out;
    // Valid values are accepted on the CPU backend too (they only matter on CUDA).
    EXPECT_EQ(RunAstr("", std::string(flag) + " off").rfind("0:", 0), 0u) << flag;
  }
}

TEST(BackendLoaderTest, MissingPluginIsNamed) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  const std::string out =
      RunAstr("ASTR_CUDA_PLUGIN=/nonexistent/libastr_backend_cuda.so", "--backend cuda");
  EXPECT_EQ(out.rfind("1:", 0), 0u) << out;
  EXPECT_NE(out.find("cannot load the CUDA backend plugin"), std::string::npos) << out;
  EXPECT_NE(out.find("/nonexistent/libastr_backend_cuda.so"), std::string::npos) << out;
  // auto runs on the CPU instead.
  const std::string cpu = RunAstr("ASTR_CUDA_PLUGIN=/nonexistent/libastr_backend_cuda.so", "");
  EXPECT_EQ(cpu.rfind("0:", 0), 0u) << cpu;
}

TEST(BackendLoaderTest, RealPluginProbedWithoutAGpu) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  const std::string plugin = testing::BinDir() + "/../lib/libastr_backend_cuda.so";
  if (access(plugin.c_str(), F_OK) != 0) GTEST_SKIP() << "built without CUDA";
  if (NvidiaDriverPresent()) GTEST_SKIP() << "this machine has an NVIDIA driver";
  // Forced to load, the real plugin starts (no driver library linked) and its probe reports the
  // CUDA runtime's reason.
  const std::string out = RunAstr("ASTR_CUDA_PLUGIN=" + plugin, "--backend cuda");
  EXPECT_EQ(out.rfind("1:", 0), 0u) << out;
  EXPECT_NE(out.find("no usable CUDA device"), std::string::npos) << out;
  // ASTR_BACKEND=cuda is an explicit choice too.
  const std::string env = RunAstr("ASTR_BACKEND=cuda ASTR_CUDA_PLUGIN=" + plugin, "");
  EXPECT_EQ(env.rfind("1:", 0), 0u) << env;
  EXPECT_NE(env.find("no usable CUDA device"), std::string::npos) << env;
}

// The emulated device's plugin (kernels/cuda/emu) runs the CUDA backend with --backend cuda, names
// itself, and is never what auto picks.
TEST(BackendLoaderTest, EmulatedPluginOnlyWhenAskedFor) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  const std::string plugin = testing::BinDir() + "/../lib/libastr_backend_cuda_emu.so";
  if (access(plugin.c_str(), F_OK) != 0) GTEST_SKIP() << "built without the emulated device";
  const std::string cuda = RunAstr("ASTR_CUDA_PLUGIN=" + plugin, "--backend cuda");
  EXPECT_EQ(cuda.rfind("0:", 0), 0u) << cuda;
  EXPECT_NE(cuda.find("CUDA backend on the emulated sm_90 (H200 profile)"), std::string::npos)
      << cuda;
  const std::string a100 =
      RunAstr("ASTR_CUDA_EMU_PROFILE=sm_80 ASTR_CUDA_PLUGIN=" + plugin, "--backend cuda");
  EXPECT_NE(a100.find("emulated sm_80 (A100 profile)"), std::string::npos) << a100;
  const std::string automatic = RunAstr("ASTR_CUDA_PLUGIN=" + plugin, "--backend auto");
  EXPECT_EQ(automatic.rfind("0:", 0), 0u) << automatic;
  EXPECT_NE(automatic.find("--backend auto never uses it"), std::string::npos) << automatic;
  EXPECT_NE(automatic.find("running on the CPU backend"), std::string::npos) << automatic;
}

}  // namespace
}  // namespace astr
