// BatchPlanner as iteration tables (CONVENTIONS #10): the real planner and page pool at toy
// sizes, a FakeWorker that checks every plan, and the expected plan of every step written by hand.
//
// A step is summarized as its entries in batch order, "A0@3+1*" = sample 0 of request A feeds
// positions [3, 3+1) and samples (*), "A0@0+4~3" = feeds [0, 4) of which 3 rows score prompt
// tokens (logprob_start), then "+[..]" the sequences started ("A0~5": scoring from position 5)
// and "-[..]" released.
#include "scheduler/batch_planner.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "tests/scheduler/fake_worker.h"

namespace astr::sched {
namespace {

using testing::FakeToken;
using testing::FakeWorker;
using testing::FakeWorkerConfig;

class PlannerHarness {
 public:
  // `window` (tokens, tables): sliding-window page groups; max_step_tokens is the prefill chunk.
  PlannerHarness(StepLimits limits, int64_t num_pages, int32_t page_size, bool prefix_cache = false,
                 KvWindow window = {})
      : queues_(num_pages, page_size,
                {.tokens = window.tokens,
                 .tables = window.tables,
                 .max_step_tokens = limits.prefill_chunk}),
        planner_(limits),
        worker_(Config(limits, num_pages, page_size, window)) {
    if (prefix_cache) queues_.EnableCache();
  }

  ~PlannerHarness() {
    // Sequences hold pages of queues_.pool: drop them first.
    queues_.running.clear();
    queues_.waiting.clear();
    requests_.clear();
  }

  RequestState* Add(const std::string& label, int prompt_len, int max_tokens, uint64_t seed,
                    int priority = 0, int n = 1, int logprob_start = 0) {
    std::vector<int32_t> prompt(prompt_len);
    for (int i = 0; i < prompt_len; ++i) prompt[i] = 100 + i;
    return AddPrompt(label, std::move(prompt), max_tokens, seed, priority, n, logprob_start);
  }

  RequestState* AddPrompt(const std::string& label, std::vector<int32_t> prompt, int max_tokens,
                          uint64_t seed, int priority = 0, int n = 1, int logprob_start = 0,
                          std::string cache_salt = "") {
    auto r = std::make_unique<RequestState>();
    r->key = next_key_++;
    r->req.prompt = std::move(prompt);
    r->req.cache_salt = std::move(cache_salt);
    r->req.sampling.seed = seed;
    r->req.max_tokens = max_tokens;
    r->req.priority = priority;
    r->req.n = n;
    r->req.logprob_start = logprob_start;
    r->open_samples = n;
    for (int i = 0; i < n; ++i) {
      auto seq = std::make_unique<Sequence>();
      seq->request = r.get();
      seq->sample_index = i;
      seq->worker = 0;
      labels_[seq.get()] = label + std::to_string(i);
      queues_.Enqueue(seq.get());
      r->samples.push_back(std::move(seq));
    }
    requests_.push_back(std::move(r));
    return requests_.back().get();
  }

  // Plans one step, runs it on the fake worker, applies the tokens like the loop does (a sample
  // ends at max_tokens) and returns the step's summary.
  std::string Step() {
    planner_.Plan(&queues_, ++step_, Clock::now(), &planned_, &outcome_);
    ToProto(planned_, &plan_);  // what the worker receives
    for (Sequence* seq : queues_.running) ids_[seq->live_id] = labels_[seq];
    v1::StepResult result = worker_.Execute(plan_);
    EXPECT_EQ(result.error_code(), 0) << result.error_message();
    EXPECT_EQ(result.samples_size(), static_cast<int>(outcome_.sampling.size()));
    ApplyScores(result);
    for (size_t i = 0;
         i < outcome_.sampling.size() && i < static_cast<size_t>(result.samples_size()); ++i) {
      Sequence* seq = outcome_.sampling[i];
      EXPECT_EQ(result.samples(static_cast<int>(i)).live_id(), seq->live_id);
      if (seq->sample_index == 0 && seq->request->req.logprob_start > 0) {
        EXPECT_EQ(seq->request->prompt_scores_sent,
                  seq->num_prompt_tokens() - seq->request->req.logprob_start)
            << "sample 0 samples before its prompt is scored";
      }
      --seq->in_flight;
      seq->generated.push_back(result.samples(static_cast<int>(i)).token_id());
      if (static_cast<int32_t>(seq->generated.size()) == seq->request->req.max_tokens) {
        queues_.Remove(seq);
        seq->state = Sequence::State::kDone;
      }
    }
    return Summary();
  }

  bool Done() const {
    for (const auto& r : requests_) {
      for (const auto& s : r->samples) {
        if (s->state != Sequence::State::kDone) return false;
      }
    }
    return queues_.release.empty();
  }

  // The tokens a request's sample must have produced, computed from the fake's formula alone.
  static std::vector<int32_t> Expected(const RequestState& r, int sample) {
    std::vector<int32_t> out;
    const int prompt = static_cast<int>(r.req.prompt.size());
    for (int k = 0; k < r.req.max_tokens; ++k) {
      out.push_back(FakeToken(sample, prompt + k, r.req.sampling.seed, kVocab));
    }
    return out;
  }

  // The prompt positions delivered for `r`, in delivery order.
  const std::vector<int32_t>& scored(const RequestState* r) { return scored_[r]; }

  WorkerQueues& queues() { return queues_; }
  void SetFairShare(FairShare* fair) { planner_.set_fair_share(fair); }
  const v1::StepPlan& plan() const { return plan_; }
  const PlanOutcome& outcome() const { return outcome_; }
  FakeWorker& worker() { return worker_; }

  static constexpr int32_t kVocab = 1000;

