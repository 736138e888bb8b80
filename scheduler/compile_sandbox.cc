#include "scheduler/compile_sandbox.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

namespace astr::sched {
namespace {

using Clock = std::chrono::steady_clock;

// How often the parent samples the child's memory and checks the cancel flag and the clock.
constexpr int kSampleMs = 5;
// The child's answer: a header, then `error_bytes` bytes of message.
struct Header {
  int32_t kind;  // 0 ok, 1 failed, 2 out of memory
  int32_t error_bytes;
  int64_t retained_bytes;
};
constexpr size_t kMaxErrorBytes = 2048;  // header + message stay below PIPE_BUF: one write
static_assert(sizeof(Header) + kMaxErrorBytes <= PIPE_BUF);

#if defined(ASTR_ADDRESS_SANITIZER) || defined(ASTR_THREAD_SANITIZER)
constexpr bool kSanitized = true;  // their shadow memory makes an address-space limit meaningless
#else
constexpr bool kSanitized = false;
#endif

// A field in kB of /proc/PID/status ("RssAnon", "VmSize"), in bytes; -1 when unreadable (the
// process is gone).
int64_t StatusBytes(pid_t pid, const char* key) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/status", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const size_t key_len = std::strlen(key);
  for (const char* line = buf; line != nullptr && *line != '\0';) {
    if (std::strncmp(line, key, key_len) == 0 && line[key_len] == ':') {
      return std::strtoll(line + key_len + 1, nullptr, 10) * 1024;
    }
    line = std::strchr(line, '\n');
    if (line != nullptr) ++line;
  }
  return -1;
}

// Waits for ended children on a thread of its own, so that a compile does not wait for its
// child's address space to be torn down (milliseconds for a large scheduler) before it answers.
class Reaper {
 public:
  static Reaper& Get() {
    static Reaper* const reaper = new Reaper();  // never destroyed: its thread may outlive statics
    return *reaper;
  }
  void Reap(pid_t pid) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pids_.push_back(pid);
    }
    cv_.notify_one();
  }

 private:
  Reaper() {
    std::thread([this] { Run(); }).detach();
  }
  void Run() {
    while (true) {
      pid_t pid;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !pids_.empty(); });
        pid = pids_.front();
        pids_.pop_front();
      }
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<pid_t> pids_;  // guarded by mu_
};

int g_answer_fd = -1;  // the child's end of the pipe (only ever set in a child)

void WriteAnswer(int32_t kind, const std::string& error, int64_t retained) {
  char buf[sizeof(Header) + kMaxErrorBytes];
  Header h{kind, static_cast<int32_t>(std::min(error.size(), kMaxErrorBytes)), retained};
  std::memcpy(buf, &h, sizeof(h));
  std::memcpy(buf + sizeof(h), error.data(), static_cast<size_t>(h.error_bytes));
  const size_t total = sizeof(h) + static_cast<size_t>(h.error_bytes);
  ssize_t w;
  do {
    w = write(g_answer_fd, buf, total);
  } while (w < 0 && errno == EINTR);
}

// An allocation failed under the address-space limit: the work is over its memory.
void OutOfMemory() {
  WriteAnswer(2, "", 0);
  _exit(0);
}

[[noreturn]] void RunChild(const std::function<SandboxWork()>& work, int answer_fd, pid_t parent,
                           int64_t address_space_limit) {
  // Only this thread exists now. Signals: the parent's handlers and mask are not ours.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_UNBLOCK, &all, nullptr);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    signal(sig, SIG_DFL);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the parent died before the line above
  // Keep no socket or file of the server open (a listening port must close with the server).
  if (answer_fd > 3) close_range(3, static_cast<unsigned>(answer_fd) - 1, 0);
  close_range(static_cast<unsigned>(answer_fd) + 1, ~0u, 0);
  g_answer_fd = answer_fd;
  setpriority(PRIO_PROCESS, 0, 10);  // below the serving threads; the work's threads inherit it
  if (address_space_limit > 0) {
    rlimit lim{static_cast<rlim_t>(address_space_limit), static_cast<rlim_t>(address_space_limit)};
    setrlimit(RLIMIT_AS, &lim);
  }
  std::set_new_handler(OutOfMemory);
  SandboxWork result;
  try {
    result = work();
  } catch (const std::bad_alloc&) {
    OutOfMemory();
  } catch (const std::exception& e) {
    result.error = e.what();
    if (result.error.empty()) result.error = "failed";
  } catch (...) {
    result.error = "failed";
  }
  WriteAnswer(result.error.empty() ? 0 : 1, result.error, result.retained_bytes);
  _exit(0);
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigdescr_np(sig);
    return "the compiler process ended on signal " + std::to_string(sig) + " (" +
           (name != nullptr ? name : "?") + ")";
  }
  if (WIFEXITED(status)) {
    return "the compiler process exited with status " + std::to_string(WEXITSTATUS(status)) +
           " without an answer";
  }
  return "the compiler process ended without an answer";
}

}  // namespace

