// astr::bench::ChildProcess: a server binary (astr-worker, astr-scheduler) run as a child of a
// benchmark. A thread reads its stderr, finds the lines that announce its addresses ("listening
// on HOST:PORT", "admin service on HOST:PORT"), forwards every line when asked, and keeps the last
// ones for the error message when the child exits before it serves.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/base/status.h"

namespace astr::bench {

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() { Stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Runs argv[0] with `argv` and this process's environment plus `env` ("KEY=VALUE" each), and
  // waits, at most `timeout`, until a line containing each of `tags` was printed on its stderr;
  // returns the word after each tag, in the order of `tags`. `name` prefixes its forwarded lines
  // (`forward`) and names it in errors.
  StatusOr<std::vector<std::string>> Start(std::vector<std::string> argv,
                                           const std::vector<std::string>& env, std::string name,
                                           std::vector<std::string> tags, bool forward,
                                           std::chrono::seconds timeout);
  // SIGTERM, SIGKILL after 20 s; reaps it. Nothing when it is not running.
  void Stop();
  // SIGKILL now, from any thread (Stop reaps it). Nothing when it is not running.
  void Kill() const;
  // Its peak resident memory so far (VmHWM); 0 when unknown.
  int64_t PeakRssBytes() const;

 private:
  bool AllFound() const;  // mu_ held
  void Read(int fd);

  std::atomic<pid_t> pid_{-1};
  std::string name_;
  std::vector<std::string> tags_;
  bool forward_ = false;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> found_;  // per tag, "" until seen; guarded by mu_
  std::deque<std::string> tail_;    // the last lines; guarded by mu_
  bool eof_ = false;                // guarded by mu_
};

}  // namespace astr::bench
