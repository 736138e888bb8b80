// The Scheduler (loop thread, output thread, routing, failover, admission) against in-process
// FakeWorkers that check every plan. Expected tokens come from the fakes' formula
// FakeToken(sample_index, position, seed), never from the scheduler.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "scheduler/admin_controller.h"
#include "scheduler/scheduler.h"
#include "tests/scheduler/fake_worker.h"

namespace astr::sched {
namespace {

using namespace std::chrono_literals;
using testing::FakeConnection;
using testing::FakePromptLogprob;
using testing::FakeToken;
using testing::FakeWorker;
using testing::FakeWorkerConfig;
using testing::MustSubmit;
using testing::WaitUntil;
using testing::PlanRecord;

constexpr int32_t kVocab = 1000;

// Token i of MakeRequest's prompt: each seed its own prompt, so that requests share no cached
// prefix unless a test means them to (the fake's tokens depend on positions only).
int32_t PromptToken(uint64_t seed, int i) {
  return static_cast<int32_t>((seed * 131 + static_cast<uint64_t>(i) * 7 + 10) % kVocab);
}

SchedRequest MakeRequest(int prompt_len, int max_tokens, uint64_t seed, int n = 1) {
  SchedRequest r;
  r.request_id = "r" + std::to_string(seed);
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(PromptToken(seed, i));
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  r.n = n;
  return r;
}

// What the fake produces for a request that stops only at max_tokens.
std::vector<int32_t> Expected(int prompt_len, int max_tokens, uint64_t seed, int sample = 0,
                              int32_t vocab = kVocab) {
  std::vector<int32_t> out;
  for (int k = 0; k < max_tokens; ++k)
    out.push_back(FakeToken(sample, prompt_len + k, seed, vocab));
  return out;
}

struct Outcome {
  std::map<int, std::vector<int32_t>> tokens;
  std::vector<SampleEvent> prompt_scores;  // kPromptLogprob events, in arrival order
  // Prompt scores received when sample 0's first token arrived (-1: no token).
  int prompt_scores_before_first_token = -1;
  std::map<int, v1::FinishReason> finish;
  std::map<int, int32_t> stop_token_id;
  bool closed = false;
  Status status;
  RequestTimings timings;
};

// Reads a channel until it closes. `on_event` sees every event first.
template <typename Fn>
Outcome Collect(RequestChannel* channel, Fn&& on_event) {
  Outcome out;
  const auto give_up = Clock::now() + 20s;
  while (!out.closed && Clock::now() < give_up) {
    RequestChannel::Batch batch = channel->Wait(100ms);
    for (const SampleEvent& e : batch.events) {
      on_event(e);
      if (e.kind == SampleEvent::Kind::kToken) {
        if (e.index == 0 && out.tokens[0].empty()) {
          out.prompt_scores_before_first_token = static_cast<int>(out.prompt_scores.size());
        }
        out.tokens[e.index].push_back(e.token_id);
      } else if (e.kind == SampleEvent::Kind::kPromptLogprob) {
        out.prompt_scores.push_back(e);
      } else {
        out.finish[e.index] = e.finish;
        out.stop_token_id[e.index] = e.stop_token_id;
      }
    }
    if (batch.closed) {
      out.closed = true;
      out.status = batch.status;
      out.timings = batch.timings;
    }
  }
  return out;
}
Outcome Collect(RequestChannel* channel) {
  return Collect(channel, [](const SampleEvent&) {});
}

std::unique_ptr<Scheduler> MakeScheduler(SchedulerOptions options,
                                         const std::vector<std::shared_ptr<FakeWorker>>& fakes) {
  std::vector<std::unique_ptr<WorkerConnection>> conns;
  for (const auto& f : fakes) conns.push_back(std::make_unique<FakeConnection>(f));
  auto created = Scheduler::Create(options, std::move(conns));
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  return created.ok() ? std::move(*created) : nullptr;
}

// Every test runs with and without overlap (plan N+1 sent before result N is read).
class SchedulerCoreTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<Scheduler> Make(SchedulerOptions options,
                                  const std::vector<std::shared_ptr<FakeWorker>>& fakes) {
    options.overlap_steps = GetParam();
    return MakeScheduler(options, fakes);
  }
};

// After all requests ended: every page back in the scheduler's pools and every fake empty.
void ExpectAllFree(Scheduler* s, const std::vector<std::shared_ptr<FakeWorker>>& fakes) {
  EXPECT_TRUE(WaitUntil([&] {
    for (const auto& f : fakes) {
      if (f->live_sequences() != 0) return false;
    }
    const v1::GetServerStatsResponse stats = s->Stats();
    for (const v1::WorkerStats& w : stats.workers()) {
      if (w.free_pages() != w.total_pages()) return false;
    }
    return s->Idle();
  })) << s->Stats().DebugString();
  for (const auto& f : fakes) {
    const auto v = f->violations();
    EXPECT_TRUE(v.empty()) << f->config().address << ": " << v.front();
  }
}

// The plan after the last one that fed a sequence of `seed` must release it ("at the next step").
void ExpectReleasedAtNextStep(const FakeWorker& fake, uint64_t seed) {
  const std::vector<PlanRecord> history = fake.history();
  int last = -1;
  for (int i = 0; i < static_cast<int>(history.size()); ++i) {
    for (const auto& e : history[i].entries) {
      if (e.seed == seed) last = i;
    }
  }
  ASSERT_GE(last, 0) << "seed " << seed << " never ran";
  ASSERT_LT(last + 1, static_cast<int>(history.size())) << "no plan after the last entry";
  const auto& released = history[last + 1].released_seeds;
  EXPECT_NE(std::find(released.begin(), released.end(), seed), released.end())
      << "seed " << seed << " not released in step " << history[last + 1].step_id;
}

TEST_P(SchedulerCoreTest, OneRequestGetsTheWorkersTokensAndTimings) {
  auto fake = std::make_shared<FakeWorker>();
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(5, 8, 42));
  Outcome out = Collect(ch.get());
  ASSERT_TRUE(out.closed);
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.tokens[0], Expected(5, 8, 42));
  EXPECT_EQ(out.finish[0], v1::FINISH_REASON_LENGTH);
  EXPECT_LE(out.timings.queue_ns, out.timings.time_to_first_token_ns);
  EXPECT_LE(out.timings.time_to_first_token_ns, out.timings.total_ns);
  EXPECT_GT(out.timings.total_ns, 0);
  EXPECT_EQ(out.timings.preemptions, 0);
  ExpectAllFree(s.get(), {fake});
  const v1::GetServerStatsResponse stats = s->Stats();
  EXPECT_EQ(stats.requests_admitted(), 1);
  EXPECT_EQ(stats.requests_finished(), 1);
  EXPECT_GE(stats.steps(), 8);
  EXPECT_EQ(stats.workers(0).sequences_assigned(), 1);
  EXPECT_GT(stats.workers(0).mean_step_ns(), 0);
}

