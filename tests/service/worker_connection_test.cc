// The scheduler core over real gRPC: ConnectWorker to astr-worker processes (cpu backend,
// stories260K) on loopback. Greedy outputs are checked against llama.cpp's golden continuation
// (/work/shared/models/README.md), through preemption on a tiny pool and through a worker killed
// mid-run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "scheduler/scheduler.h"
#include "tests/test_util.h"

extern char** environ;

namespace astr::sched {
namespace {

using namespace std::chrono_literals;

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};
// llama.cpp's greedy continuation of kPrompt on stories260K.
const std::vector<int32_t> kGolden = {432, 383, 286, 261, 376};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One astr-worker child on 127.0.0.1:0; its stderr goes to a file polled for "listening on".
class Worker {
 public:
  ~Worker() { Kill(); }

  std::string Start(const std::string& model, const std::vector<std::string>& flags,
                    const std::string& tag) {
    log_ = testing::TempDir("worker_connection_" + tag) + "/worker.log";
    std::vector<std::string> args = {testing::BinDir() + "/astr-worker",
                                     "--model",
                                     model,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--backend",
                                     "cpu",
                                     "--threads",
                                     "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return "";
    const std::regex listening(R"(listening on (\S+:\d+))");
    for (auto deadline = Clock::now() + 30s; Clock::now() < deadline;) {
      std::smatch m;
      const std::string log = ReadFile(log_);
      if (std::regex_search(log, m, listening)) return m[1].str();
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return "";
      }
      std::this_thread::sleep_for(20ms);
    }
    return "";
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string log() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

SchedRequest Greedy(int max_tokens, uint64_t seed, int n = 1) {
  SchedRequest r;
  r.prompt = kPrompt;
  r.sampling.set_temperature(0);
  r.sampling.set_top_p(1);
  r.sampling.set_repetition_penalty(1);
  r.sampling.set_seed(seed);
  r.sampling.set_ignore_eos(true);
  r.max_tokens = max_tokens;
  r.n = n;
  return r;
}

// Every sample's tokens, or the close status when it is not OK.
struct Result {
  std::vector<std::vector<int32_t>> tokens;
  Status status;
  int32_t preemptions = 0;
};
Result Collect(RequestChannel* channel, int n) {
  Result out;
  out.tokens.resize(n);
  for (auto give_up = Clock::now() + 60s; Clock::now() < give_up;) {
    RequestChannel::Batch b = channel->Wait(100ms);
    for (const SampleEvent& e : b.events) {
      if (e.kind == SampleEvent::Kind::kToken) out.tokens[e.index].push_back(e.token_id);
    }
    if (b.closed) {
      out.status = b.status;
      out.preemptions = b.timings.preemptions;
      return out;
    }
  }
  out.status = Status(StatusCode::kDeadlineExceeded, "channel did not close in 60 s");
  return out;
}

class WorkerConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::SharedFile("models/stories260K.gguf");
    if (model_.empty()) GTEST_SKIP() << "shared test data missing: models/stories260K.gguf";
    if (access((testing::BinDir() + "/astr-worker").c_str(), X_OK) != 0) {
      GTEST_SKIP() << "astr-worker is not built in " << testing::BinDir();
    }
  }
  std::string model_;
};

TEST_F(WorkerConnectionTest, ConnectReadsInfoAndGreedyOutputMatchesLlamaCpp) {
  Worker worker;
  const std::string address = worker.Start(model_, {"--page-size", "4", "--num-pages", "64"}, "a");
  ASSERT_FALSE(address.empty()) << worker.log();
  auto conn = ConnectWorker(address, 10s);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_EQ((*conn)->address(), address);
  EXPECT_EQ((*conn)->info().num_pages(), 64);
  EXPECT_EQ((*conn)->info().page_size(), 4);
  EXPECT_EQ((*conn)->info().vocab_size(), 512);
  std::vector<std::unique_ptr<WorkerConnection>> workers;
  workers.push_back(std::move(*conn));
  auto s = Scheduler::Create({}, std::move(workers));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto ch = (*s)->Submit(Greedy(5, 1, /*n=*/2));
  ASSERT_TRUE(ch.ok());
  Result r = Collect(ch->get(), 2);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.tokens[0], kGolden);
  EXPECT_EQ(r.tokens[1], kGolden);
}

