// Helpers shared by the C++ tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace astr::testing {

// The shared test-data folder: $ASTR_SHARED_DIR, else the build's default (../shared next to the
// repo).
std::string SharedDir();
// SharedDir() + "/" + rel if that file exists, else "" (the caller then GTEST_SKIP()s).
std::string SharedFile(const std::string& rel);
// A fresh empty temporary folder for this test, removed when the test process exits normally
// (ASTR_KEEP_TEST_DIRS=1 keeps it).
std::string TempDir(const std::string& tag);
// Folder of the built binaries (build/bin).
std::string BinDir();

// n floats uniform in [lo, hi), deterministic from seed.
std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi);
// n floats from N(0, stddev^2), deterministic from seed.
std::vector<float> RandomNormalFloats(size_t n, uint32_t seed, float stddev);

struct CommandResult {
  int exit_code = -1;  // -1 if the command could not run or did not exit normally
  std::string out;     // its standard output
};
// Every sample line of a Prometheus text rendering (Scheduler::RenderMetrics), "name{labels}" ->
// value.
std::map<std::string, double> MetricSamples(const std::string& text);

// Runs a shell command and captures its standard output.
CommandResult RunCommand(const std::string& command);

// One server binary (astr-worker, astr-scheduler) run as a child process. Its stderr goes to a log
// file, which Start polls for the line "listening on HOST:PORT" that the servers print once they
// serve (--listen HOST:0 picks the port).
class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess() { Kill(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Runs BinDir()/`binary` with `args`, its stderr in a fresh TempDir(tag), and waits up to
  // `timeout` for it to listen. Returns the address it listens on; an error with the log when it
  // could not start, exited first, or did not listen in time.
  StatusOr<std::string> Start(const std::string& binary, const std::vector<std::string>& args,
                              const std::string& tag,
                              std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // SIGKILL, and reaps the process (nothing when it is not running).
  void Kill();
  // The child's pid (-1 when not running), e.g. to SIGSTOP it.
  pid_t pid() const { return pid_; }
  // SIGTERM; returns the exit code, or -1 when it did not exit normally within `timeout`.
  int Terminate(std::chrono::milliseconds timeout = std::chrono::seconds(20));

  const std::string& address() const { return address_; }
  // What it has written to stderr so far.
  std::string log() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  std::string address_;
};

}  // namespace astr::testing

// Skips the test (reported as skipped, never passed) when a shared file is missing.
#define ASTR_REQUIRE_SHARED_FILE(var, rel)                  \
  const std::string var = ::astr::testing::SharedFile(rel); \
  if (var.empty())                                          \
  GTEST_SKIP() << "shared test data missing: " << (rel) << " under " << ::astr::testing::SharedDir()