TEST_P(SchedulerCoreTest, TokenBudgetIsRespectedLongPromptsAreChunkedAndDecodeRowsLead) {
  auto fake = std::make_shared<FakeWorker>();
  SchedulerOptions options;
  options.max_batch_tokens = 16;
  options.prefill_chunk = 8;
  auto s = Make(options, {fake});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 10; ++i) {
    channels.push_back(MustSubmit(s.get(), MakeRequest(3 + 4 * i, 5 + i, 100 + i)));
  }
  for (int i = 0; i < 10; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok());
    EXPECT_EQ(out.tokens[0], Expected(3 + 4 * i, 5 + i, 100 + i)) << "request " << i;
  }
  ExpectAllFree(s.get(), {fake});
  int non_final_chunks = 0;
  for (const PlanRecord& plan : fake->history()) {
    EXPECT_LE(plan.tokens, 16) << "step " << plan.step_id;
    bool prefill_seen = false;
    for (const auto& e : plan.entries) {
      EXPECT_LE(e.num_tokens, 8);
      if (!e.decode) prefill_seen = true;
      EXPECT_FALSE(e.decode && prefill_seen) << "decode row after a prefill in " << plan.step_id;
      if (!e.decode && !e.sample) ++non_final_chunks;
    }
  }
  // The 39-token prompt alone needs four non-final chunks of at most 8.
  EXPECT_GE(non_final_chunks, 4);
}

