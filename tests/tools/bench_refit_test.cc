// astr-bench-refit (the built binary) on stories260K converted to a Hugging Face folder: one
// repetition with 1 and 2 started workers prints one JSON object with every figure, and the served
// weight version advanced by one per push. Also its usage errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_util.h"

namespace astr {
namespace {

// stories260K: 292,800 parameters, all F32 (shared/models/README.md).
constexpr int64_t kStoriesBytes = 292800 * 4;

std::string Bench() { return testing::BinDir() + "/astr-bench-refit"; }

// A figure of the benchmark: {"median", "min", "values"} with one value per repetition.
void ExpectSeries(const nlohmann::json& j, const std::string& key, size_t values,
                  bool positive = true) {
  SCOPED_TRACE(key);
  ASSERT_TRUE(j.contains(key)) << j.dump();
  const nlohmann::json& s = j[key];
  ASSERT_TRUE(s.contains("median") && s.contains("min") && s.contains("values")) << s.dump();
  EXPECT_EQ(s["values"].size(), values);
  EXPECT_LE(s["min"].get<double>(), s["median"].get<double>());
  if (positive) EXPECT_GT(s["min"].get<double>(), 0);
}

TEST(BenchRefitTest, OneAndTwoWorkersOnStories260K) {
  ASTR_REQUIRE_SHARED_FILE(gguf, "models/stories260K.gguf");
  const std::string dir = testing::TempDir("bench_refit");
  const std::string model = dir + "/stories";
  ASSERT_EQ(testing::RunCommand(testing::BinDir() + "/astr convert " + gguf + " " + model +
                                " >/dev/null 2>&1")
                .exit_code,
            0);
  const testing::CommandResult r = testing::RunCommand(
      Bench() + " --model " + model + " --tokenizer " + gguf +
      " --worker-counts 1,2 --repetitions 1 --streams 2 --baseline-s 0.2 --kv-cache-mb 16"
      " --bucket-mb 1 --min-available-mb 64 2>" +
      dir + "/stderr.log");
  ASSERT_EQ(r.exit_code, 0) << testing::RunCommand("cat " + dir + "/stderr.log").out;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // one JSON object, nothing else
  EXPECT_EQ(j["model"]["bytes"], kStoriesBytes);
  EXPECT_EQ(j["model"]["parameters"], 292800);
  ASSERT_EQ(j["runs"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE("run " + std::to_string(i));
    const nlohmann::json& run = j["runs"][i];
    EXPECT_EQ(run["workers"], static_cast<int>(i + 1));
    EXPECT_EQ(run["bytes_per_worker"], kStoriesBytes);
    for (const char* key : {"copy_s", "copy_gbps", "push_s", "push_gbps", "stage_ms", "commit_ms",
                            "push_over_copy"}) {
      ExpectSeries(run, key, 1);
    }
    EXPECT_TRUE(run["push_target_met"].is_boolean());
    // One repetition: its timed push is the run's first, so none come after it.
    EXPECT_EQ(run["first_push_s"], run["push_s"]["values"][0]);
    EXPECT_EQ(run["first_push_over_copy"], run["push_over_copy"]["values"][0]);
    EXPECT_TRUE(run["push_over_copy_after_first"]["values"].empty());
    // The direct route, after each push.
    ExpectSeries(run, "direct_push_s", 1);
    ExpectSeries(run, "direct_push_over_copy", 1);
    EXPECT_TRUE(run["direct_push_target_met"].is_boolean());
    // And from disk.
    ExpectSeries(run, "disk_s", 1);
    ExpectSeries(run, "disk_over_copy", 1);
    EXPECT_TRUE(run["disk_target_met"].is_boolean());
    ASSERT_TRUE(run.contains("profile"));
    ExpectSeries(run["profile"], "direct_stage_s", 1);
    ExpectSeries(run["profile"], "prepare_ms", i + 1);  // one per worker
    ExpectSeries(run["profile"], "copy_into_fresh_memory_s", 1);
    ASSERT_TRUE(run.contains("serving"));
    ExpectSeries(run["serving"], "push_s", 1);
    ExpectSeries(run["serving"], "tokens_per_s_before", 1);
    ExpectSeries(run["serving"], "max_token_gap_ms", 1);
    ASSERT_TRUE(run.contains("pause_resume"));
    ExpectSeries(run["pause_resume"], "push_s", 1);
    ExpectSeries(run["pause_resume"], "overhead_ms", 1, /*positive=*/false);
    EXPECT_TRUE(run["pause_resume_target_met"].is_boolean());
    // One repetition updates five times (idle, over the direct route, from disk, while serving,
    // paused); the direct stages of the profile are discarded and never served.
    EXPECT_EQ(run["pushes"], 5);
    EXPECT_EQ(run["version_after"].get<int64_t>() - run["version_before"].get<int64_t>(), 5);
    EXPECT_EQ(run["version_advanced"], true);
    EXPECT_EQ(run["worker_peak_rss_mb"].size(), i + 1);
  }
}

TEST(BenchRefitTest, HelpAndUsageErrors) {
  const testing::CommandResult help = testing::RunCommand(Bench() + " --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--model", "--worker-counts", "--repetitions", "--bucket-mb",
                           "--streams", "--workers", "--min-available-mb", "--direct", "--disk"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(testing::RunCommand(Bench() + " 2>/dev/null").exit_code, 2);  // --model is required
  EXPECT_EQ(testing::RunCommand(Bench() + " --model x --bucket-mb 0 2>/dev/null").exit_code, 2);
  EXPECT_EQ(testing::RunCommand(Bench() + " --model x --worker-counts 0 2>/dev/null").exit_code, 2);
  EXPECT_EQ(testing::RunCommand(Bench() + " --model x --kv-on-update maybe 2>/dev/null").exit_code,
            2);
  // A folder that is not a checkpoint: exit 1, before any process starts.
  EXPECT_EQ(testing::RunCommand(Bench() + " --model " + testing::TempDir("bench_refit_empty") +
                                " 2>/dev/null")
                .exit_code,
            1);
}

}  // namespace
}  // namespace astr
