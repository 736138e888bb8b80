// Helpers shared by the C++ tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace astr::testing {

// The shared test-data folder: $ASTR_SHARED_DIR, else the build's default (../shared next to the
// repo).
std::string SharedDir();
// SharedDir() + "/" + rel if that file exists, else "" (the caller then GTEST_SKIP()s).
std::string SharedFile(const std::string& rel);
// A fresh empty temporary folder for this test (removed at process exit is not guaranteed).
std::string TempDir(const std::string& tag);
// Folder of the built binaries (build/bin).
std::string BinDir();

// n floats uniform in [lo, hi), deterministic from seed.
std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi);

struct CommandResult {
  int exit_code = -1;  // -1 if the command could not run or did not exit normally
  std::string out;     // its standard output
};
// Runs a shell command and captures its standard output.
CommandResult RunCommand(const std::string& command);

}  // namespace astr::testing

// Skips the test (reported as skipped, never passed) when a shared file is missing.
#define ASTR_REQUIRE_SHARED_FILE(var, rel)                  \
  const std::string var = ::astr::testing::SharedFile(rel); \
  if (var.empty())                                          \
  GTEST_SKIP() << "shared test data missing: " << (rel) << " under " << ::astr::testing::SharedDir()