TEST_P(SchedulerCoreTest, PreemptionOnASmallPoolKeepsEveryOutputAndFreesEveryPage) {
  FakeWorkerConfig small;
  small.num_pages = 10;  // 40 tokens; 12 requests want up to 29 each
  auto fake = std::make_shared<FakeWorker>(small);
  // Gated until every request is queued: otherwise an instant worker may finish the first
  // requests before the later ones arrive, and the pool never runs short (no preemption).
  fake->SetGated(true);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 12; ++i) {
    channels.push_back(MustSubmit(s.get(), MakeRequest(6 + i % 4, 20, 200 + i)));
  }
  fake->SetGated(false);
  int32_t preemptions = 0;
  for (int i = 0; i < 12; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_EQ(out.tokens[0], Expected(6 + i % 4, 20, 200 + i)) << "request " << i;
    EXPECT_EQ(out.finish[0], v1::FINISH_REASON_LENGTH);
    preemptions += out.timings.preemptions;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(s->Stats().preemptions(), preemptions);
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, CancelReleasesTheSequenceAtTheNextStep) {
  auto fake = std::make_shared<FakeWorker>();
  fake->SetGated(true);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto a = MustSubmit(s.get(), MakeRequest(4, 200, 1));
  auto b = MustSubmit(s.get(), MakeRequest(4, 200, 2));
  fake->AllowPlans(3);
  ASSERT_TRUE(fake->WaitForPlans(4));  // plan 4 is computing; its result is held
  s->Cancel(a->key(), Status(StatusCode::kCancelled, "client cancelled"));
  // The loop may be waiting for result 4 (or, with overlap, have sent plan 5 and wait for it):
  // the cancel is applied at the top of the next iteration and closes a before that step runs.
  fake->AllowPlans(4);
  Outcome out_a = Collect(a.get());
  EXPECT_EQ(out_a.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(out_a.status.message(), "client cancelled");
  EXPECT_TRUE(out_a.finish.empty());
  EXPECT_LE(out_a.tokens[0].size(), 5u);
  s->Cancel(b->key(), Status(StatusCode::kCancelled, "bye"));
  fake->SetGated(false);
  EXPECT_EQ(Collect(b.get()).status.code(), StatusCode::kCancelled);
  ExpectAllFree(s.get(), {fake});
  ExpectReleasedAtNextStep(*fake, 1);
  ExpectReleasedAtNextStep(*fake, 2);
}

TEST_P(SchedulerCoreTest, HeldRequestGivesItsPagesBackAndResumesWithTheSameOutput) {
  FakeWorkerConfig slow;
  slow.step_delay = 1ms;
  auto fake = std::make_shared<FakeWorker>(slow);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(6, 120, 31));
  Outcome out;
  // Tokens arrive; then the request is held (its client stopped reading).
  ASSERT_TRUE(WaitUntil([&] {
    RequestChannel::Batch b = ch->Wait(10ms);
    for (const SampleEvent& e : b.events) out.tokens[e.index].push_back(e.token_id);
    return out.tokens[0].size() >= 5;
  }));
  s->Hold(ch->key(), true);
  // Its sequence is released on the worker and every page comes back, while it stays open.
  EXPECT_TRUE(WaitUntil([&] {
    const v1::GetServerStatsResponse st = s->Stats();
    return fake->live_sequences() == 0 && st.workers(0).free_pages() == st.workers(0).total_pages();
  })) << s->Stats().DebugString();
  EXPECT_EQ(s->Stats().requests_held(), 1);
  EXPECT_FALSE(s->Idle());
  // Nothing is computed for it while held: what arrives now was in flight at the hold.
  RequestChannel::Batch in_flight = ch->Wait(20ms);
  for (const SampleEvent& e : in_flight.events) out.tokens[e.index].push_back(e.token_id);
  const size_t at_hold = out.tokens[0].size();
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(ch->Take().events.empty());
  EXPECT_LT(at_hold, 120u);
  s->Hold(ch->key(), false);
  Outcome rest = Collect(ch.get());
  ASSERT_TRUE(rest.status.ok()) << rest.status.ToString();
  out.tokens[0].insert(out.tokens[0].end(), rest.tokens[0].begin(), rest.tokens[0].end());
  // Recomputed from its tokens: the same output as if it had never been held.
  EXPECT_EQ(out.tokens[0], Expected(6, 120, 31));
  EXPECT_EQ(rest.timings.preemptions, 1);
  EXPECT_EQ(s->Stats().requests_held(), 0);
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, FairShareServesALateLightClientBeforeAHeavyClientsBacklog) {
  FakeWorkerConfig one;
  one.max_batch = 1;  // one sequence at a time: the order of admission is the order of service
  for (bool fair : {true, false}) {
    SCOPED_TRACE(fair ? "fair share" : "arrival order");
    auto fake = std::make_shared<FakeWorker>(one);
    fake->SetGated(true);
    SchedulerOptions options;
    options.fair_share = fair;
    auto s = Make(options, {fake});
    ASSERT_TRUE(s);
    std::vector<std::shared_ptr<RequestChannel>> heavy;
    for (int i = 0; i < 6; ++i) {
      SchedRequest r = MakeRequest(4, 8, 500 + i);
      r.client = "peer heavy";
      heavy.push_back(MustSubmit(s.get(), std::move(r)));
    }
    SchedRequest light_request = MakeRequest(4, 8, 600);
    light_request.client = "peer light";
    auto light = MustSubmit(s.get(), std::move(light_request));
    fake->SetGated(false);
    Outcome l = Collect(light.get());
    ASSERT_TRUE(l.status.ok());
    EXPECT_EQ(l.tokens[0], Expected(4, 8, 600));
    for (auto& h : heavy) Collect(h.get());
    // How many of the heavy client's requests started before the light one, from the plans
    // the worker saw (the first plan that fed each seed).
    std::map<uint64_t, size_t> first_plan;
    const std::vector<PlanRecord> history = fake->history();
    for (size_t i = 0; i < history.size(); ++i) {
      for (const auto& e : history[i].entries) first_plan.emplace(e.seed, i);
    }
    ASSERT_EQ(first_plan.count(600), 1u);
    int heavy_before = 0;
    for (int i = 0; i < 6; ++i) heavy_before += first_plan.at(500 + i) < first_plan.at(600);
    if (fair) {
      // The counters tie before anyone is served: the heavy client's first request goes first,
      // then the light one, not behind the whole backlog.
      EXPECT_EQ(heavy_before, 1) << "the light client waited behind the heavy backlog";
    } else {
      EXPECT_EQ(heavy_before, 6);
    }
    ExpectAllFree(s.get(), {fake});
  }
}

TEST_P(SchedulerCoreTest, PassedDeadlineAbortsAndReleasesAtTheNextStep) {
  FakeWorkerConfig slow;
  slow.step_delay = 2ms;
  auto fake = std::make_shared<FakeWorker>(slow);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  SchedRequest r = MakeRequest(4, 200, 7);
  r.deadline = Clock::now() + 40ms;
  auto ch = MustSubmit(s.get(), std::move(r));
  Outcome out = Collect(ch.get());
  EXPECT_EQ(out.status.code(), StatusCode::kDeadlineExceeded) << out.status.ToString();
  EXPECT_FALSE(out.tokens[0].empty());
  EXPECT_LT(out.tokens[0].size(), 200u);
  ExpectAllFree(s.get(), {fake});
  ExpectReleasedAtNextStep(*fake, 7);
}