 private:
  static FakeWorkerConfig Config(StepLimits limits, int64_t num_pages, int32_t page_size,
                                 KvWindow window) {
    FakeWorkerConfig c;
    c.window_tables = window.tables;
    c.window_tokens = window.tokens;
    c.num_pages = num_pages;
    c.page_size = page_size;
    c.max_batch = static_cast<int32_t>(limits.max_sequences);
    c.max_batch_tokens = static_cast<int32_t>(limits.max_tokens);
    c.vocab_size = kVocab;
    return c;
  }

  // The scores of the result, as the loop takes them: each run's positions come in order and
  // continue what was delivered.
  void ApplyScores(const v1::StepResult& result) {
    int k = 0;
    for (const PlanOutcome::ScoredRun& run : outcome_.scoring) {
      RequestState* r = run.seq->request;
      for (int32_t j = 0; j < run.count && k < result.prompt_scores_size(); ++j, ++k) {
        const v1::PromptTokenScore& score = result.prompt_scores(k);
        EXPECT_EQ(score.live_id(), run.live_id);
        EXPECT_EQ(score.position(), r->req.logprob_start + r->prompt_scores_sent);
        scored_[r].push_back(score.position());
        ++r->prompt_scores_sent;
      }
    }
    EXPECT_EQ(k, result.prompt_scores_size());
  }

  std::string Summary() {
    std::string s;
    for (const v1::StepEntry& e : plan_.entries()) {
      if (!s.empty()) s += ' ';
      s += ids_[e.live_id()] + "@" + std::to_string(e.start_position()) + "+" +
           std::to_string(e.num_tokens());
      for (const PlanOutcome::ScoredRun& run : outcome_.scoring) {
        if (run.live_id == e.live_id()) s += "~" + std::to_string(run.count);
      }
      if (e.sample()) s += "*";
    }
    auto list = [&](const char* tag, const auto& ids) {
      if (ids.empty()) return;
      if (!s.empty()) s += ' ';
      s += tag;
      s += '[';
      for (int i = 0; i < ids.size(); ++i) s += (i ? " " : "") + ids_[ids[i]];
      s += ']';
    };
    if (plan_.start_size() > 0) {
      if (!s.empty()) s += ' ';
      s += "+[";
      for (int i = 0; i < plan_.start_size(); ++i) {
        const v1::SequenceStart& st = plan_.start(i);
        s += (i ? " " : "") + ids_[st.live_id()];
        if (st.score_from() > 0) s += "~" + std::to_string(st.score_from());
      }
      s += ']';
    }
    list("-", plan_.release());
    return s;
  }

  WorkerQueues queues_;
  BatchPlanner planner_;
  FakeWorker worker_;
  PlannedStep planned_;
  v1::StepPlan plan_;  // its wire form
  PlanOutcome outcome_;
  uint64_t step_ = 0;
  uint64_t next_key_ = 1;
  std::vector<std::unique_ptr<RequestState>> requests_;
  std::map<const Sequence*, std::string> labels_;
  std::map<uint64_t, std::string> ids_;
  std::map<const RequestState*, std::vector<int32_t>> scored_;
};

// Steps `h` until every request is done, then checks every plan passed the fake's checks, every
// sample's tokens and every scoring request's delivered positions; adds the preemptions.
void RunToCompletion(PlannerHarness* h, const std::vector<RequestState*>& requests, uint32_t trial,
                     int64_t* preemptions) {
  int steps = 0;
  while (!h->Done() && steps < 3000) {
    h->Step();
    ++steps;
  }
  ASSERT_TRUE(h->Done()) << "trial " << trial << " did not finish in 3000 steps";
  const auto violations = h->worker().violations();
  ASSERT_TRUE(violations.empty()) << "trial " << trial << ": " << violations.front();
  for (RequestState* r : requests) {
    *preemptions += r->preemptions;
    for (int i = 0; i < r->req.n; ++i) {
      EXPECT_EQ(r->samples[i]->generated, PlannerHarness::Expected(*r, i))
          << "trial " << trial << " request " << r->key << " sample " << i;
    }
    std::vector<int32_t> positions;
    for (int32_t p = r->req.logprob_start;
         r->req.logprob_start > 0 && p < static_cast<int32_t>(r->req.prompt.size()); ++p) {
      positions.push_back(p);
    }
    EXPECT_EQ(h->scored(r), positions) << "trial " << trial << " request " << r->key;
  }
}

void ExpectTable(PlannerHarness* h, const std::vector<std::string>& table) {
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(h->Step(), table[i]) << "step " << i + 1;
  }
  EXPECT_TRUE(h->Done());
  EXPECT_TRUE(h->worker().violations().empty()) << h->worker().violations().front();
  EXPECT_EQ(h->queues().pool.num_free(), h->queues().pool.num_pages());
}

TEST(BatchPlannerTest, TokenBudgetChunksPromptsAndDecodeRowsGoFirst) {
  PlannerHarness h({.max_tokens = 8, .max_sequences = 4, .prefill_chunk = 4}, 16, 4);
  RequestState* a = h.Add("A", 3, 4, 1);
  RequestState* b = h.Add("B", 9, 2, 2);
  RequestState* c = h.Add("C", 2, 2, 3);
  ExpectTable(&h, {
                      // Admission fills the budget of 8: A's prompt, a 4-token chunk of B, 1 of C.
                      "A0@0+3* B0@0+4 C0@0+1 +[A0 B0 C0]",
                      // A decodes first; the prefills share the rest (B capped by the chunk).
                      "A0@3+1* B0@4+4 C0@1+1*",
                      // Decode rows (A, C) before B's final chunk, whatever the queue order.
                      "A0@4+1* C0@2+1* B0@8+1*",
                      "A0@5+1* B0@9+1* -[C0]",
                      "-[A0 B0]",
                  });
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  EXPECT_EQ(b->samples[0]->generated, PlannerHarness::Expected(*b, 0));
  EXPECT_EQ(c->samples[0]->generated, PlannerHarness::Expected(*c, 0));
}

TEST(BatchPlannerTest, DecodeRowsBeyondTheBudgetWait) {
  PlannerHarness h({.max_tokens = 2, .max_sequences = 4, .prefill_chunk = 2}, 16, 4);
  h.Add("A", 1, 3, 1);
  h.Add("B", 1, 3, 2);
  h.Add("C", 1, 2, 3);
  ExpectTable(&h, {
                      "A0@0+1* B0@0+1* +[A0 B0]",
                      "A0@1+1* B0@1+1*",
                      "A0@2+1* B0@2+1*",  // both reach max_tokens = 3
                      "C0@0+1* +[C0] -[A0 B0]",
                      "C0@1+1*",
                      "-[C0]",
                  });
}

TEST(BatchPlannerTest, HigherPriorityIsAdmittedFirst) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 1, .prefill_chunk = 16}, 16, 4);
  h.Add("L", 2, 2, 1, /*priority=*/0);
  h.Add("H", 2, 1, 2, /*priority=*/5);
  h.Add("M", 2, 1, 3, /*priority=*/1);
  ExpectTable(&h, {
                      "H0@0+2* +[H0]",
                      "M0@0+2* +[M0] -[H0]",
                      "L0@0+2* +[L0] -[M0]",
                      "L0@2+1*",
                      "-[L0]",
                  });
}

