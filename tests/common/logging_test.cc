// The logger (common/base/logging.h): the JSON and text line formats, severity and verbosity
// filtering, the logging flags. Built twice: logging_test against the build's logger (glog where
// found) and logging_fallback_test against the built-in fallback, with the same expectations.
#include "common/base/logging.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace astr {
namespace {

int64_t Gettid() { return static_cast<int64_t>(syscall(SYS_gettid)); }

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void Init(const std::string& format, const std::string& level = "info", int verbosity = 0) {
  LogOptions o;
  o.format = format;
  o.level = level;
  o.verbosity = verbosity;
  ASSERT_TRUE(InitLogging("logging_test", o).ok());
}

// Seconds since the epoch of "2025-01-02T03:04:05.678901Z"; -1 if it is not that shape.
double ParseRfc3339Utc(const std::string& s) {
  std::smatch m;
  static const std::regex re(R"(^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})Z$)");
  if (!std::regex_match(s, m, re)) return -1;
  std::tm t{};
  t.tm_year = std::stoi(m[1]) - 1900;
  t.tm_mon = std::stoi(m[2]) - 1;
  t.tm_mday = std::stoi(m[3]);
  t.tm_hour = std::stoi(m[4]);
  t.tm_min = std::stoi(m[5]);
  t.tm_sec = std::stoi(m[6]);
  return static_cast<double>(timegm(&t)) + std::stoi(m[7]) / 1e6;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(LoggingTest, JsonLinesHoldEveryFieldAndEscapeTheMessage) {
  Init("json");
  const std::string tricky = "quote \" backslash \\ newline\nsecond line\ttab \x01 caf\xc3\xa9";
  const double before = NowSeconds();
  testing::internal::CaptureStderr();
  const int info_line = __LINE__ + 1;
  LOG(INFO) << "weights loaded in " << 1.5 << " s";
  const int warning_line = __LINE__ + 1;
  LOG(WARNING) << tricky;
  int64_t other_tid = 0;
  int error_line = 0;
  std::thread([&] {
    other_tid = Gettid();
    error_line = __LINE__ + 1;
    LOG(ERROR) << "from another thread";
  }).join();
  const std::string out = testing::internal::GetCapturedStderr();
  const double after = NowSeconds();

  const std::vector<std::string> lines = Lines(out);
  ASSERT_EQ(lines.size(), 3u) << out;  // the newline inside a message stays inside its line
  struct Want {
    const char* level;
    int line;
    int64_t thread;
    std::string message;
  };
  const Want wants[] = {{"INFO", info_line, Gettid(), "weights loaded in 1.5 s"},
                        {"WARNING", warning_line, Gettid(), tricky},
                        {"ERROR", error_line, other_tid, "from another thread"}};
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const nlohmann::json j = nlohmann::json::parse(lines[i]);  // throws (fails) if not JSON
    ASSERT_TRUE(j.is_object());
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(keys,
              (std::vector<std::string>{"file", "level", "line", "message", "thread", "time"}));
    const double t = ParseRfc3339Utc(j.at("time").get<std::string>());
    EXPECT_GE(t, before - 1.0);  // the line's clock has microseconds; ours may round differently
    EXPECT_LE(t, after + 1.0);
    EXPECT_EQ(j.at("level"), wants[i].level);
    EXPECT_EQ(j.at("thread").get<int64_t>(), wants[i].thread);
    EXPECT_EQ(j.at("file"), "logging_test.cc");
    EXPECT_EQ(j.at("line").get<int>(), wants[i].line);
    EXPECT_EQ(j.at("message").get<std::string>(), wants[i].message);
  }
  // The message is the last field: a reader grepping the raw line finds "listening on H:P"
  // followed only by the closing quote and brace.
  EXPECT_TRUE(lines[0].ends_with(R"("message":"weights loaded in 1.5 s"})")) << lines[0];
}

TEST(LoggingTest, JsonLineOfInvalidUtf8IsStillJson) {
  Init("json");
  testing::internal::CaptureStderr();
  LOG(INFO) << "bad byte \xff here";
  const std::vector<std::string> lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j.at("message").get<std::string>(), "bad byte \xef\xbf\xbd here");  // U+FFFD
}

TEST(LoggingTest, TextLinesAreGlogs) {
  Init("text");
  testing::internal::CaptureStderr();
  const int line = __LINE__ + 1;
  LOG(WARNING) << "pool: " << 12 << " pages";
  const std::vector<std::string> lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  std::smatch m;
  const std::regex re(R"(^W(\d{8}) (\d{2}:\d{2}:\d{2}\.\d{6}) +(\d+) ([^ :]+):(\d+)\] (.*)$)");
  ASSERT_TRUE(std::regex_match(lines[0], m, re)) << lines[0];
  EXPECT_EQ(std::stoll(m[3]), Gettid());
  EXPECT_EQ(m[4], "logging_test.cc");
  EXPECT_EQ(std::stoi(m[5]), line);
  EXPECT_EQ(m[6], "pool: 12 pages");
}

