// What the fuzz targets share beyond reading their input (fuzz_input.h): quiet logging, the shared
// test data they load once, and scratch files for the readers that take a path.
#pragma once

#include <string>
#include <string_view>

namespace astr::fuzz {

// Logs errors only: the libraries log a warning for many refused inputs, and printing one per
// input would slow the fuzzer and bury its own report. Each target's LLVMFuzzerInitialize calls it.
void InitQuietLogging(const char* argv0);

// The absolute path of `rel` under the shared test data folder ($ASTR_SHARED_DIR, else the build's
// default). When it is missing the process exits with kSkipExitCode after saying so: the replay
// test is then reported as skipped, as a GoogleTest test would be.
inline constexpr int kSkipExitCode = 77;
std::string SharedFileOrSkip(const std::string& rel);

// A fresh folder of this process (removed at a normal exit) for the files a target writes.
std::string ScratchDir(const std::string& tag);
// Writes `bytes` to `path`, replacing it; aborts when it cannot (the scratch folder is ours, so a
// failure is the machine's problem, not a finding in the code under test).
void WriteFileOrDie(const std::string& path, std::string_view bytes);

}  // namespace astr::fuzz