TEST(BatchPlannerTest, FairShareAdmitsTheClientServedLeastFirst) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 1, .prefill_chunk = 16}, 16, 4);
  FairShare fair;
  h.SetFairShare(&fair);
  // Client h queues three requests, then client l one: l is served after h's first (the
  // counters tie at 0 before anyone is served, and ties keep arrival order), not after all.
  for (const char* label : {"A", "B", "C"}) h.Add(label, 2, 2, 1)->client = fair.Join("h");
  h.Add("L", 2, 2, 4)->client = fair.Join("l");
  ExpectTable(&h, {
                      "A0@0+2* +[A0]",
                      "A0@2+1*",
                      "L0@0+2* +[L0] -[A0]",
                      "L0@2+1*",
                      "B0@0+2* +[B0] -[L0]",
                      "B0@2+1*",
                      "C0@0+2* +[C0] -[B0]",
                      "C0@2+1*",
                      "-[C0]",
                  });
  // L's service: its 2 prompt tokens, and one decode row (its first token came with the prompt).
  EXPECT_EQ(fair.Counter(fair.Join("l")), 2 * FairShare::kInputWeight + FairShare::kOutputWeight);
}

TEST(BatchPlannerTest, FairSharePreemptsTheClientServedMostFirst) {
  // As PreemptsTheNewestWhenPagesRunOutAndRestartsIt, but A's client has been served more: A,
  // though older, gives its pages up instead of B.
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 4, 2);
  FairShare fair;
  h.SetFairShare(&fair);
  RequestState* a = h.Add("A", 3, 4, 11);
  RequestState* b = h.Add("B", 3, 4, 12);
  a->client = fair.Join("served a lot");
  b->client = fair.Join("new");
  fair.Charge(a->client, 1000, 0);
  // Admitted in fair order (B first); running in queue order (A first).
  EXPECT_EQ(h.Step(), "B0@0+3* A0@0+3* +[B0 A0]");
  EXPECT_EQ(h.Step(), "A0@3+1* B0@3+1*");
  EXPECT_EQ(h.Step(), "B0@4+1* -[A0]");
  EXPECT_EQ(a->preemptions, 1);
  EXPECT_EQ(b->preemptions, 0);
  for (int i = 0; i < 10 && !h.Done(); ++i) h.Step();
  EXPECT_TRUE(h.Done());
  EXPECT_TRUE(h.worker().violations().empty());
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  EXPECT_EQ(b->samples[0]->generated, PlannerHarness::Expected(*b, 0));
  EXPECT_EQ(h.queues().pool.num_free(), 4);
}

TEST(BatchPlannerTest, HeldRequestIsNotStartedUntilReleased) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 16, 4);
  RequestState* a = h.Add("A", 2, 2, 1);
  a->held = true;
  h.Add("B", 2, 1, 2);
  EXPECT_EQ(h.Step(), "B0@0+2* +[B0]");
  EXPECT_EQ(h.Step(), "-[B0]");
  EXPECT_EQ(h.Step(), "");
  a->held = false;
  EXPECT_EQ(h.Step(), "A0@0+2* +[A0]");
  EXPECT_EQ(h.Step(), "A0@2+1*");
  EXPECT_EQ(h.Step(), "-[A0]");
  EXPECT_TRUE(h.Done());
}

TEST(BatchPlannerTest, SequenceCapLimitsRunningSequences) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 2, .prefill_chunk = 16}, 16, 4);
  h.Add("A", 2, 2, 1, 0, /*n=*/3);
  ExpectTable(&h, {
                      "A0@0+2* A1@0+2* +[A0 A1]",
                      "A0@2+1* A1@2+1*",
                      "A2@0+2* +[A2] -[A0 A1]",
                      "A2@2+1*",
                      "-[A2]",
                  });
}