TEST_P(SchedulerCoreTest, FinishSampleEndsOneSampleSilently) {
  FakeWorkerConfig slow;
  slow.step_delay = 1ms;
  auto fake = std::make_shared<FakeWorker>(slow);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(3, 60, 9, /*n=*/2));
  bool finished_one = false;
  Outcome out = Collect(ch.get(), [&](const SampleEvent& e) {
    if (e.index == 1 && !finished_one) {
      s->FinishSample(ch->key(), 1);  // as the front does when a stop string matched
      finished_one = true;
    }
  });
  EXPECT_TRUE(out.status.ok());
  EXPECT_EQ(out.tokens[0], Expected(3, 60, 9, 0));
  EXPECT_EQ(out.finish[0], v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(out.finish.count(1), 0u);  // no finish event for the sample the front ended
  const std::vector<int32_t> want1 = Expected(3, 60, 9, 1);
  ASSERT_LT(out.tokens[1].size(), want1.size());
  EXPECT_EQ(out.tokens[1],
            std::vector<int32_t>(want1.begin(), want1.begin() + out.tokens[1].size()));
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, NSamplesFollowTheirOwnStreams) {
  auto fake = std::make_shared<FakeWorker>();
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(4, 10, 5, /*n=*/3));
  Outcome out = Collect(ch.get());
  EXPECT_TRUE(out.status.ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out.tokens[i], Expected(4, 10, 5, i)) << "sample " << i;
    EXPECT_EQ(out.finish[i], v1::FINISH_REASON_LENGTH);
  }
  EXPECT_NE(out.tokens[0], out.tokens[1]);
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, TwoWorkersAreBothUsedAndOutputsAreUnchanged) {
  FakeWorkerConfig c0, c1;
  c0.address = "fake-0";
  c1.address = "fake-1";
  auto f0 = std::make_shared<FakeWorker>(c0);
  auto f1 = std::make_shared<FakeWorker>(c1);
  // Gated until every request is queued: otherwise instant workers may finish the first requests
  // before the later ones arrive, and an idle worker 0 takes them all.
  f0->SetGated(true);
  f1->SetGated(true);
  auto s = Make({}, {f0, f1});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 8; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(5, 12, 300 + i)));
  f0->SetGated(false);
  f1->SetGated(false);
  for (int i = 0; i < 8; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok());
    EXPECT_EQ(out.tokens[0], Expected(5, 12, 300 + i)) << "request " << i;
  }
  ExpectAllFree(s.get(), {f0, f1});
  const auto stats = s->Stats();
  ASSERT_EQ(stats.workers_size(), 2);
  EXPECT_EQ(stats.workers(0).address(), "fake-0");
  EXPECT_EQ(stats.workers(0).sequences_assigned() + stats.workers(1).sequences_assigned(), 8);
  EXPECT_GE(stats.workers(0).sequences_assigned(), 3);
  EXPECT_GE(stats.workers(1).sequences_assigned(), 3);
  EXPECT_GT(f0->history().size(), 0u);
  EXPECT_GT(f1->history().size(), 0u);
}

TEST_P(SchedulerCoreTest, DrainRefusesNewRequestsAndFinishesQueuedOnes) {
  FakeWorkerConfig slow;
  slow.step_delay = 1ms;
  slow.max_batch = 2;  // some requests are still queued when the drain starts
  auto fake = std::make_shared<FakeWorker>(slow);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(3, 15, 400 + i)));
  s->StartDrain();
  auto refused = s->Submit(MakeRequest(3, 15, 999));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(s->Stats().draining());
  for (int i = 0; i < 4; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok());
    EXPECT_EQ(out.tokens[0], Expected(3, 15, 400 + i));
  }
  ExpectAllFree(s.get(), {fake});
  EXPECT_EQ(s->Stats().requests_refused(), 1);
  EXPECT_EQ(s->Stats().requests_finished(), 4);
}

// One running sequence (max_batch 1) whose step result is held: later requests stay queued.
struct QueuedSetup {
  std::shared_ptr<FakeWorker> fake;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::shared_ptr<RequestChannel>> channels;

  explicit QueuedSetup(SchedulerOptions options) {
    FakeWorkerConfig one;
    one.max_batch = 1;
    fake = std::make_shared<FakeWorker>(one);
    fake->SetGated(true);
    scheduler = MakeScheduler(options, {fake});
    channels.push_back(MustSubmit(scheduler.get(), MakeRequest(5, 4, 1)));
    EXPECT_TRUE(fake->WaitForPlans(1));  // scheduled: it no longer counts as waiting
  }
  void Finish() {
    fake->SetGated(false);
    for (auto& ch : channels) EXPECT_TRUE(Collect(ch.get()).status.ok());
    ExpectAllFree(scheduler.get(), {fake});
  }
};

TEST_P(SchedulerCoreTest, AdmissionRefusesPastTheQueuedRequestLimit) {
  SchedulerOptions options;
  options.max_queued_requests = 2;
  options.overlap_steps = GetParam();
  QueuedSetup setup(options);
  Scheduler* s = setup.scheduler.get();
  setup.channels.push_back(MustSubmit(s, MakeRequest(3, 4, 2)));
  setup.channels.push_back(MustSubmit(s, MakeRequest(3, 4, 3)));
  auto refused = s->Submit(MakeRequest(1, 4, 4));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max-queued-requests=2"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(s->Stats().requests_refused(), 1);
  setup.Finish();
}

TEST_P(SchedulerCoreTest, AdmissionRefusesPastTheQueuedTokenLimit) {
  SchedulerOptions options;
  options.max_queued_tokens = 20;
  options.overlap_steps = GetParam();
  QueuedSetup setup(options);
  Scheduler* s = setup.scheduler.get();
  setup.channels.push_back(MustSubmit(s, MakeRequest(8, 4, 2)));
  setup.channels.push_back(MustSubmit(s, MakeRequest(6, 4, 3, /*n=*/2)));  // 8 + 12 = 20
  auto refused = s->Submit(MakeRequest(1, 4, 4));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max-queued-tokens=20"), std::string::npos)
      << refused.status().message();
  setup.Finish();
}

TEST_P(SchedulerCoreTest, RequestLargerThanEveryPoolIsRefused) {
  auto fake = std::make_shared<FakeWorker>();  // 64 pages of 4 = 256 tokens
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto refused = s->Submit(MakeRequest(10, 247, 1));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("largest: 256 tokens"), std::string::npos)
      << refused.status().message();
  auto fits = MustSubmit(s.get(), MakeRequest(10, 246, 1));
  EXPECT_TRUE(Collect(fits.get()).status.ok());
  ExpectAllFree(s.get(), {fake});
}