int64_t HeapInUseBytes() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
}

SandboxResult RunInSandbox(const std::function<SandboxWork()>& work, const SandboxLimits& limits,
                           const std::atomic<bool>* cancelled) {
  using Outcome = SandboxResult::Outcome;
  SandboxResult out;
  const auto start = Clock::now();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    out.error = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  const pid_t self = getpid();
  // What the child inherits: its own growth is measured above this.
  const int64_t baseline = std::max<int64_t>(0, StatusBytes(self, "RssAnon"));
  const int64_t vm_size = StatusBytes(self, "VmSize");
  // A backstop for bursts between two samples, far above the sampled limit: thread stacks and
  // allocator arenas reserve address space they never touch.
  const int64_t address_space_limit =
      kSanitized || vm_size < 0 ? 0 : vm_size + 2 * limits.memory_bytes + (int64_t{1} << 30);
  const pid_t pid = fork();
  if (pid < 0) {
    out.error = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return out;
  }
  if (pid == 0) {
    close(fds[0]);
    RunChild(work, fds[1], self, address_space_limit);
  }
  close(fds[1]);

  std::string answer;
  std::optional<Outcome> killed_for;
  const auto deadline = start + limits.time;
  // The whole answer is in once its header and its message are.
  auto complete = [&] {
    if (answer.size() < sizeof(Header)) return false;
    Header h;
    std::memcpy(&h, answer.data(), sizeof(h));
    return answer.size() >= sizeof(Header) + static_cast<size_t>(std::max(0, h.error_bytes));
  };
  for (bool eof = false; !eof && !complete();) {
    const auto now = Clock::now();
    if (now >= deadline) {
      killed_for = Outcome::kOverTime;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 1, kSampleMs)));
    if (ready > 0) {
      char buf[4096];
      const ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n > 0) {
        answer.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        eof = true;  // the child answered and exited, or died
      }
    }
    if (eof || complete()) break;
    const int64_t rss = StatusBytes(pid, "RssAnon");
    if (rss >= 0 && rss - baseline > limits.memory_bytes) {
      killed_for = Outcome::kOverMemory;
      break;
    }
    if (cancelled != nullptr && cancelled->load(std::memory_order_acquire)) {
      killed_for = Outcome::kCancelled;
      break;
    }
  }
  if (killed_for) kill(pid, SIGKILL);
  close(fds[0]);
  if (killed_for || complete()) {
    Reaper::Get().Reap(pid);  // it ends on its own (or from SIGKILL): nothing more to learn
  } else {
    int status = 0;  // it died without an answer: how, for the error
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    out.outcome = Outcome::kCrashed;
    out.error = DescribeExit(status);
    out.elapsed = Clock::now() - start;
    return out;
  }
  out.elapsed = Clock::now() - start;
  if (killed_for) {
    out.outcome = *killed_for;
    return out;
  }
  Header h{};
  std::memcpy(&h, answer.data(), sizeof(h));
  switch (h.kind) {
    case 0:
      out.outcome = Outcome::kOk;
      out.retained_bytes = h.retained_bytes;
      break;
    case 2:
      out.outcome = Outcome::kOverMemory;
      break;
    default:
      out.outcome = Outcome::kFailed;
      out.error = answer.substr(sizeof(h), static_cast<size_t>(std::max(0, h.error_bytes)));
      break;
  }
  return out;
}

}  // namespace astr::sched
