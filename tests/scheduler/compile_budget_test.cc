// Bounded constraint compiles (scheduler/constraint.h, scheduler/compile_sandbox.h): the time and
// memory budgets are enforced while the compile runs (its child process is killed), a cancel
// stops it, the size limits answer before anything compiles, an accepted compile still gives the
// masks its constraint implies, and the cache charges what the compiled constraints really hold
// (the heap growth this process measures itself) and gives memory back when it drops them.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/compile_sandbox.h"
#include "scheduler/constraint.h"
#include "scheduler/front/request_builder.h"
#include "tests/support/test_util.h"

namespace astr::sched {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kGpt2[] = "tokenizers/gguf/ggml-vocab-gpt-2.gguf";
constexpr int32_t kGpt2Eos = 50256;

struct Loaded {
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  std::unique_ptr<ConstraintCompiler> compiler;
};

Loaded Load(const std::string& path, const ConstraintCompilerOptions& options) {
  Loaded l;
  auto tok = tok::Tokenizer::Load(path);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  if (!tok.ok()) return l;
  l.tokenizer = *tok;
  auto c =
      front::MakeConstraintCompiler(*l.tokenizer, l.tokenizer->vocab_size(), {kGpt2Eos}, options);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (c.ok()) l.compiler = std::move(*c);
  return l;
}

// `n` distinct lowercase words of `lo` to `hi` letters, the same for the same seed.
std::vector<std::string> Words(size_t n, uint32_t seed, int lo = 6, int hi = 14) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(lo, hi), letter('a', 'z');
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string w = std::to_string(i) + "_";
    for (int k = len(rng); k > 0; --k) w += static_cast<char>(letter(rng));
    out.push_back(std::move(w));
  }
  return out;
}

ConstraintSpec Choice(std::vector<std::string> words) {
  return {.kind = ConstraintSpec::Kind::kChoice, .choices = std::move(words)};
}

ConstraintSpec EnumSchema(const std::vector<std::string>& words) {
  return {.kind = ConstraintSpec::Kind::kJsonSchema,
          .text = nlohmann::json{{"enum", words}}.dump()};
}

#if defined(ASTR_ADDRESS_SANITIZER) || defined(ASTR_THREAD_SANITIZER)
constexpr bool kSanitized = true;  // their allocator keeps its own books and quarantines frees
#else
constexpr bool kSanitized = false;
#endif

int64_t StatusKb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(std::string(key) + ":", 0) == 0)
      return std::stoll(line.substr(line.find(':') + 1));
  }
  return -1;
}

TEST(CompileBudgetTest, OverTimeIsRefusedWhileItRunsNamingTheFieldAndTheBudget) {
  if (!kSandboxAvailable)
    GTEST_SKIP() << "no compile sandbox in this build (ASan: compile_sandbox.h)";
  ASTR_REQUIRE_SHARED_FILE(path, kGpt2);
  ConstraintCompilerOptions options{.threads = 1};
  options.budget.time = milliseconds(200);
  Loaded l = Load(path, options);
  ASSERT_NE(l.compiler, nullptr);
  // Several seconds of work on a 50k vocabulary (the same words compile in full below, with a
  // budget that lets them).
  const ConstraintSpec spec = Choice(Words(16000, 1));
  const auto start = Clock::now();
  auto r = l.compiler->Compile(spec, "structured_outputs.choice");
  const auto took = Clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "structured_outputs.choice: compiling it takes longer than the budget of 200 ms "
            "(--grammar-max-compile-ms)");
  // The child was killed at half the budget, not left to finish.
  EXPECT_LT(took, milliseconds(200 + 800));
  EXPECT_EQ(l.compiler->stats().over_time, 1);
  EXPECT_EQ(l.compiler->stats().compiles, 0);
  EXPECT_EQ(l.compiler->Lookup(spec), nullptr);
}

TEST(CompileBudgetTest, OverMemoryIsRefusedNamingTheBudget) {
  if (!kSandboxAvailable)
    GTEST_SKIP() << "no compile sandbox in this build (ASan: compile_sandbox.h)";
  ASTR_REQUIRE_SHARED_FILE(path, kGpt2);
  ConstraintCompilerOptions options{.threads = 1};
  options.budget.time = milliseconds(60000);
  options.budget.memory_bytes = int64_t{4} << 20;
  Loaded l = Load(path, options);
  ASSERT_NE(l.compiler, nullptr);
  auto r = l.compiler->Compile(EnumSchema(Words(6000, 2)), "response_format.json_schema.schema");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "response_format.json_schema.schema: compiling it needs more memory than the budget "
            "of 4 MiB (--grammar-max-compile-mb)");
  EXPECT_EQ(l.compiler->stats().over_memory, 1);
}