TEST_F(WorkerConnectionTest, ConnectGivesUpAfterItsTimeoutNamingTheAddress) {
  // Port 1 is privileged: nothing of ours listens there.
  auto conn = ConnectWorker("127.0.0.1:1", 300ms);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kDeadlineExceeded) << conn.status().ToString();
  EXPECT_NE(conn.status().message().find("127.0.0.1:1"), std::string::npos);
}

TEST_F(WorkerConnectionTest, TinyPoolPreemptsAndEveryRequestStillMatchesTheGolden) {
  Worker worker;
  // 8 pages of 4 tokens; each request needs 3 pages (5 prompt + 5 generated - 1 fed).
  const std::string address = worker.Start(model_, {"--page-size", "4", "--num-pages", "8"}, "b");
  ASSERT_FALSE(address.empty()) << worker.log();
  auto conn = ConnectWorker(address, 10s);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  std::vector<std::unique_ptr<WorkerConnection>> workers;
  workers.push_back(std::move(*conn));
  auto s = Scheduler::Create({}, std::move(workers));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 8; ++i) channels.push_back(*(*s)->Submit(Greedy(5, i)));
  for (auto& ch : channels) {
    Result r = Collect(ch.get(), 1);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.tokens[0], kGolden);
  }
  EXPECT_GT((*s)->Stats().preemptions(), 0);
  for (auto give_up = Clock::now() + 5s; Clock::now() < give_up;) {
    if ((*s)->Stats().workers(0).free_pages() == 8) break;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ((*s)->Stats().workers(0).free_pages(), 8);
}

TEST_F(WorkerConnectionTest, KilledWorkersSequencesFinishOnTheOtherWithTheSameTokens) {
  Worker w0, w1;
  const std::string a0 = w0.Start(model_, {"--num-pages", "2048"}, "c0");
  const std::string a1 = w1.Start(model_, {"--num-pages", "2048"}, "c1");
  ASSERT_FALSE(a0.empty()) << w0.log();
  ASSERT_FALSE(a1.empty()) << w1.log();
  // Reference: one undisturbed request on w1 alone.
  std::vector<int32_t> reference;
  {
    auto conn = ConnectWorker(a1, 10s);
    ASSERT_TRUE(conn.ok());
    std::vector<std::unique_ptr<WorkerConnection>> one;
    one.push_back(std::move(*conn));
    auto s = Scheduler::Create({}, std::move(one));
    ASSERT_TRUE(s.ok());
    Result r = Collect((*(*s)->Submit(Greedy(600, 1))).get(), 1);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    reference = r.tokens[0];
    ASSERT_EQ(std::vector<int32_t>(reference.begin(), reference.begin() + 5), kGolden);
  }
  SchedulerOptions options;
  options.worker_down_after_ms = 100;
  options.reconnect_attempt_ms = 50;
  std::vector<std::unique_ptr<WorkerConnection>> both;
  for (const std::string& a : {a0, a1}) {
    auto conn = ConnectWorker(a, 10s);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    both.push_back(std::move(*conn));
  }
  auto s = Scheduler::Create(options, std::move(both));
  ASSERT_TRUE(s.ok());
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 8; ++i) channels.push_back(*(*s)->Submit(Greedy(600, i)));
  for (auto give_up = Clock::now() + 10s; Clock::now() < give_up;) {
    if ((*s)->Stats().workers(0).steps() >= 20) break;
    std::this_thread::sleep_for(1ms);
  }
  w0.Kill();
  int32_t preemptions = 0;
  for (auto& ch : channels) {
    Result r = Collect(ch.get(), 1);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.tokens[0], reference);
    preemptions += r.preemptions;
  }
  EXPECT_EQ(preemptions, 4) << "the four sequences on the killed worker restart on the other";
  EXPECT_FALSE((*s)->Stats().workers(0).up());
}

}  // namespace
}  // namespace astr::sched