// What the fake produces with EOS id 0 and stop id 1 in a 4-token vocabulary, by the stop rules
// written out independently: a stop id or EOS ends the sample only after min_tokens tokens.
struct StopCase {
  uint64_t seed;
  int32_t min_tokens;
  bool ignore_eos;
};
Outcome ExpectedWithStops(int prompt_len, int max_tokens, const StopCase& c) {
  Outcome out;
  for (int k = 0; k < max_tokens; ++k) {
    const int32_t t = FakeToken(0, prompt_len + k, c.seed, 4);
    out.tokens[0].push_back(t);
    const bool past_min = k + 1 > c.min_tokens;
    if (past_min && !c.ignore_eos && t == 0) {
      out.finish[0] = v1::FINISH_REASON_EOS;
      out.stop_token_id[0] = -1;
      return out;
    }
    if (past_min && t == 1) {
      out.finish[0] = v1::FINISH_REASON_STOP;
      out.stop_token_id[0] = 1;
      return out;
    }
  }
  out.finish[0] = v1::FINISH_REASON_LENGTH;
  out.stop_token_id[0] = -1;
  return out;
}

TEST_P(SchedulerCoreTest, EosStopIdsMinTokensAndIgnoreEos) {
  FakeWorkerConfig tiny;
  tiny.vocab_size = 4;
  auto fake = std::make_shared<FakeWorker>(tiny);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  std::vector<StopCase> cases;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    for (int32_t min_tokens : {0, 3}) {
      for (bool ignore_eos : {false, true}) cases.push_back({seed, min_tokens, ignore_eos});
    }
  }
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (const StopCase& c : cases) {
    SchedRequest r = MakeRequest(3, 12, c.seed);
    r.sampling.eos_token_ids.push_back(0);
    r.sampling.stop_token_ids.push_back(1);
    r.sampling.min_tokens = c.min_tokens;
    r.sampling.ignore_eos = c.ignore_eos;
    channels.push_back(MustSubmit(s.get(), std::move(r)));
  }
  std::map<v1::FinishReason, int> reasons;
  for (size_t i = 0; i < cases.size(); ++i) {
    Outcome got = Collect(channels[i].get());
    Outcome want = ExpectedWithStops(3, 12, cases[i]);
    EXPECT_TRUE(got.status.ok());
    EXPECT_EQ(got.tokens[0], want.tokens[0]) << "case " << i;
    EXPECT_EQ(got.finish[0], want.finish[0]) << "case " << i;
    EXPECT_EQ(got.stop_token_id[0], want.stop_token_id[0]) << "case " << i;
    ++reasons[want.finish[0]];
  }
  // The table covers every way to finish.
  EXPECT_GT(reasons[v1::FINISH_REASON_EOS], 0);
  EXPECT_GT(reasons[v1::FINISH_REASON_STOP], 0);
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, ContextEndFinishesWithLength) {
  FakeWorkerConfig short_context;
  short_context.max_context_tokens = 12;
  auto fake = std::make_shared<FakeWorker>(short_context);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(8, 100, 3));
  Outcome out = Collect(ch.get());
  EXPECT_EQ(out.tokens[0], Expected(8, 4, 3));  // positions 8..11
  EXPECT_EQ(out.finish[0], v1::FINISH_REASON_LENGTH);
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, FailedWorkersSequencesContinueOnTheOtherWithIdenticalOutputs) {
  FakeWorkerConfig c0, c1;
  c0.address = "fake-0";
  c1.address = "fake-1";
  auto f0 = std::make_shared<FakeWorker>(c0);
  auto f1 = std::make_shared<FakeWorker>(c1);
  f0->FailAtPlan(4);
  f0->SetReconnectable(false);
  SchedulerOptions options;
  options.worker_down_after_ms = 30;
  options.reconnect_attempt_ms = 5;
  auto s = Make(options, {f0, f1});
  ASSERT_TRUE(s);
  // Held results keep the loop from running ahead while the requests arrive, so all six are
  // running when fake-0 dies at its fourth plan.
  f0->SetGated(true);
  f1->SetGated(true);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 6; ++i) channels.push_back(MustSubmit(s.get(), MakeRequest(5, 20, 500 + i)));
  f0->SetGated(false);
  f1->SetGated(false);
  int32_t preemptions = 0;
  for (int i = 0; i < 6; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_EQ(out.tokens[0], Expected(5, 20, 500 + i)) << "request " << i;
    preemptions += out.timings.preemptions;
  }
  EXPECT_EQ(preemptions, 3);  // the three sequences routed to fake-0 restarted on fake-1
  const v1::GetServerStatsResponse stats = s->Stats();
  EXPECT_FALSE(stats.workers(0).up());
  EXPECT_TRUE(stats.workers(1).up());
  int started_on_1 = 0;
  for (const PlanRecord& p : f1->history()) started_on_1 += static_cast<int>(p.started.size());
  EXPECT_EQ(started_on_1, 6);
  // The last releases reach fake-1 with the plan after the last step (with overlap, after the
  // scheduler is already idle): wait for them rather than read the count at once.
  EXPECT_TRUE(WaitUntil([&] { return s->Idle() && f1->live_sequences() == 0; }))
      << f1->live_sequences() << " sequences still live on fake-1";
  EXPECT_TRUE(f1->violations().empty());
}

TEST_P(SchedulerCoreTest, ReconnectedWorkerRestartsItsSequencesWithIdenticalOutputs) {
  auto fake = std::make_shared<FakeWorker>();
  fake->FailAtPlan(6);
  SchedulerOptions options;
  options.reconnect_attempt_ms = 5;
  auto s = Make(options, {fake});
  ASSERT_TRUE(s);
  fake->SetGated(true);  // every request is running when the worker dies at plan 6
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) {
    channels.push_back(MustSubmit(s.get(), MakeRequest(4 + i, 15, 600 + i, /*n=*/2)));
  }
  fake->SetGated(false);
  for (int i = 0; i < 4; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(out.tokens[k], Expected(4 + i, 15, 600 + i, k)) << "request " << i;
    }
    EXPECT_EQ(out.timings.preemptions, 2);
  }
  EXPECT_EQ(fake->reconnects(), 1);
  EXPECT_TRUE(s->Stats().workers(0).up());
  ExpectAllFree(s.get(), {fake});
}