TEST(BatchPlannerTest, PreemptsTheNewestWhenPagesRunOutAndRestartsIt) {
  // 4 pages of 2 tokens; A and B each grow to 3 pages.
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 4, 2);
  RequestState* a = h.Add("A", 3, 4, 11);
  RequestState* b = h.Add("B", 3, 4, 12);
  EXPECT_EQ(h.Step(), "A0@0+3* B0@0+3* +[A0 B0]");
  EXPECT_EQ(h.Step(), "A0@3+1* B0@3+1*");
  // A needs a third page: B (newest) is preempted and released in the same plan.
  EXPECT_EQ(h.Step(), "A0@4+1* -[B0]");
  EXPECT_EQ(h.outcome().num_preempted, 1);
  EXPECT_EQ(b->preemptions, 1);
  // B's restart (prompt + 2 generated = 5 tokens, 3 pages) does not fit beside A yet.
  EXPECT_EQ(h.Step(), "A0@5+1*");
  EXPECT_EQ(h.Step(), "B0@0+5* +[B0] -[A0]");
  ASSERT_EQ(h.plan().start_size(), 1);
  EXPECT_EQ(h.plan().start(0).tokens_size(), 5);
  EXPECT_EQ(h.plan().start(0).num_prompt_tokens(), 3);
  EXPECT_EQ(h.Step(), "B0@5+1*");
  EXPECT_EQ(h.Step(), "-[B0]");
  EXPECT_TRUE(h.Done());
  EXPECT_TRUE(h.worker().violations().empty());
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  EXPECT_EQ(b->samples[0]->generated, PlannerHarness::Expected(*b, 0));
  EXPECT_EQ(h.queues().pool.num_free(), 4);
}

TEST(BatchPlannerTest, LowerPriorityIsPreemptedBeforeNewerHigherPriority) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 4, 2);
  h.Add("L", 3, 3, 1, /*priority=*/0);
  h.Add("H", 3, 3, 2, /*priority=*/1);
  EXPECT_EQ(h.Step(), "H0@0+3* L0@0+3* +[H0 L0]");
  EXPECT_EQ(h.Step(), "H0@3+1* L0@3+1*");
  // H needs a page: L goes although it arrived first.
  EXPECT_EQ(h.Step(), "H0@4+1* -[L0]");
  EXPECT_EQ(h.Step(), "L0@0+5* +[L0] -[H0]");
  EXPECT_EQ(h.Step(), "-[L0]");
  EXPECT_TRUE(h.Done());
}

TEST(BatchPlannerTest, PrefillChunkShrinksToFreePagesThenTheNewestYields) {
  // 5 pages of 2 tokens; B's 8-token prompt goes in chunks of at most 4.
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 4}, 5, 2);
  h.Add("A", 2, 3, 1);
  RequestState* b = h.Add("B", 8, 1, 2);
  EXPECT_EQ(h.Step(), "A0@0+2* B0@0+4 +[A0 B0]");  // A: page 0, B: pages 1-2
  // A takes page 3 for its decode row; one page is left, so B's chunk shrinks to 2 tokens.
  EXPECT_EQ(h.Step(), "A0@2+1* B0@4+2");
  EXPECT_EQ(h.outcome().num_preempted, 0);
  // No page left for B's next chunk: B, the newest, gives its pages back.
  EXPECT_EQ(h.Step(), "A0@3+1* -[B0]");
  EXPECT_EQ(b->preemptions, 1);
  EXPECT_EQ(h.Step(), "B0@0+4 +[B0] -[A0]");
  EXPECT_EQ(h.Step(), "B0@4+4*");
  EXPECT_EQ(h.Step(), "-[B0]");
  EXPECT_TRUE(h.Done());
  EXPECT_TRUE(h.worker().violations().empty());
  EXPECT_EQ(h.queues().pool.num_free(), 5);
}

