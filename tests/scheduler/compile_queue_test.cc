// front/compile_queue: compiles off the caller's thread, fair between clients (the least recently
// served goes first, one client's share bounded, its waiting queue bounded with
// RESOURCE_EXHAUSTED), one compile for requests of the same constraint, and cancellation that
// ends a wait at once and stops a compile nobody waits for.
#include "scheduler/front/compile_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "scheduler/compile_sandbox.h"
#include "scheduler/front/request_builder.h"
#include "tests/support/test_util.h"

namespace astr::front {
namespace {

using sched::ConstraintSpec;
using std::chrono::milliseconds;

constexpr char kGpt2[] = "tokenizers/gguf/ggml-vocab-gpt-2.gguf";

// What the done callbacks reported, in the order they ran.
class Recorder {
 public:
  CompileQueue::Done For(std::string name) {
    return [this, name = std::move(name)](CompileQueue::Result r) {
      std::lock_guard<std::mutex> lock(mu_);
      order_.push_back(name);
      results_.emplace(name, std::move(r));
      cv_.notify_all();
    };
  }
  // Waits until `n` callbacks ran (false after 60 s).
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return order_.size() >= n; });
  }
  std::vector<std::string> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }
  CompileQueue::Result result(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = results_.find(name);
    if (it == results_.end()) return InternalError("no result for " + name);
    return it->second;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> order_;
  std::map<std::string, CompileQueue::Result> results_;
};

// A choice whose compile takes a while on a 50k vocabulary (distinct for each seed).
ConstraintSpec Slow(uint32_t seed, size_t words = 4000) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> letter('a', 'z');
  ConstraintSpec spec{.kind = ConstraintSpec::Kind::kChoice};
  for (size_t i = 0; i < words; ++i) {
    std::string w = std::to_string(i) + "_";
    for (int k = 0; k < 10; ++k) w += static_cast<char>(letter(rng));
    spec.choices.push_back(std::move(w));
  }
  return spec;
}

ConstraintSpec Small(const std::string& word) {
  return {.kind = ConstraintSpec::Kind::kChoice, .choices = {word, word + "s"}};
}

class CompileQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::SharedFile(kGpt2);
    if (path.empty()) GTEST_SKIP() << "shared test data missing: " << kGpt2;
    auto tok = tok::Tokenizer::Load(path);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    sched::ConstraintCompilerOptions options{.threads = 1};
    options.budget.time = milliseconds(120000);
    options.budget.memory_bytes = int64_t{4} << 30;  // not what this tests (and ASan's shadow)
    auto c = MakeConstraintCompiler(**tok, (*tok)->vocab_size(), {50256}, options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    compiler_ = std::move(*c);
  }

  // Waits until `queue` runs `n` compiles (false after 60 s).
  static bool WaitRunning(const CompileQueue& queue, int64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (queue.running() != n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return true;
  }

  std::shared_ptr<const sched::ConstraintCompiler> compiler_;
};

// One thread: client a queues three compiles, then b one. b's runs second: after the compile
// that was running, before a's others. Only a1 must outlast the submits (microseconds); a2 and a3
// are small, so that the test stays seconds under TSan (three full Slow compiles took over 60 s
// there).
TEST_F(CompileQueueTest, TheLeastRecentlyServedClientGoesFirst) {
  Recorder rec;
  CompileQueue queue(compiler_, {.workers = 1, .per_client = 1, .max_queued_per_client = 8});
  std::vector<std::shared_ptr<CompileQueue::Ticket>> tickets;
  tickets.push_back(queue.Submit("a", Slow(1, 1000), "f", rec.For("a1")));
  tickets.push_back(queue.Submit("a", Slow(2, 100), "f", rec.For("a2")));
  tickets.push_back(queue.Submit("a", Slow(3, 100), "f", rec.For("a3")));
  tickets.push_back(queue.Submit("b", Small("yes"), "f", rec.For("b1")));
  ASSERT_TRUE(rec.WaitFor(4));
  EXPECT_EQ(rec.order(), (std::vector<std::string>{"a1", "b1", "a2", "a3"}));
  for (const char* name : {"a1", "a2", "a3", "b1"}) {
    EXPECT_TRUE(rec.result(name).ok()) << name << ": " << rec.result(name).status().ToString();
  }
}