// Prompt scores of a request made by MakeRequest(prompt_len, ..., seed) with logprob_start
// `start`: every position [start, prompt_len) once, in order, with the fake's values, all before
// sample 0's first token.
void ExpectPromptScores(const Outcome& out, int prompt_len, int start, uint64_t seed,
                        const std::string& what) {
  ASSERT_EQ(static_cast<int>(out.prompt_scores.size()), prompt_len - start) << what;
  EXPECT_EQ(out.prompt_scores_before_first_token, prompt_len - start) << what;
  for (int p = start; p < prompt_len; ++p) {
    const SampleEvent& e = out.prompt_scores[p - start];
    EXPECT_EQ(e.position, p) << what;
    EXPECT_EQ(e.index, 0) << what;
    EXPECT_EQ(e.token_id, PromptToken(seed, p)) << what;  // MakeRequest's prompt
    EXPECT_EQ(e.logprob, FakePromptLogprob(0, p, seed)) << what << " position " << p;
    ASSERT_EQ(e.top.size(), 1u) << what;
    EXPECT_EQ(e.top[0].id, p) << what;
    EXPECT_EQ(e.weight_version, 7) << what;  // the fake's
  }
}

// Scoring requests (n = 2) on a pool too small for all of them and a max_batch of 4 logits rows:
// preempted sequences restart, yet each prompt position is delivered once, before sample 0's
// first token, and every plan stays within the logits rows (the fake checks).
TEST_P(SchedulerCoreTest, PromptScoresArriveOnceBeforeTheFirstTokenThroughPreemptions) {
  FakeWorkerConfig small;
  small.num_pages = 16;  // 64 tokens; 6 requests of 2 samples want up to 26 each
  small.max_batch = 4;
  auto fake = std::make_shared<FakeWorker>(small);
  fake->SetGated(true);
  SchedulerOptions options;
  options.prefill_chunk = 5;
  auto s = Make(options, {fake});
  ASSERT_TRUE(s);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 6; ++i) {
    SchedRequest r = MakeRequest(10 + i, 16, 700 + i, /*n=*/2);
    r.logprob_start = 1 + i % 3;
    channels.push_back(MustSubmit(s.get(), std::move(r)));
  }
  fake->SetGated(false);
  int32_t preemptions = 0;
  for (int i = 0; i < 6; ++i) {
    Outcome out = Collect(channels[i].get());
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(out.tokens[k], Expected(10 + i, 16, 700 + i, k)) << "request " << i;
    }
    ExpectPromptScores(out, 10 + i, 1 + i % 3, 700 + i, "request " + std::to_string(i));
    preemptions += out.timings.preemptions;
  }
  EXPECT_GT(preemptions, 0);
  int64_t scored_rows = 0;
  for (const PlanRecord& p : fake->history()) scored_rows += p.scored_rows;
  EXPECT_GT(scored_rows, 0);
  ExpectAllFree(s.get(), {fake});
}

// The worker dies while a long prompt is being scored in chunks: after the reconnect the sequence
// restarts and scores only what had not arrived.
TEST_P(SchedulerCoreTest, PromptScoringResumesAfterAReconnect) {
  auto fake = std::make_shared<FakeWorker>();
  fake->FailAtPlan(4);
  SchedulerOptions options;
  options.reconnect_attempt_ms = 5;
  options.prefill_chunk = 6;
  auto s = Make(options, {fake});
  ASSERT_TRUE(s);
  SchedRequest r = MakeRequest(40, 5, 800);
  r.logprob_start = 3;
  auto ch = MustSubmit(s.get(), std::move(r));
  Outcome out = Collect(ch.get());
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.tokens[0], Expected(40, 5, 800));
  ExpectPromptScores(out, 40, 3, 800, "request");
  EXPECT_EQ(out.timings.preemptions, 1);
  EXPECT_EQ(fake->reconnects(), 1);
  // The restart's start asked only for the positions after those delivered before the failure.
  std::vector<int32_t> score_from;
  for (const PlanRecord& p : fake->history()) {
    score_from.insert(score_from.end(), p.started_score_from.begin(), p.started_score_from.end());
  }
  ASSERT_EQ(score_from.size(), 2u);
  EXPECT_EQ(score_from[0], 3);
  EXPECT_GT(score_from[1], 3);
  EXPECT_LT(score_from[1], 40);
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, ARequestThatKeepsBreakingItsWorkerIsAbortedAfterTheLimit) {
  auto fake = std::make_shared<FakeWorker>();
  fake->FailPlansStartingSeed(666);  // every start of this request kills the stream
  SchedulerOptions options;
  options.reconnect_attempt_ms = 5;
  options.max_worker_failures = 2;
  auto s = Make(options, {fake});
  ASSERT_TRUE(s);
  auto poison = MustSubmit(s.get(), MakeRequest(4, 20, 666));
  Outcome bad = Collect(poison.get());
  EXPECT_EQ(bad.status.code(), StatusCode::kUnavailable) << bad.status.ToString();
  EXPECT_NE(bad.status.message().find("aborted after 3 worker failures"), std::string::npos)
      << bad.status.message();
  // Two restarts were allowed, the third break ended it: three reconnects in all.
  EXPECT_TRUE(WaitUntil([&] { return fake->reconnects() == 3; }));
  // The worker goes on serving everyone else.
  auto good = MustSubmit(s.get(), MakeRequest(4, 20, 7));
  Outcome out = Collect(good.get());
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.tokens[0], Expected(4, 20, 7));
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, NoWorkerLeftClosesRequestsWithUnavailable) {
  auto fake = std::make_shared<FakeWorker>();
  fake->FailAtPlan(2);
  fake->SetReconnectable(false);
  SchedulerOptions options;
  options.worker_down_after_ms = 20;
  options.reconnect_attempt_ms = 5;
  auto s = Make(options, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(4, 30, 1));
  Outcome out = Collect(ch.get());
  EXPECT_EQ(out.status.code(), StatusCode::kUnavailable) << out.status.ToString();
  EXPECT_NE(out.status.message().find("fake-worker is down"), std::string::npos)
      << out.status.message();
  EXPECT_FALSE(s->Stats().workers(0).up());
  // While every worker is down, new requests end at once.
  auto later = MustSubmit(s.get(), MakeRequest(4, 30, 2));
  EXPECT_EQ(Collect(later.get()).status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(WaitUntil([&] { return s->Idle(); }));
}

TEST_P(SchedulerCoreTest, DestroyingTheSchedulerClosesOpenRequests) {
  FakeWorkerConfig slow;
  slow.step_delay = 1ms;
  auto fake = std::make_shared<FakeWorker>(slow);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(4, 200, 1));
  ASSERT_TRUE(fake->WaitForPlans(3));
  // Requests submitted right before the end may still sit in the command queue: they close too.
  std::vector<std::shared_ptr<RequestChannel>> late;
  for (int i = 0; i < 5; ++i) late.push_back(MustSubmit(s.get(), MakeRequest(4, 200, 10 + i)));
  s.reset();
  Outcome out = Collect(ch.get());
  EXPECT_TRUE(out.closed);
  EXPECT_EQ(out.status.code(), StatusCode::kUnavailable);
  for (auto& c : late) {
    Outcome o = Collect(c.get());
    EXPECT_TRUE(o.closed);
    EXPECT_EQ(o.status.code(), StatusCode::kUnavailable);
  }
}