// Prompt scoring: every scored row is a logits row like a sampling entry, and a step holds
// max_logits_rows of them (here max_sequences = 4): A's prompt of 10 scores 9 rows, so its
// prefill is cut where the rows run out, and B (which does not score) still gets a row each step.
TEST(BatchPlannerTest, ScoredPromptRowsShareTheLogitsRowsWithSamplingEntries) {
  PlannerHarness h({.max_tokens = 64, .max_sequences = 4, .prefill_chunk = 64}, 64, 4);
  RequestState* a = h.Add("A", 10, 2, 1, 0, 1, /*logprob_start=*/1);
  RequestState* b = h.Add("B", 3, 2, 2);
  ExpectTable(&h, {
                      // A's 4 scored rows fill the step; B's first chunk stops short of its
                      // sample row.
                      "A0@0+4~4 B0@0+2 +[A0~1 B0]",
                      // A keeps one row for B (after it in queue order): 3 scored rows.
                      "A0@4+3~3 B0@2+1*",
                      // A's last 2 scored rows and its sample row, next to B's decode row.
                      "B0@3+1* A0@7+3~2*",
                      "A0@10+1* -[B0]",
                      "-[A0]",
                  });
  EXPECT_EQ(h.scored(a), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_TRUE(h.scored(b).empty());
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  EXPECT_EQ(b->samples[0]->generated, PlannerHarness::Expected(*b, 0));
}

// Only sample 0 scores; a restart scores only the positions not delivered yet, and a restart after
// the prompt was scored scores nothing.
TEST(BatchPlannerTest, OnlySampleZeroScoresAndARestartScoresWhatIsLeft) {
  PlannerHarness h({.max_tokens = 64, .max_sequences = 4, .prefill_chunk = 4}, 64, 4);
  RequestState* a = h.Add("A", 8, 3, 5, 0, /*n=*/2, /*logprob_start=*/2);
  EXPECT_EQ(h.Step(), "A0@0+4~3 A1@0+4 +[A0~2 A1]");
  EXPECT_EQ(h.scored(a), (std::vector<int32_t>{2, 3, 4}));
  h.queues().Requeue(0);  // A0 preempted with positions 2-4 delivered
  EXPECT_EQ(h.Step(), "A1@4+4* A0@0+4 +[A0~5] -[A0]");
  // A0 keeps one row for A1's decode: 3 of its 4 rows here.
  EXPECT_EQ(h.Step(), "A1@8+1* A0@4+3~3");
  EXPECT_EQ(h.Step(), "A1@9+1* A0@7+1*");
  EXPECT_EQ(h.scored(a), (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(h.Step(), "A0@8+1* -[A1]");
  ASSERT_EQ(h.queues().running.size(), 1u);
  h.queues().Requeue(0);  // preempted again after the prompt was scored
  ExpectTable(&h, {
                      "A0@0+4 +[A0] -[A0]",
                      "A0@4+4",
                      "A0@8+2*",
                      "-[A0]",
                  });
  EXPECT_EQ(h.scored(a), (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  EXPECT_EQ(a->samples[1]->generated, PlannerHarness::Expected(*a, 1));
}

// Many requests of random sizes and priorities on a pool far too small to hold them together:
// every plan passes the fake's checks, every request gets exactly the tokens of its formula, and
// the pool is whole at the end.
TEST(BatchPlannerTest, RandomLoadOnATinyPoolCompletesWithExactTokens) {
  int64_t preemptions = 0;
  for (uint32_t trial = 0; trial < 20; ++trial) {
    std::mt19937 rng(trial);
    const int32_t page_size = 1 + static_cast<int32_t>(rng() % 4);
    const int64_t num_pages = 24 / page_size + static_cast<int64_t>(rng() % 8);
    PlannerHarness h({.max_tokens = 1 + static_cast<int64_t>(rng() % 12),
                      .max_sequences = 1 + static_cast<int64_t>(rng() % 6),
                      .prefill_chunk = 1 + static_cast<int64_t>(rng() % 8)},
                     num_pages, page_size);
    std::vector<RequestState*> requests;
    for (int r = 0; r < 12; ++r) {
      const int prompt = 1 + static_cast<int>(rng() % 10);
      const int max_tokens = 1 + static_cast<int>(rng() % 12);
      // Half of them score their prompt from a random position (prompt size: nothing to score).
      const int logprob_start = rng() % 2 == 0 ? 0 : 1 + static_cast<int>(rng() % prompt);
      requests.push_back(h.Add(std::string(1, static_cast<char>('a' + r)), prompt, max_tokens,
                               1000 + r, static_cast<int>(rng() % 3),
                               1 + static_cast<int>(rng() % 2), logprob_start));
    }
    RunToCompletion(&h, requests, trial, &preemptions);
    EXPECT_EQ(h.queues().pool.num_free(), num_pages) << "trial " << trial;
  }
  EXPECT_GT(preemptions, 20) << "the pools were meant to be too small";
}

}  // namespace
}  // namespace astr::sched

namespace astr::sched {
namespace {

// --- Prefix cache (page size 4). The fake worker checks that every reused position holds the
// starting sequence's own token and that no write lands in a page another live sequence maps.

std::vector<int32_t> Tokens(int32_t first, int count) {
  std::vector<int32_t> out(count);
  for (int i = 0; i < count; ++i) out[i] = first + i;
  return out;
}

// A finished request leaves its full pages cached; the next one with the same prompt starts after
// them. A's 10-token prompt fills pages 0 and 1 (positions 0..7); B may reuse at most (10 - 1) / 4
// = 2 pages, since its last token must be fed to sample.
TEST(BatchPlannerTest, PrefixCacheReusesTheFullPagesOfAFinishedRequest) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 8, 4, true);
  h.AddPrompt("A", Tokens(100, 10), 2, 1);
  EXPECT_EQ(h.Step(), "A0@0+10* +[A0]");
  EXPECT_EQ(h.Step(), "A0@10+1*");
  EXPECT_EQ(h.queues().cache->cached_pages(), 2);
  EXPECT_EQ(h.queues().pool.num_evictable(), 2);  // only the cache holds them now
  RequestState* b = h.AddPrompt("B", Tokens(100, 10), 2, 2);
  EXPECT_EQ(h.Step(), "B0@8+2* +[B0] -[A0]");
  EXPECT_EQ(h.plan().start(0).num_cached_tokens(), 8);
  EXPECT_EQ(h.plan().start(0).pages_size(), 3);  // two shared, one of its own
  EXPECT_EQ(h.queues().pool.refcount(0), 2);     // B and the cache
  EXPECT_EQ(h.Step(), "B0@10+1*");
  EXPECT_EQ(h.Step(), "-[B0]");
  EXPECT_TRUE(h.Done());
  EXPECT_EQ(b->cached_tokens, 8);
  EXPECT_EQ(h.worker().cached_tokens(), 8);
  EXPECT_TRUE(h.worker().violations().empty()) << h.worker().violations().front();
  EXPECT_EQ(h.queues().pool.num_free(), h.queues().pool.num_pages());
  EXPECT_EQ(h.queues().FlushCache(), 2);  // pages 0 and 1; B's own third page was never full
  EXPECT_EQ(h.queues().pool.num_unused(), h.queues().pool.num_pages());
}

// n samples prefill their prompt once: A0 computes it while A1 and A2 wait one step for its
// pages (pending while A0's step is being planned), then each computes only the last partial page.
TEST(BatchPlannerTest, PrefixCacheSamplesOfOneRequestPrefillThePromptOnce) {
  PlannerHarness h({.max_tokens = 32, .max_sequences = 4, .prefill_chunk = 32}, 16, 4, true);
  RequestState* a = h.AddPrompt("A", Tokens(100, 10), 2, 1, 0, /*n=*/3);
  EXPECT_EQ(h.Step(), "A0@0+10* +[A0]");
  EXPECT_EQ(h.outcome().cache_deferred, 2);
  EXPECT_EQ(h.Step(), "A0@10+1* A1@8+2* A2@8+2* +[A1 A2]");
  EXPECT_EQ(h.queues().pool.refcount(0), 3);  // A1, A2 and the cache (A0 has finished)
  EXPECT_EQ(h.Step(), "A1@10+1* A2@10+1* -[A0]");
  EXPECT_EQ(h.Step(), "-[A1 A2]");
  EXPECT_TRUE(h.Done());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a->samples[i]->generated, PlannerHarness::Expected(*a, i));
  EXPECT_EQ(a->cached_tokens, 0);  // the request's first start (A0) found nothing
  EXPECT_EQ(h.worker().cached_tokens(), 16);
  EXPECT_TRUE(h.worker().violations().empty()) << h.worker().violations().front();
  EXPECT_EQ(h.queues().pool.num_free(), h.queues().pool.num_pages());
}

// Cached pages are evicted only when the pool runs out of unused ones, least recently used leaf
// first, and never keep a request out that an empty cache would let in. Six pages of 4.
TEST(BatchPlannerTest, PrefixCacheEvictsLeastRecentlyUsedOnlyWhenPagesRunOut) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 6, 4, true);
  h.AddPrompt("A", Tokens(100, 8), 1, 1);
  EXPECT_EQ(h.Step(), "A0@0+8* +[A0]");  // A leaves pages 0, 1 cached
  h.AddPrompt("B", Tokens(200, 8), 1, 2);
  EXPECT_EQ(h.Step(), "B0@0+8* +[B0] -[A0]");  // B takes unused pages 2, 3 and leaves them cached
  EXPECT_EQ(h.queues().pool.num_unused(), 2);
  EXPECT_EQ(h.queues().pool.num_free(), 6);
  // C needs four pages: the two unused ones and A's two, the least recently used.
  h.AddPrompt("C", Tokens(300, 16), 1, 3);
  EXPECT_EQ(h.Step(), "C0@0+16* +[C0] -[B0]");
  EXPECT_EQ(h.queues().cache->cached_pages(), 2 + 4);  // B's, and C's (pending until next step)
  // E has B's prompt: it reuses B's first page (touching it) and needs one more page, which
  // evicts B's second page (older than C's). D has A's prompt, evicted: it computes it all,
  // in two of C's pages.
  RequestState* e = h.AddPrompt("E", Tokens(200, 8), 1, 4);
  RequestState* d = h.AddPrompt("D", Tokens(100, 8), 1, 5);
  EXPECT_EQ(h.Step(), "E0@4+4* D0@0+8* +[E0 D0] -[C0]");
  EXPECT_EQ(e->cached_tokens, 4);
  EXPECT_EQ(d->cached_tokens, 0);
  EXPECT_EQ(h.Step(), "-[E0 D0]");
  EXPECT_TRUE(h.Done());
  EXPECT_TRUE(h.worker().violations().empty()) << h.worker().violations().front();
  EXPECT_EQ(h.queues().pool.num_free(), h.queues().pool.num_pages());
}

