// The scheduler core over real gRPC: ConnectWorker to astr-worker processes (cpu backend,
// stories260K) on loopback. Greedy outputs are checked against llama.cpp's golden continuation
// (/work/shared/models/README.md), through preemption on a tiny pool and through a worker killed
// mid-run.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "scheduler/scheduler.h"
#include "tests/support/test_util.h"

namespace astr::sched {
namespace {

using namespace std::chrono_literals;

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};
// llama.cpp's greedy continuation of kPrompt on stories260K.
const std::vector<int32_t> kGolden = {432, 383, 286, 261, 376};

// One astr-worker (cpu backend, one thread) on 127.0.0.1:0; the address, or "" with the reason in
// the test's output.
std::string StartWorker(testing::ServerProcess* worker, const std::string& model,
                        const std::vector<std::string>& flags, const std::string& tag) {
  std::vector<std::string> args = {"--model",   model, "--listen",  "127.0.0.1:0",
                                   "--backend", "cpu", "--threads", "1"};
  args.insert(args.end(), flags.begin(), flags.end());
  StatusOr<std::string> address = worker->Start("astr-worker", args, "worker_connection_" + tag);
  if (!address.ok()) {
    ADD_FAILURE() << address.status().ToString();
    return "";
  }
  return *address;
}

SchedRequest Greedy(int max_tokens, uint64_t seed, int n = 1) {
  SchedRequest r;
  r.prompt = kPrompt;
  r.sampling.temperature = 0;
  r.sampling.top_p = 1;
  r.sampling.repetition_penalty = 1;
  r.sampling.seed = seed;
  r.sampling.ignore_eos = true;
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
    ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
    model_ = path;
    if (access((testing::BinDir() + "/astr-worker").c_str(), X_OK) != 0) {
      GTEST_SKIP() << "astr-worker is not built in " << testing::BinDir();
    }
  }
  std::string model_;
};

TEST_F(WorkerConnectionTest, ConnectReadsInfoAndGreedyOutputMatchesLlamaCpp) {
  testing::ServerProcess worker;
  const std::string address =
      StartWorker(&worker, model_, {"--page-size", "4", "--num-pages", "64"}, "a");
  ASSERT_FALSE(address.empty());
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
  testing::ServerProcess worker;
  // 8 pages of 4 tokens; each request needs 3 pages (5 prompt + 5 generated - 1 fed).
  const std::string address =
      StartWorker(&worker, model_, {"--page-size", "4", "--num-pages", "8"}, "b");
  ASSERT_FALSE(address.empty());
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
  testing::ServerProcess w0, w1;
  const std::string a0 = StartWorker(&w0, model_, {"--num-pages", "2048"}, "c0");
  const std::string a1 = StartWorker(&w1, model_, {"--num-pages", "2048"}, "c1");
  ASSERT_FALSE(a0.empty());
  ASSERT_FALSE(a1.empty());
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

TEST_F(WorkerConnectionTest, StoppedWorkerIsCaughtByTheStepTimeoutAndItsSequencesMove) {
  testing::ServerProcess w0, w1;
  const std::string a0 = StartWorker(&w0, model_, {"--num-pages", "2048"}, "t0");
  const std::string a1 = StartWorker(&w1, model_, {"--num-pages", "2048"}, "t1");
  ASSERT_FALSE(a0.empty());
  ASSERT_FALSE(a1.empty());
  SchedulerOptions options;
  options.worker_down_after_ms = 300;
  options.reconnect_attempt_ms = 100;
  std::vector<std::unique_ptr<WorkerConnection>> both;
  for (const std::string& a : {a0, a1}) {
    auto conn = ConnectWorker(a, 10s, /*step_timeout=*/300ms);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    both.push_back(std::move(*conn));
  }
  auto s = Scheduler::Create(options, std::move(both));
  ASSERT_TRUE(s.ok());
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(*(*s)->Submit(Greedy(400, i)));
  for (auto give_up = Clock::now() + 10s; Clock::now() < give_up;) {
    if ((*s)->Stats().workers(0).steps() >= 10) break;
    std::this_thread::sleep_for(1ms);
  }
  // The process stays alive with its connection open but answers nothing: without a step timeout
  // the loop would wait on it forever.
  ASSERT_EQ(kill(w0.pid(), SIGSTOP), 0);
  for (auto& ch : channels) {
    Result r = Collect(ch.get(), 1);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_GE(r.tokens[0].size(), kGolden.size());
    EXPECT_EQ(std::vector<int32_t>(r.tokens[0].begin(), r.tokens[0].begin() + 5), kGolden);
    EXPECT_EQ(r.tokens[0].size(), 400u);
  }
  EXPECT_FALSE((*s)->Stats().workers(0).up());
  kill(w0.pid(), SIGCONT);
}

}  // namespace
}  // namespace astr::sched
