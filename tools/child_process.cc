#include "tools/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace astr::bench {
namespace {

constexpr size_t kTailLines = 30;

}  // namespace

StatusOr<std::vector<std::string>> ChildProcess::Start(std::vector<std::string> argv,
                                                       const std::vector<std::string>& env,
                                                       std::string name,
                                                       std::vector<std::string> tags, bool forward,
                                                       std::chrono::seconds timeout) {
  name_ = std::move(name);
  tags_ = std::move(tags);
  found_.assign(tags_.size(), "");
  forward_ = forward;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return InternalError(name_ + ": pipe2 failed");
  // Built before fork: the child may only call async-signal-safe functions.
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<std::string> env_copy = env;
  // `env` first: getenv returns the first entry of a name, so these override inherited ones.
  std::vector<char*> envp;
  for (std::string& e : env_copy) envp.push_back(e.data());
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return InternalError(name_ + ": fork failed");
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);  // the copy does not inherit O_CLOEXEC
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  pid_ = pid;
  close(fds[1]);
  reader_ = std::thread([this, fd = fds[0]] { Read(fd); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return eof_ || AllFound(); });
  if (AllFound()) return found_;
  std::string tail;
  for (const std::string& l : tail_) tail += "\n  " + l;
  return UnavailableError(name_ + " (" + argv[0] + ") " +
                          (eof_ ? "exited" : "did not start in time") + " before printing '" +
                          tags_.back() + "'; its last lines:" + tail);
}

void ChildProcess::Stop() {
  const pid_t pid = pid_;
  if (pid > 0) {
    kill(pid, SIGTERM);
    int status = 0;
    bool exited = false;
    for (int i = 0; i < 200 && !exited; ++i) {
      exited = waitpid(pid, &status, WNOHANG) == pid;
      if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!exited) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    pid_ = -1;
  }
  if (reader_.joinable()) reader_.join();
}

void ChildProcess::Kill() const {
  const pid_t pid = pid_;
  if (pid > 0) kill(pid, SIGKILL);
}

int64_t ChildProcess::PeakRssBytes() const {
  const pid_t pid = pid_;
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "... kB"
  }
  return 0;
}

bool ChildProcess::AllFound() const {
  return std::all_of(found_.begin(), found_.end(), [](const auto& s) { return !s.empty(); });
}

void ChildProcess::Read(int fd) {
  FILE* in = fdopen(fd, "r");
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), in) != nullptr) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (forward_) std::fprintf(stderr, "[%s] %s\n", name_.c_str(), line.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < tags_.size(); ++i) {
      const size_t at = line.find(tags_[i]);
      if (!found_[i].empty() || at == std::string::npos) continue;
      // The address ends at a blank or, inside a JSON log line, at the closing quote.
      const size_t begin = at + tags_[i].size();
      found_[i] = line.substr(begin, line.find_first_of(" \t\"", begin) - begin);
    }
    tail_.push_back(std::move(line));
    if (tail_.size() > kTailLines) tail_.pop_front();
    cv_.notify_all();
  }
  fclose(in);
  std::lock_guard<std::mutex> lock(mu_);
  eof_ = true;
  cv_.notify_all();
}

}  // namespace astr::bench