// K/V is found only under the same namespace: another cache_salt, or another weight version,
// finds nothing. A scoring request reuses only pages before its first scored row.
TEST(BatchPlannerTest, PrefixCacheIsolatesSaltsAndVersionsAndKeepsScoredRowsComputed) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 8, .prefill_chunk = 16}, 16, 4, true);
  h.AddPrompt("A", Tokens(100, 10), 1, 1, 0, 1, 0, "tenant-x");
  EXPECT_EQ(h.Step(), "A0@0+10* +[A0]");
  h.AddPrompt("B", Tokens(100, 10), 1, 2, 0, 1, 0, "tenant-y");
  EXPECT_EQ(h.Step(), "B0@0+10* +[B0] -[A0]");
  h.AddPrompt("C", Tokens(100, 10), 1, 3, 0, 1, 0, "tenant-x");
  EXPECT_EQ(h.Step(), "C0@8+2* +[C0] -[B0]");
  // Scores prompt tokens from position 6: row 5 must be computed, so one page (0..3) is reused.
  h.AddPrompt("S", Tokens(100, 10), 1, 4, 0, 1, /*logprob_start=*/6, "tenant-x");
  EXPECT_EQ(h.Step(), "S0@4+6~4* +[S0~6] -[C0]");
  h.queues().cache_version = 1;  // new weights: the old K/V is not found
  h.AddPrompt("V", Tokens(100, 10), 1, 5, 0, 1, 0, "tenant-x");
  EXPECT_EQ(h.Step(), "V0@0+10* +[V0] -[S0]");
  EXPECT_EQ(h.Step(), "-[V0]");
  EXPECT_TRUE(h.Done());
  EXPECT_EQ(h.worker().cached_tokens(), 8 + 4);
  EXPECT_TRUE(h.worker().violations().empty()) << h.worker().violations().front();
  EXPECT_EQ(h.queues().pool.num_free(), h.queues().pool.num_pages());
}