// Two threads, one client: its compiles run one at a time; another client's takes the free one.
TEST_F(CompileQueueTest, OneClientRunsAtMostItsShare) {
  Recorder rec;
  CompileQueue queue(compiler_, {.workers = 2, .per_client = 1, .max_queued_per_client = 8});
  auto a1 = queue.Submit("a", Slow(11), "f", rec.For("a1"));
  auto a2 = queue.Submit("a", Slow(12), "f", rec.For("a2"));
  ASSERT_TRUE(WaitRunning(queue, 1));
  EXPECT_EQ(queue.running(), 1);  // a2 waits for a1, though a thread is free
  EXPECT_EQ(queue.queued(), 1);
  auto b1 = queue.Submit("b", Small("no"), "f", rec.For("b1"));
  ASSERT_TRUE(rec.WaitFor(3));
  EXPECT_EQ(rec.order().front(), "b1");
}

TEST_F(CompileQueueTest, AFullQueueIsResourceExhaustedAtOnce) {
  Recorder rec;
  CompileQueue queue(compiler_, {.workers = 1, .per_client = 1, .max_queued_per_client = 2});
  auto a1 = queue.Submit("a", Slow(21), "sampling.constraint.choice.choices", rec.For("a1"));
  ASSERT_TRUE(WaitRunning(queue, 1));
  auto a2 = queue.Submit("a", Slow(22), "sampling.constraint.choice.choices", rec.For("a2"));
  auto a3 = queue.Submit("a", Slow(23), "sampling.constraint.choice.choices", rec.For("a3"));
  auto a4 = queue.Submit("a", Slow(24), "sampling.constraint.choice.choices", rec.For("a4"));
  EXPECT_EQ(a4, nullptr);  // answered before Submit returned
  EXPECT_EQ(rec.order(), std::vector<std::string>{"a4"});
  EXPECT_EQ(rec.result("a4").status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(rec.result("a4").status().message(),
            "sampling.constraint.choice.choices: this client already has 2 constraint compiles "
            "waiting (--grammar-max-queued-per-client); retry later");
  EXPECT_EQ(compiler_->stats().refused_busy, 1);
  // Another client is not refused.
  auto b1 = queue.Submit("b", Small("maybe"), "f", rec.For("b1"));
  EXPECT_NE(b1, nullptr);
  ASSERT_TRUE(rec.WaitFor(5));
  EXPECT_TRUE(rec.result("b1").ok());
}

// The waiting constraints' text is bounded for all clients together (a flood from many
// connections); one constraint alone always gets in.
TEST_F(CompileQueueTest, TheWaitingTextIsBoundedForAllClients) {
  Recorder rec;
  const ConstraintSpec big = Slow(72);  // about 60 KB of choices
  int64_t bytes = 0;
  for (const std::string& c : big.choices) bytes += static_cast<int64_t>(c.size());
  CompileQueue queue(compiler_, {.workers = 1,
                                 .per_client = 1,
                                 .max_queued_per_client = 8,
                                 .max_queued_bytes = bytes + bytes / 2});
  auto running = queue.Submit("a", Slow(71), "f", rec.For("running"));
  ASSERT_TRUE(WaitRunning(queue, 1));
  auto b = queue.Submit("b", big, "f", rec.For("b"));  // waits: within the bound
  ASSERT_NE(b, nullptr);
  auto c = queue.Submit("c", Slow(73), "f", rec.For("c"));  // would pass it
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(rec.result("c").status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(rec.result("c").status().message(),
            "f: the constraints waiting to compile would pass " +
                std::to_string(bytes + bytes / 2) +
                " bytes of text (--grammar-max-queued-mb); retry later");
  auto d = queue.Submit("d", Small("fits"), "f", rec.For("d"));  // a small one still fits
  EXPECT_NE(d, nullptr);
  ASSERT_TRUE(rec.WaitFor(4));
  EXPECT_TRUE(rec.result("b").ok());
  EXPECT_TRUE(rec.result("d").ok());
}

TEST_F(CompileQueueTest, RequestsForOneConstraintShareItsCompile) {
  Recorder rec;
  CompileQueue queue(compiler_, {.workers = 2, .per_client = 1, .max_queued_per_client = 1});
  auto a = queue.Submit("a", Slow(31), "f", rec.For("a"));
  auto b = queue.Submit("b", Slow(31), "f", rec.For("b"));
  auto a_again = queue.Submit("a", Slow(31), "f", rec.For("a again"));  // not counted as queued
  ASSERT_NE(a_again, nullptr);
  ASSERT_TRUE(rec.WaitFor(3));
  ASSERT_TRUE(rec.result("a").ok()) << rec.result("a").status().ToString();
  EXPECT_EQ(rec.result("b")->get(), rec.result("a")->get());
  EXPECT_EQ(rec.result("a again")->get(), rec.result("a")->get());
  EXPECT_EQ(compiler_->stats().compiles, 1);
  // Later: from the cache, at once.
  auto later = queue.Submit("c", Slow(31), "f", rec.For("later"));
  EXPECT_EQ(later, nullptr);
  EXPECT_EQ(rec.result("later")->get(), rec.result("a")->get());
}

TEST_F(CompileQueueTest, CancelEndsTheWaitAndStopsACompileNobodyWaitsFor) {
  if (!sched::kSandboxAvailable) GTEST_SKIP() << "no compile sandbox (ASan): a compile runs on";
  Recorder rec;
  CompileQueue queue(compiler_, {.workers = 1, .per_client = 1, .max_queued_per_client = 8});
  // Long enough that only a cancel ends it within the test.
  auto running = queue.Submit("a", Slow(41, 16000), "f", rec.For("running"));
  auto waiting = queue.Submit("a", Slow(42), "f", rec.For("waiting"));
  ASSERT_TRUE(WaitRunning(queue, 1));
  const auto start = std::chrono::steady_clock::now();
  waiting->Cancel();  // queued behind a's share: ends without waiting for it
  ASSERT_TRUE(rec.WaitFor(1));
  EXPECT_EQ(rec.order().front(), "waiting");
  EXPECT_EQ(rec.result("waiting").status().code(), StatusCode::kCancelled);
  running->Cancel();
  ASSERT_TRUE(rec.WaitFor(2));
  // Uncancelled, its trial alone would take about 1.5 s, then the same again here.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  EXPECT_EQ(rec.result("running").status().code(), StatusCode::kCancelled);
  EXPECT_EQ(compiler_->stats().compiles, 0);
}

// A cancel of one request leaves the compile running for another that waits for it.
TEST_F(CompileQueueTest, ASharedCompileRunsOnForTheRequestStillWaiting) {
  Recorder rec;
  CompileQueue queue(compiler_, {.workers = 1, .per_client = 1, .max_queued_per_client = 8});
  auto a = queue.Submit("a", Slow(51), "f", rec.For("a"));
  auto b = queue.Submit("b", Slow(51), "f", rec.For("b"));
  a->Cancel();
  ASSERT_TRUE(rec.WaitFor(2));
  EXPECT_EQ(rec.result("a").status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(rec.result("b").ok()) << rec.result("b").status().ToString();
}

// Stopping the queue ends every wait.
TEST_F(CompileQueueTest, DestructionEndsEveryWait) {
  if (!sched::kSandboxAvailable) GTEST_SKIP() << "no compile sandbox (ASan): a compile runs on";
  Recorder rec;
  {
    CompileQueue queue(compiler_, {.workers = 1, .per_client = 1, .max_queued_per_client = 8});
    queue.Submit("a", Slow(61, 16000), "f", rec.For("a1"));
    queue.Submit("a", Slow(62), "f", rec.For("a2"));
    queue.Submit("b", Slow(63), "f", rec.For("b1"));
    ASSERT_TRUE(WaitRunning(queue, 1));
  }
  EXPECT_EQ(rec.order().size(), 3u);
  for (const char* name : {"a1", "a2", "b1"}) {
    EXPECT_EQ(rec.result(name).status().code(), StatusCode::kCancelled) << name;
  }
}

}  // namespace
}  // namespace astr::front