TEST(LoggingTest, LevelHidesLessSevereLines) {
  Init("json", "warning");
  testing::internal::CaptureStderr();
  LOG(INFO) << "hidden info";
  LOG(WARNING) << "shown warning";
  LOG(ERROR) << "shown error";
  std::vector<std::string> lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[0]).at("message"), "shown warning");
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("message"), "shown error");

  Init("json", "error");
  testing::internal::CaptureStderr();
  LOG(WARNING) << "hidden warning";
  LOG(ERROR) << "shown error";
  lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines[0]).at("level"), "ERROR");
}

TEST(LoggingTest, VerbosityShowsVlogUpToItsLevel) {
  Init("json", "info", 0);
  EXPECT_FALSE(VLOG_IS_ON(1));
  testing::internal::CaptureStderr();
  VLOG(1) << "hidden at 0";
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");

  Init("json", "info", 2);
  EXPECT_TRUE(VLOG_IS_ON(2));
  EXPECT_FALSE(VLOG_IS_ON(3));
  testing::internal::CaptureStderr();
  VLOG(1) << "one";
  VLOG(2) << "two";
  VLOG(3) << "three";
  const std::vector<std::string> lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& [line, message] : {std::pair{lines[0], "one"}, std::pair{lines[1], "two"}}) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("level"), "INFO");
    EXPECT_EQ(j.at("message"), message);
  }

  // The level applies to VLOG lines too: they are INFO.
  Init("json", "warning", 2);
  testing::internal::CaptureStderr();
  VLOG(1) << "hidden by the level";
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(LoggingTest, LogAtUsesTheGivenFileAndLine) {
  Init("json");
  testing::internal::CaptureStderr();
  LogAt(LogSeverity::kWarning, "/src/grpc/src/core/forwarded.cc", 77, "from another library");
  LogAt(LogSeverity::kFatal, "other.cc", 5, "not fatal here");
  const std::vector<std::string> lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j.at("level"), "WARNING");
  EXPECT_EQ(j.at("file"), "forwarded.cc");
  EXPECT_EQ(j.at("line"), 77);
  EXPECT_EQ(j.at("message"), "from another library");
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("level"), "ERROR");
}

// The comparison checks glog has, which the fallback must have too (the bare GPU build found it
// lacked them): a true one says nothing and evaluates each operand once; a false one aborts naming
// the expression and the streamed context.
TEST(LoggingTest, ComparisonChecksPassSilentlyAndAbortNamingTheExpression) {
  Init("text");
  int calls = 0;
  auto next = [&calls] { return ++calls; };
  CHECK_EQ(next(), 1);
  CHECK_NE(next(), 1);
  CHECK_LT(next(), 4);
  CHECK_LE(next(), 4);
  CHECK_GT(next(), 4);
  CHECK_GE(next(), 6);
  EXPECT_EQ(calls, 6);
  int x = 3;
  EXPECT_DEATH(CHECK_EQ(x, 2) << "context " << 7, "Check failed: x == 2.*context 7");
  EXPECT_DEATH(CHECK_LE(x, 2), "Check failed: x <= 2");
  EXPECT_DEATH(CHECK_GT(x, 3), "Check failed: x > 3");
}

TEST(LoggingTest, BadOptionsNameTheirFlag) {
  LogOptions o;
  o.format = "xml";
  Status s = InitLogging("logging_test", o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--log-format: 'xml'"), std::string::npos) << s.message();
  o = LogOptions();
  o.level = "debug";
  s = InitLogging("logging_test", o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--log-level: 'debug'"), std::string::npos) << s.message();
  o = LogOptions();
  o.verbosity = -1;
  EXPECT_EQ(InitLogging("logging_test", o).code(), StatusCode::kInvalidArgument);
}

TEST(LoggingTest, FlagsFillTheOptions) {
  struct Case {
    std::vector<const char*> args;
    LogOptions want;
  };
  const Case cases[] = {
      {{"prog"}, {"text", "info", 0}},
      {{"prog", "--log-format=json", "--log-level", "warning", "--v=3"}, {"json", "warning", 3}},
      {{"prog", "-v", "2"}, {"text", "info", 2}},
      {{"prog", "-v=4", "--log-format", "text"}, {"text", "info", 4}},
  };
  for (const Case& c : cases) {
    LogOptions o;
    FlagSet fs("prog", "test");
    o.Register(&fs);
    ASSERT_TRUE(fs.Parse(static_cast<int>(c.args.size()), c.args.data()).ok());
    EXPECT_EQ(o.format, c.want.format);
    EXPECT_EQ(o.level, c.want.level);
    EXPECT_EQ(o.verbosity, c.want.verbosity);
  }
  // One dash is only for one-letter flags: "-log-level" stays an (unexpected) argument.
  LogOptions o;
  FlagSet fs("prog", "test");
  o.Register(&fs);
  const char* args[] = {"prog", "-log-level", "error"};
  EXPECT_FALSE(fs.Parse(3, args).ok());
}

}  // namespace
}  // namespace astr