// A preempted sequence leaves what it computed cached and its restart reuses it. Pool of 5 pages
// of 4: A (prompt 8) and B (prompt 4) decode until B needs a page none is left for; B (the
// newest) is preempted, its first page stays cached, and it restarts from it.
TEST(BatchPlannerTest, PrefixCacheAPreemptedSequenceRestartsFromItsCachedPages) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 5, 4, true);
  RequestState* a = h.AddPrompt("A", Tokens(100, 8), 9, 1);
  RequestState* b = h.AddPrompt("B", Tokens(200, 4), 9, 2);
  int steps = 0;
  while (!h.Done() && steps < 100) {
    h.Step();
    ++steps;
  }
  ASSERT_TRUE(h.Done());
  EXPECT_GT(b->preemptions + a->preemptions, 0);
  EXPECT_GT(h.worker().cached_tokens(), 0);  // the restart reused its own pages
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  EXPECT_EQ(b->samples[0]->generated, PlannerHarness::Expected(*b, 0));
  EXPECT_TRUE(h.worker().violations().empty()) << h.worker().violations().front();
  EXPECT_EQ(h.queues().pool.num_free(), h.queues().pool.num_pages());
}

struct SharedPrefixLoad {
  int max_prompt = 12;     // prompt tokens before the suffix: 1..max_prompt
  int max_new = 10;        // max_tokens: 1..max_new
  int scoring_one_in = 3;  // one request in this many scores its prompt
};

// 14 requests on one of three system prompts with random suffixes, n up to 3, some scoring their
// prompt, arriving over the first steps; runs `h` to completion (RunToCompletion's checks), adds
// its preemptions and cached tokens, and checks that the pool is whole, the cache flushed too.
void RunSharedPrefixLoad(PlannerHarness* h, std::mt19937* rng, const SharedPrefixLoad& load,
                         uint32_t trial, int64_t* preemptions, int64_t* cached) {
  auto draw = [rng](int n) { return static_cast<int>((*rng)() % static_cast<uint32_t>(n)); };
  std::vector<RequestState*> requests;
  for (int r = 0; r < 14; ++r) {
    std::vector<int32_t> prompt = Tokens(100 * (1 + draw(3)), 1 + draw(load.max_prompt));
    const int suffix = draw(4);
    for (int i = 0; i < suffix; ++i) prompt.push_back(500 + draw(50));
    const int len = static_cast<int>(prompt.size());
    const int logprob_start = draw(load.scoring_one_in) == 0 ? 1 + draw(len) : 0;
    const int max_tokens = 1 + draw(load.max_new);
    const int priority = draw(2);
    const int n = 1 + draw(3);
    requests.push_back(h->AddPrompt(std::string(1, static_cast<char>('a' + r)), prompt, max_tokens,
                                    1000 + r, priority, n, logprob_start));
    if (draw(3) == 0) h->Step();  // arrivals spread over the first steps
  }
  RunToCompletion(h, requests, trial, preemptions);
  *cached += h->worker().cached_tokens();
  const int64_t num_pages = h->queues().pool.num_pages();
  EXPECT_EQ(h->queues().pool.num_free(), num_pages) << "trial " << trial;
  h->queues().FlushCache();
  EXPECT_EQ(h->queues().pool.num_unused(), num_pages) << "trial " << trial;
}

// Random load with shared prefixes (three system prompts, random suffixes, n up to 3, prompt
// scoring) on pools far too small: every plan passes the fake's checks (reused K/V is the
// sequence's own tokens, no write into a shared page), every output is exact, the cache is used,
// sequences are preempted, and the pool is whole at the end.
TEST(BatchPlannerTest, PrefixCacheRandomSharedPrefixesOnATinyPoolCompleteWithExactTokens) {
  int64_t preemptions = 0, cached = 0;
  for (uint32_t trial = 0; trial < 30; ++trial) {
    std::mt19937 rng(trial);
    const int32_t page_size = 1 + static_cast<int32_t>(rng() % 4);
    const int64_t num_pages = 40 / page_size + static_cast<int64_t>(rng() % 8);
    PlannerHarness h({.max_tokens = 1 + static_cast<int64_t>(rng() % 16),
                      .max_sequences = 1 + static_cast<int64_t>(rng() % 6),
                      .prefill_chunk = 1 + static_cast<int64_t>(rng() % 8)},
                     num_pages, page_size, true);
    RunSharedPrefixLoad(&h, &rng, {.max_prompt = 12, .max_new = 10, .scoring_one_in = 3}, trial,
                        &preemptions, &cached);
  }
  EXPECT_GT(preemptions, 20) << "the pools were meant to be too small";
  EXPECT_GT(cached, 200) << "the prompts were meant to share prefixes";
}

}  // namespace
}  // namespace astr::sched

namespace astr::sched {
namespace {

// --- Sliding-window page groups (PagePool::window): each token page takes one page id plus
// `tables` window ids while a query may still read it (positions [p - W + 1, p] for a query at p).

// Page size 4, window 6, two window tables, prefill chunk 4. Ids held after each step, worked by
// hand: token pages covering the positions fed so far, plus 2 window ids for each of them from
// the page holding position (first query - 5) on.
TEST(BatchPlannerTest, WindowPagesBehindTheWindowGoBackToThePool) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 4}, 40, 4, false,
                   {.tokens = 6, .tables = 2});
  RequestState* a = h.Add("A", 10, 10, 1);
  const std::vector<std::pair<std::string, int64_t>> table = {
      {"A0@0+4 +[A0]", 1 + 2 * 1},  // pages {0}, window from page 0
      {"A0@4+4", 2 + 2 * 2},        // pages {0,1}, window from page 0
      {"A0@8+2*", 3 + 2 * 3},       // queries from 8 read from 3: page 0
      {"A0@10+1*", 3 + 2 * 2},      // from 5: page 1
      {"A0@11+1*", 3 + 2 * 2},      // from 6: page 1
      {"A0@12+1*", 4 + 2 * 3},      // from 7: page 1; page 3 is new
      {"A0@13+1*", 4 + 2 * 2},      // from 8: page 2
      {"A0@14+1*", 4 + 2 * 2},     {"A0@15+1*", 4 + 2 * 2},
      {"A0@16+1*", 5 + 2 * 3},  // from 11: page 2; page 4 is new
      {"A0@17+1*", 5 + 2 * 2},  // from 12: page 3
  };
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(h.Step(), table[i].first) << "step " << i + 1;
    EXPECT_EQ(h.queues().pool.num_pages() - h.queues().pool.num_free(), table[i].second)
        << "step " << i + 1;
  }
  EXPECT_EQ(h.Step(), "A0@18+1*");  // its last token: it finishes
  EXPECT_EQ(h.Step(), "-[A0]");
  EXPECT_TRUE(h.Done());
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  EXPECT_TRUE(h.worker().violations().empty()) << h.worker().violations().front();
  EXPECT_EQ(h.queues().pool.num_free(), h.queues().pool.num_pages());
}