TEST(CompileBudgetTest, CancelStopsARunningCompile) {
  if (!kSandboxAvailable)
    GTEST_SKIP() << "no compile sandbox in this build (ASan: compile_sandbox.h)";
  ASTR_REQUIRE_SHARED_FILE(path, kGpt2);
  ConstraintCompilerOptions options{.threads = 1};
  options.budget.time = milliseconds(120000);
  Loaded l = Load(path, options);
  ASSERT_NE(l.compiler, nullptr);
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancelled.store(true);
  });
  const auto start = Clock::now();
  auto r = l.compiler->Compile(Choice(Words(16000, 3)), "c", &cancelled);
  const auto took = Clock::now() - start;
  canceller.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_LT(took, milliseconds(100 + 900));
  EXPECT_EQ(l.compiler->stats().cancelled, 1);
}

TEST(CompileBudgetTest, SizeLimitsAnswerBeforeAnythingCompiles) {
  ASTR_REQUIRE_SHARED_FILE(path, kGpt2);
  Loaded l = Load(path, {.threads = 1});
  ASSERT_NE(l.compiler, nullptr);
  struct Case {
    ConstraintSpec spec;
    std::string want;
  };
  std::vector<std::string> many(kMaxChoices + 1, "x");
  std::vector<std::string> long_ones = {std::string(kMaxChoiceBytes, 'a'), "b"};
  const std::vector<Case> cases = {
      {Choice(many), "f: 16385 choices, at most 16384"},
      {Choice(long_ones), "f: 1048577 bytes of choices, at most 1048576"},
      {{.kind = ConstraintSpec::Kind::kRegex, .text = std::string(kMaxRegexBytes + 1, 'a')},
       "f: 65537 bytes, at most 65536"},
      {{.kind = ConstraintSpec::Kind::kGrammar,
        .text = "root ::= \"a\"" + std::string(kMaxConstraintTextBytes, ' ')},
       "f: 1048588 bytes, at most 1048576"},
      // Values counted wherever they nest.
      {{.kind = ConstraintSpec::Kind::kJsonSchema,
        .text = nlohmann::json{{"type", "object"},
                               {"properties",
                                {{"a", {{"enum", Words(10000, 4)}}},
                                 {"b", {{"items", {{"enum", Words(6384, 5)}}}}},
                                 {"c", {{"const", "x"}}}}}}
                    .dump()},
       "f: 16385 enum and const values, at most 16384"},
  };
  for (const Case& c : cases) {
    const auto start = Clock::now();
    auto r = l.compiler->Compile(c.spec, "f");
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.want);
    EXPECT_LT(Clock::now() - start, milliseconds(2000)) << c.want;
  }
  EXPECT_EQ(l.compiler->stats().too_large, static_cast<int64_t>(cases.size()));
  EXPECT_EQ(l.compiler->stats().compiles, 0);
}

// A compile within the budget gives the constraint's masks: each choice's own tokens are accepted
// to the end, where only EOS is allowed; a word that is no choice is refused.
TEST(CompileBudgetTest, AcceptedCompileEnforcesItsConstraint) {
  ASTR_REQUIRE_SHARED_FILE(path, kGpt2);
  Loaded l = Load(path, {.threads = 2});
  ASSERT_NE(l.compiler, nullptr);
  const std::vector<std::string> words = Words(300, 6);
  auto compiled = l.compiler->Compile(Choice(words), "c");
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  for (size_t i = 0; i < words.size(); i += 37) {
    ConstraintMatcher m(*compiled);
    for (int32_t t : l.tokenizer->Encode(words[i])) ASSERT_TRUE(m.Accept(t)) << words[i];
    std::vector<uint32_t> mask(static_cast<size_t>(ConstraintMaskWords(m.vocab_size())));
    m.FillMask(mask);
    for (int32_t t = 0; t < m.vocab_size(); ++t) {
      ASSERT_EQ((mask[t / 32] >> (t % 32)) & 1u, t == kGpt2Eos ? 1u : 0u) << words[i] << " " << t;
    }
  }
  ConstraintMatcher other(*compiled);
  EXPECT_FALSE(other.Accept(l.tokenizer->TokenToId("the")));
  EXPECT_EQ(l.compiler->stats().compiles, 1);
  // The second time comes from the cache.
  auto again = l.compiler->Compile(Choice(words), "c");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), compiled->get());
  EXPECT_EQ(l.compiler->stats().cache_hits, 1);
}