// Whether `seed` was (re)started in plans [from, end) of `history`.
bool StartedIn(const std::vector<PlanRecord>& history, size_t from, uint64_t seed) {
  for (size_t i = from; i < history.size(); ++i) {
    for (const auto& e : history[i].entries) {
      if (e.seed == seed && !e.decode && e.start == 0) return true;
    }
  }
  return false;
}

TEST_P(SchedulerCoreTest, CommitRunsAtAStepBoundaryAndRecomputesUnlessReused) {
  FakeWorkerConfig config;
  config.step_delay = 1ms;
  config.num_pages = 512;  // 2048 token slots: both sequences fit
  auto fake = std::make_shared<FakeWorker>(config);
  auto s = Make({}, {fake});
  auto a = MustSubmit(s.get(), MakeRequest(5, 800, 1));
  SchedRequest rb = MakeRequest(5, 800, 2);
  rb.reuse_kv_on_weight_update = true;
  auto b = MustSubmit(s.get(), rb);
  ASSERT_TRUE(WaitUntil([&] { return fake->history().size() >= 10; }));

  // A failing apply changes nothing: same version, nothing restarted.
  size_t plans_before = fake->history().size();
  auto failed = s->CommitWeights([](int64_t) { return UnavailableError("worker x: gone"); }, "no");
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(s->weight_version().version, 0);

  int in_flight_at_apply = -1;
  int64_t applied = -1;
  plans_before = fake->history().size();
  auto committed = s->CommitWeights(
      [&](int64_t version) {
        in_flight_at_apply = fake->in_flight();
        applied = version;
        fake->set_weight_version(version);
        return OkStatus();
      },
      "step-1");
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ(in_flight_at_apply, 0);  // no plan was in flight when the workers switched
  EXPECT_EQ(applied, 1);
  EXPECT_EQ(committed->version, 1);
  EXPECT_EQ(committed->recomputed, 1);
  EXPECT_EQ(committed->reused, 1);
  EXPECT_EQ(s->weight_version().version, 1);
  EXPECT_EQ(s->weight_version().label, "step-1");

  std::map<uint64_t, std::vector<int64_t>> versions;
  const auto record = [&](uint64_t seed) {
    return [&versions, seed](const SampleEvent& e) {
      if (e.kind == SampleEvent::Kind::kToken) versions[seed].push_back(e.weight_version);
    };
  };
  Outcome oa = Collect(a.get(), record(1));
  Outcome ob = Collect(b.get(), record(2));
  // The fake's tokens depend on positions only: a restart changes nothing of the output.
  EXPECT_EQ(oa.tokens[0], Expected(5, 800, 1));
  EXPECT_EQ(ob.tokens[0], Expected(5, 800, 2));
  for (uint64_t seed : {1, 2}) {
    const std::vector<int64_t>& v = versions[seed];
    ASSERT_EQ(v.size(), 800u);
    const size_t switch_at = std::find(v.begin(), v.end(), 1) - v.begin();
    EXPECT_GT(switch_at, 0u);
    EXPECT_LT(switch_at, 800u) << "seed " << seed << " finished before the commit";
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], i < switch_at ? 7 : 1) << i;
  }
  // The recomputing sequence restarted from position 0 after the commit; the reusing one did not.
  const std::vector<PlanRecord> history = fake->history();
  EXPECT_TRUE(StartedIn(history, plans_before, 1));
  EXPECT_FALSE(StartedIn(history, plans_before, 2));
  EXPECT_EQ(oa.timings.preemptions, 0);  // a restart for new weights is not a preemption
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, PauseKeepFreezesAbortEndsAndResumeContinues) {
  FakeWorkerConfig config;
  config.step_delay = 1ms;
  config.num_pages = 512;
  auto fake = std::make_shared<FakeWorker>(config);
  auto s = Make({}, {fake});
  auto a = MustSubmit(s.get(), MakeRequest(5, 1500, 1));
  ASSERT_TRUE(WaitUntil([&] { return fake->history().size() >= 5; }));
  auto kept = s->Pause(PauseMode::kKeep, Clock::now() + 10s);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->frozen, 1);
  EXPECT_EQ(kept->request_ids, std::vector<std::string>{"r1"});
  // A request sent while paused waits.
  auto b = MustSubmit(s.get(), MakeRequest(3, 20, 2));
  const size_t frozen_at = fake->history().size();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fake->history().size(), frozen_at);  // nothing planned while paused
  EXPECT_EQ(s->weight_version().paused, PauseMode::kKeep);
  EXPECT_EQ(s->Stats().waiting_requests(), 1);
  // Switching to abort ends the started request with its partial output; b still waits.
  auto aborted = s->Pause(PauseMode::kAbort, Clock::now() + 10s);
  ASSERT_TRUE(aborted.ok());
  EXPECT_EQ(aborted->aborted, 1);
  EXPECT_EQ(aborted->queued, 1);
  Outcome oa = Collect(a.get());
  EXPECT_TRUE(oa.status.ok());
  EXPECT_EQ(oa.finish[0], v1::FINISH_REASON_ABORT);
  ASSERT_FALSE(oa.tokens[0].empty());
  EXPECT_LT(oa.tokens[0].size(), 1500u);
  const std::vector<int32_t> want = Expected(5, 1500, 1);
  EXPECT_TRUE(std::equal(oa.tokens[0].begin(), oa.tokens[0].end(), want.begin()));
  const ResumeResult resumed = s->Resume();
  EXPECT_TRUE(resumed.was_paused);
  EXPECT_GT(resumed.paused_ns, 0);
  Outcome ob = Collect(b.get());
  EXPECT_EQ(ob.tokens[0], Expected(3, 20, 2));
  EXPECT_EQ(s->weight_version().paused, PauseMode::kNone);
  EXPECT_FALSE(s->Resume().was_paused);
  EXPECT_EQ(s->Pause(PauseMode::kNone, Clock::now()).status().code(),
            StatusCode::kInvalidArgument);
  ExpectAllFree(s.get(), {fake});
}

