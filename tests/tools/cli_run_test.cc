// `astr run` end to end: the golden continuation of stories260K as ids and text, the JSON fields,
// n samples, stop strings, and usage errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "tests/support/test_util.h"

namespace astr {
namespace {

testing::CommandResult RunCommand(const std::string& args) {
  return testing::RunCommand(testing::BinDir() + "/astr " + args + " 2>/dev/null");
}

TEST(CliRunTest, GoldenJson) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto r = RunCommand("run --model " + path +
                      " --prompt 'Once upon a time' --max-tokens 32 --json --logprobs 3");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({1, 403, 407, 261, 378}));
  EXPECT_EQ(j["token_ids"], nlohmann::json({432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                            338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                            265, 282, 295, 433, 426, 385, 328, 432, 358, 394}));
  EXPECT_EQ(j["text"],
            ", there was a little girl named Lily. She loved to play outside in the park. One "
            "day, she saw");
  ASSERT_EQ(j["logprobs"].size(), 32u);
  ASSERT_EQ(j["top_logprobs"].size(), 32u);
  for (size_t i = 0; i < 32; ++i) {
    // Greedy: the chosen token is the most likely alternative, with the same logprob.
    EXPECT_EQ(j["top_logprobs"][i][0]["id"], j["token_ids"][i]);
    EXPECT_FLOAT_EQ(j["top_logprobs"][i][0]["logprob"].get<float>(), j["logprobs"][i].get<float>());
    EXPECT_LE(j["logprobs"][i].get<float>(), 0.0f);
  }
  EXPECT_EQ(j["finish_reason"], "length");
}

TEST(CliRunTest, SamplesAndStopString) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  auto r = RunCommand("run --model " + path +
                      " --prompt-ids 1,403,407,261,378 --max-tokens 16 --n 3 --temperature 1"
                      " --seed 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["samples"].size(), 3u);
  auto again = nlohmann::json::parse(RunCommand("run --model " + path +
                                                " --prompt-ids 1,403,407,261,378 --max-tokens 16"
                                                " --n 3 --temperature 1 --seed 5 --json")
                                         .out);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(j["samples"][i]["token_ids"], again["samples"][i]["token_ids"]);

  r = RunCommand("run --model " + path + " --prompt 'Once upon a time' --stop Lily --json");
  ASSERT_EQ(r.exit_code, 0);
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"], ", there was a little girl named ");
  EXPECT_EQ(j["finish_reason"], "stop");
}

TEST(CliRunTest, UsageErrors) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  EXPECT_EQ(RunCommand("run --model " + path).exit_code, 2);  // neither --prompt nor --prompt-ids
  EXPECT_EQ(RunCommand("run --model " + path + " --prompt-ids 1 --bogus").exit_code, 2);
  EXPECT_EQ(RunCommand("run --model " + path + " --prompt-ids 1,99999").exit_code, 1);
  EXPECT_EQ(RunCommand("run --model " + path + " --prompt-ids 1 --top-p 0").exit_code, 1);
  EXPECT_EQ(RunCommand("run --model /nonexistent.gguf --prompt-ids 1").exit_code, 1);
  EXPECT_EQ(RunCommand("run --help").exit_code, 0);
  EXPECT_EQ(RunCommand("run --model " + path + " --prompt x --chat y").exit_code, 2);
  EXPECT_EQ(RunCommand("run --model " + path + " --prompt x --system y").exit_code, 2);
  EXPECT_EQ(RunCommand("run --model " + path + " --prompt x --chat-template t.jinja").exit_code, 2);
  // stories260K has no chat template: a clear error, not a crash.
  auto no_template =
      testing::RunCommand(testing::BinDir() + "/astr run --model " + path + " --chat hi 2>&1");
  EXPECT_EQ(no_template.exit_code, 1);
  EXPECT_NE(no_template.out.find("template"), std::string::npos) << no_template.out;
  // Out-of-range values are refused, never wrapped or looped on.
  for (const char* bad :
       {"--logit-bias 13:abc", "--max-tokens 4294967297", "--max-running 0",
        "--num-pages 100000000000000", "--stop-token-ids 4294967296", "--temperature -1"}) {
    auto r = RunCommand("run --model " + path + " --prompt-ids 1 " + bad);
    EXPECT_EQ(r.exit_code, 1) << bad;
  }
}

}  // namespace
}  // namespace astr
