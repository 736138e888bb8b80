#include "tests/support/test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <regex>
#include <thread>
#include <vector>

#include "common/base/file_util.h"

extern char** environ;

namespace astr::testing {

std::string SharedDir() {
  if (const char* env = std::getenv("ASTR_SHARED_DIR"); env != nullptr && *env != '\0') return env;
  return ASTR_DEFAULT_SHARED_DIR;
}

std::string SharedFile(const std::string& rel) {
  std::string path = SharedDir() + "/" + rel;
  return std::filesystem::exists(path) ? path : "";
}

namespace {

// The folders TempDir made, removed when the test process exits normally (ASTR_KEEP_TEST_DIRS=1
// keeps them for a look after a failure).
class TempDirs {
 public:
  ~TempDirs() {
    const char* keep = std::getenv("ASTR_KEEP_TEST_DIRS");
    if (keep != nullptr && std::string(keep) == "1") return;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& dir : dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
  void Add(const std::filesystem::path& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(dir);
  }

 private:
  std::mutex mu_;
  std::vector<std::filesystem::path> dirs_;
};

TempDirs& MadeTempDirs() {
  static TempDirs dirs;  // destroyed at exit
  return dirs;
}

}  // namespace

std::string TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto dir =
      std::filesystem::temp_directory_path() /
      ("astr_test_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  MadeTempDirs().Add(dir);
  return dir.string();
}

std::string BinDir() { return ASTR_BIN_DIR; }

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<float> RandomNormalFloats(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

std::map<std::string, double> MetricSamples(const std::string& text) {
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

StatusOr<std::string> ServerProcess::Start(const std::string& binary,
                                           const std::vector<std::string>& args,
                                           const std::string& tag,
                                           std::chrono::milliseconds timeout) {
  Kill();
  address_.clear();
  log_path_ = TempDir(tag) + "/" + binary + ".log";
  std::vector<std::string> argv_strings = {BinDir() + "/" + binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_strings.size() + 1);
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = -1;
    return InternalError("cannot run " + argv_strings[0] + ": " + std::strerror(rc));
  }
  const std::regex listening(R"(listening on (\S+):(\d+))");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = log();
    std::smatch m;
    if (std::regex_search(text, m, listening)) {
      if (m[2].str() == "0") return InternalError(binary + " reports port 0:\n" + text);
      address_ = m[1].str() + ":" + m[2].str();
      return address_;
    }
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return UnavailableError(binary + " exited before listening:\n" + log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status(StatusCode::kDeadlineExceeded, binary + " did not print 'listening on' in " +
                                                   std::to_string(timeout.count()) + " ms:\n" +
                                                   log());
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int ServerProcess::Terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string ServerProcess::log() const {
  // Missing until the child has opened it: an empty log then.
  StatusOr<std::string> text = ReadFileToString(log_path_);
  return text.ok() ? std::move(*text) : std::string();
}

}  // namespace astr::testing