TEST_P(SchedulerCoreTest, OverlapSendsTheNextPlanBeforeReadingAResult) {
  auto fake = std::make_shared<FakeWorker>();
  fake->SetGated(true);  // no result is returned
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto ch = MustSubmit(s.get(), MakeRequest(4, 10, 1));
  const int64_t expected = GetParam() ? 2 : 1;
  ASSERT_TRUE(fake->WaitForPlans(expected));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(fake->plans(), expected);
  fake->SetGated(false);
  Outcome out = Collect(ch.get());
  EXPECT_EQ(out.tokens[0], Expected(4, 10, 1));
  ExpectAllFree(s.get(), {fake});
}

TEST(SchedulerCreateTest, RejectsMismatchedWorkersAndBadOptions) {
  FakeWorkerConfig other;
  other.content_hash = "another-model";
  std::vector<std::unique_ptr<WorkerConnection>> conns;
  conns.push_back(std::make_unique<FakeConnection>(std::make_shared<FakeWorker>()));
  conns.push_back(std::make_unique<FakeConnection>(std::make_shared<FakeWorker>(other)));
  auto mismatched = Scheduler::Create({}, std::move(conns));
  EXPECT_EQ(mismatched.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatched.status().message().find("another-model"), std::string::npos);

  SchedulerOptions bad;
  bad.prefill_chunk = 0;
  std::vector<std::unique_ptr<WorkerConnection>> one;
  one.push_back(std::make_unique<FakeConnection>(std::make_shared<FakeWorker>()));
  auto refused = Scheduler::Create(bad, std::move(one));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--prefill-chunk"), std::string::npos);
  EXPECT_EQ(Scheduler::Create({}, {}).status().code(), StatusCode::kInvalidArgument);
}

// A new admin verb is an AdminOp and nothing else in the scheduler: this one, written here, runs on
// the loop thread through Scheduler::RunAdmin and reads the controller's state there.
struct ProbeOp : AdminOp {
  bool answer = true;
  int64_t version = -1;
  bool holds_steps = true;
  std::thread::id thread;
  void Apply(AdminController& admin, const std::shared_ptr<AdminOp>&, Clock::time_point) override {
    version = admin.version();
    holds_steps = admin.HoldsSteps();
    thread = std::this_thread::get_id();
    if (answer) Finish();
  }
};

TEST(SchedulerAdminTest, ANewAdminVerbIsOneOpRunOnTheLoopThread) {
  FakeWorkerConfig config;
  config.weight_version = 7;
  auto fake = std::make_shared<FakeWorker>(config);
  std::unique_ptr<Scheduler> s = MakeScheduler(SchedulerOptions{}, {fake});
  ASSERT_NE(s, nullptr);
  auto probe = std::make_shared<ProbeOp>();
  ASSERT_TRUE(s->RunAdmin(probe));
  EXPECT_EQ(probe->version, 7);
  EXPECT_FALSE(probe->holds_steps);
  EXPECT_NE(probe->thread, std::this_thread::get_id());

  // Paused in keep mode, steps are held; an op that does not answer leaves its caller at the
  // deadline, and the scheduler goes on serving.
  ASSERT_TRUE(s->Pause(PauseMode::kKeep, Clock::now() + std::chrono::seconds(5)).ok());
  auto silent = std::make_shared<ProbeOp>();
  silent->answer = false;
  EXPECT_FALSE(s->RunAdmin(silent, Clock::now() + std::chrono::milliseconds(50)));
  auto paused = std::make_shared<ProbeOp>();
  ASSERT_TRUE(s->RunAdmin(paused));
  EXPECT_TRUE(paused->holds_steps);
  s->Resume();
  ExpectAllFree(s.get(), {fake});
}

INSTANTIATE_TEST_SUITE_P(Overlap, SchedulerCoreTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "overlap" : "serial";
                         });

}  // namespace
}  // namespace astr::sched