// The crash of a compile (here: its process killed, as a library bug or a stack overflow would
// end it) is an error for that request; the caller is untouched.
TEST(CompileBudgetTest, ACrashedCompileIsAnErrorNotACrash) {
  const SandboxResult r = RunInSandbox(
      [] {
        raise(SIGKILL);
        return SandboxWork{};
      },
      SandboxLimits{milliseconds(5000), int64_t{64} << 20}, nullptr);
  EXPECT_EQ(r.outcome, SandboxResult::Outcome::kCrashed);
  EXPECT_NE(r.error.find("signal 9"), std::string::npos) << r.error;
  const SandboxResult failed = RunInSandbox(
      [] {
        SandboxWork w;
        w.error = "no such rule";
        return w;
      },
      SandboxLimits{milliseconds(5000), int64_t{64} << 20}, nullptr);
  EXPECT_EQ(failed.outcome, SandboxResult::Outcome::kFailed);
  EXPECT_EQ(failed.error, "no such rule");
}

// The cache's charge for a compiled constraint is the heap it holds here, within a factor of
// two of what this process measures; past its limit the least recent entry goes.
TEST(CompileBudgetTest, CacheChargesTheHeapItHolds) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's allocator: no heap count to compare with";
  ASTR_REQUIRE_SHARED_FILE(path, kGpt2);
  ConstraintCompilerOptions options{.threads = 1, .cache_bytes = int64_t{40} << 20};
  Loaded l = Load(path, options);
  ASSERT_NE(l.compiler, nullptr);
  malloc_trim(0);
  const int64_t before = HeapInUseBytes();
  const ConstraintSpec first = EnumSchema(Words(2500, 7));
  auto a = l.compiler->Compile(first, "s");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int64_t grown = HeapInUseBytes() - before;
  const int64_t charged = l.compiler->stats().cache_bytes;
  ASSERT_GT(grown, int64_t{1} << 20);  // a few MiB of token masks
  std::cout << "heap grown " << grown << " B, charged " << charged << " B\n";
  EXPECT_GT(charged, grown / 2);
  EXPECT_LT(charged, grown * 2);
  a->reset();
  // As many others as the limit holds push it out (a lookup would make it the most recent).
  const int64_t others = options.cache_bytes / charged + 1;
  for (int64_t i = 0; i < others; ++i) {
    ASSERT_TRUE(l.compiler->Compile(EnumSchema(Words(2500, 8 + i)), "s").ok());
    EXPECT_LE(l.compiler->stats().cache_bytes, options.cache_bytes);
  }
  EXPECT_EQ(l.compiler->Lookup(first), nullptr);
  EXPECT_NE(l.compiler->Lookup(EnumSchema(Words(2500, 8 + others - 1))), nullptr);
}

// Refused and dropped compiles leave no memory behind in this process.
TEST(CompileBudgetTest, MemoryComesBackAfterRefusalsAndEvictions) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's allocator holds freed memory in quarantine";
  ASTR_REQUIRE_SHARED_FILE(path, kGpt2);
  ConstraintCompilerOptions options{.threads = 2, .cache_bytes = int64_t{16} << 20};
  options.budget.time = milliseconds(120000);
  options.budget.memory_bytes = int64_t{96} << 20;
  Loaded l = Load(path, options);
  ASSERT_NE(l.compiler, nullptr);
  malloc_trim(0);
  const int64_t start_kb = StatusKb("VmRSS");
  for (uint32_t seed = 100; seed < 104; ++seed) {
    // Over the memory budget (a few hundred MiB in full), whatever the machine's speed.
    auto over = l.compiler->Compile(Choice(Words(16000, seed, 60, 60)), "c");
    EXPECT_FALSE(over.ok());
    // Accepted, then pushed out of the cache by the next ones.
    auto fits = l.compiler->Compile(EnumSchema(Words(2500, seed)), "s");
    EXPECT_TRUE(fits.ok()) << fits.status().ToString();
  }
  EXPECT_EQ(l.compiler->stats().over_memory, 4);
  EXPECT_LE(l.compiler->stats().cache_bytes, options.cache_bytes);
  const int64_t end_kb = StatusKb("VmRSS");
  // What stays is at most the cache's limit and the allocator's slack.
  EXPECT_LT(end_kb - start_kb, (int64_t{16} << 10) + (int64_t{64} << 10))
      << start_kb << " kB -> " << end_kb << " kB";
}

}  // namespace
}  // namespace astr::sched