// 40 tokens (10 token pages) in a pool of 18 ids: holding every window page would take 30, but a
// step reads at most 4 token pages through the window (positions 5 back of a 4-token chunk), so 10
// + 2 * 4 ids hold the sequence, and the pool says so.
TEST(BatchPlannerTest, WindowPagesLetALongSequenceFitASmallPool) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 4}, 18, 4, false,
                   {.tokens = 6, .tables = 2});
  EXPECT_EQ(h.queues().pool.capacity_tokens(), 40);
  RequestState* a = h.Add("A", 17, 23, 1);
  int64_t preemptions = 0;
  RunToCompletion(&h, {a}, 0, &preemptions);
  EXPECT_EQ(preemptions, 0);
  EXPECT_EQ(h.queues().pool.num_free(), 18);
  PagePool pool(17, 4, {.tokens = 6, .tables = 2, .max_step_tokens = 4});
  EXPECT_EQ(pool.capacity_tokens(), 36);  // one id less: one token page less
  PagePool no_window(18, 4);
  EXPECT_EQ(no_window.capacity_tokens(), 72);  // every layer in every page id
}

// Random load with shared prefixes, a prefix cache and window tables on tiny pools: every plan
// passes the fake worker's checks (each query's window positions hold the sequence's own tokens in
// every window table, written by it or by whoever computed a cached page; no page written while
// another sequence maps it), every token is exact, and every page comes back.
TEST(BatchPlannerTest, WindowPagesRandomSharedPrefixesOnATinyPoolCompleteWithExactTokens) {
  int64_t preemptions = 0, cached = 0;
  for (uint32_t trial = 0; trial < 40; ++trial) {
    std::mt19937 rng(1000 + trial);
    const int32_t page_size = 1 + static_cast<int32_t>(rng() % 4);
    const KvWindow window{.tokens = 1 + static_cast<int64_t>(rng() % 9),
                          .tables = 1 + static_cast<int32_t>(rng() % 3)};
    const int64_t chunk = 1 + static_cast<int64_t>(rng() % 8);
    const int64_t most = (window.tokens - 1 + chunk + page_size - 1) / page_size + 1;
    // Enough for one sequence of 32 tokens, plus a little.
    const int64_t num_pages =
        32 / page_size + 1 + window.tables * most + static_cast<int64_t>(rng() % 10);
    PlannerHarness h({.max_tokens = 1 + static_cast<int64_t>(rng() % 16),
                      .max_sequences = 1 + static_cast<int64_t>(rng() % 6),
                      .prefill_chunk = chunk},
                     num_pages, page_size, rng() % 4 != 0, window);
    ASSERT_GE(h.queues().pool.capacity_tokens(), 32) << "trial " << trial;
    RunSharedPrefixLoad(&h, &rng, {.max_prompt = 14, .max_new = 14, .scoring_one_in = 4}, trial,
                        &preemptions, &cached);
  }
  EXPECT_GT(preemptions, 20) << "the pools were meant to be too small";
  EXPECT_GT(cached, 200) << "the prompts were meant to share prefixes";
}

}  // namespace
}  // namespace astr::sched

namespace astr::sched {
namespace {

// LongRoPE, original context 8: a sequence started with 5 tokens is computed with the short
// factors; before it computes position 8 it restarts (not a preemption) with its 9 known tokens,
// all computed again with the long factors, as transformers recomputes the sequence there. The
// prefix cache keeps the short-factor pages apart: the restart finds none of them.
TEST(BatchPlannerTest, LongRopeSequenceRestartsWhenItReachesTheOriginalContext) {
  PlannerHarness h({.max_tokens = 16, .max_sequences = 4, .prefill_chunk = 16}, 16, 4, true);
  h.queues().longrope_original = 8;
  RequestState* a = h.Add("A", 5, 6, 1);
  ExpectTable(&h, {"A0@0+5* +[A0]", "A0@5+1*", "A0@6+1*", "A0@7+1*",
                   "A0@0+9* +[A0] -[A0]",  // the restart: 9 known tokens > 8
                   "A0@9+1*", "-[A0]"});
  EXPECT_EQ(a->preemptions, 0);
  EXPECT_EQ(a->samples[0]->generated, PlannerHarness::Expected(*a, 0));
  // A sequence that starts with more than 8 tokens never restarts; it shares the first page of
  // A's restart (the same 4 prompt tokens, both computed with the long factors).
  RequestState* b = h.Add("B", 9, 3, 2);
  ExpectTable(&h, {"B0@4+5* +[B0]", "B0@9+1*", "B0@10+1*", "-[B0]"});
  EXPECT_EQ(b->samples[0]->generated, PlannerHarness::Expected(*b, 0));
}

}  // namespace
}  // namespace astr::sched
