// The scheduler core's Prometheus metrics against in-process FakeWorkers: after requests of known
// prompt and generation lengths the counters equal what was sent, the request histograms count
// each request once, the per-token ones each token, and the per-worker ones every step the fake
// saw. Expected values come from the requests and from the fakes' own records, never from the
// scheduler.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>

#include "scheduler/scheduler.h"
#include "tests/scheduler/fake_worker.h"
#include "tests/support/test_util.h"

namespace astr::sched {
namespace {

using namespace std::chrono_literals;
using testing::FakeConnection;
using testing::FakeToken;
using testing::FakeWorker;
using testing::FakeWorkerConfig;
using testing::PlanRecord;

constexpr int32_t kVocab = 1000;  // FakeWorkerConfig's

SchedRequest MakeRequest(int prompt_len, int max_tokens, uint64_t seed, int n = 1) {
  SchedRequest r;
  r.request_id = "r" + std::to_string(seed);
  // Each seed its own prompt, so that requests share no cached prefix unless a test means them
  // to (the fake's tokens depend on positions only).
  for (int i = 0; i < prompt_len; ++i) {
    r.prompt.push_back(static_cast<int32_t>((seed * 131 + uint64_t(i) * 7 + 10) % kVocab));
  }
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  r.n = n;
  return r;
}

// Reads a channel until it closes; `on_event` sees every event. Returns the close status.
template <typename Fn>
Status Drain(RequestChannel* channel, Fn&& on_event) {
  const auto give_up = Clock::now() + 20s;
  while (Clock::now() < give_up) {
    RequestChannel::Batch batch = channel->Wait(100ms);
    for (const SampleEvent& e : batch.events) on_event(e);
    if (batch.closed) return batch.status;
  }
  return Status(StatusCode::kDeadlineExceeded, "the channel did not close");
}
Status Drain(RequestChannel* channel) {
  return Drain(channel, [](const SampleEvent&) {});
}

// The sample's value; fails the test (and returns -1) when the rendering lacks it.
double Value(const std::map<std::string, double>& samples, const std::string& key) {
  auto it = samples.find(key);
  EXPECT_NE(it, samples.end()) << "no sample " << key;
  return it == samples.end() ? -1 : it->second;
}

std::unique_ptr<Scheduler> MakeScheduler(SchedulerOptions options,
                                         const std::vector<std::shared_ptr<FakeWorker>>& fakes) {
  std::vector<std::unique_ptr<WorkerConnection>> conns;
  for (const auto& f : fakes) conns.push_back(std::make_unique<FakeConnection>(f));
  auto created = Scheduler::Create(options, std::move(conns));
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  return created.ok() ? std::move(*created) : nullptr;
}

// Once every request closed: the loop has answered every plan and published its stats.
void WaitSettled(Scheduler* s, const std::vector<std::shared_ptr<FakeWorker>>& fakes) {
  const auto give_up = Clock::now() + 10s;
  auto settled = [&] {
    if (!s->Idle()) return false;
    const v1::GetServerStatsResponse stats = s->Stats();
    for (size_t i = 0; i < fakes.size(); ++i) {
      const v1::WorkerStats& w = stats.workers(static_cast<int>(i));
      if (fakes[i]->in_flight() != 0 || fakes[i]->live_sequences() != 0 ||
          w.steps() != fakes[i]->plans() || w.free_pages() != w.total_pages()) {
        return false;
      }
    }
    return stats.running_requests() == 0 && stats.waiting_requests() == 0;
  };
  while (!settled() && Clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(settled()) << s->Stats().DebugString();
}

const std::string kModel = "model=\"fake\"";  // FakeWorker::Info's model_name

class SchedulerMetricsTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<Scheduler> Make(SchedulerOptions options,
                                  const std::vector<std::shared_ptr<FakeWorker>>& fakes) {
    options.overlap_steps = GetParam();
    return MakeScheduler(options, fakes);
  }
};

TEST_P(SchedulerMetricsTest, CountersAndHistogramsMatchWhatWasSent) {
  FakeWorkerConfig c0, c1;
  c0.address = "fake-0";
  c1.address = "fake-1";
  auto f0 = std::make_shared<FakeWorker>(c0);
  auto f1 = std::make_shared<FakeWorker>(c1);
  // Gated until every request is queued, so that routing spreads them over both workers.
  f0->SetGated(true);
  f1->SetGated(true);
  auto s = Make({}, {f0, f1});
  ASSERT_TRUE(s);
  struct Sent {
    int prompt, max_tokens, n;
  };
  const std::vector<Sent> sent = {{3, 2, 1}, {5, 4, 1}, {8, 6, 2}, {13, 1, 1}, {21, 10, 3}};
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (size_t i = 0; i < sent.size(); ++i) {
    auto ch = s->Submit(MakeRequest(sent[i].prompt, sent[i].max_tokens, 50 + i, sent[i].n));
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    channels.push_back(*ch);
  }
  f0->SetGated(false);
  f1->SetGated(false);
  for (auto& ch : channels) EXPECT_TRUE(Drain(ch.get()).ok());
  WaitSettled(s.get(), {f0, f1});

  int64_t prompt_tokens = 0, generated = 0, samples = 0, token_gaps = 0, fed = 0, queried = 0;
  for (const Sent& r : sent) {
    prompt_tokens += r.prompt;
    queried += int64_t{r.prompt} * r.n;
    generated += int64_t{r.max_tokens} * r.n;
    samples += r.n;
    token_gaps += int64_t{r.max_tokens - 1} * r.n;
    // No preemption (the pools are large): each sample feeds its prompt once, less what it found
    // in the prefix cache (another sample's full pages), then one decode row per token after the
    // first.
    fed += int64_t{r.prompt + r.max_tokens - 1} * r.n;
  }
  const int64_t cached = f0->cached_tokens() + f1->cached_tokens();
  fed -= cached;
  // The n > 1 requests' later samples reuse their prompt's full pages where they land with
  // sample 0 (the 21-token prompt of n = 3 has 5 full pages of 4 to share).
  EXPECT_GT(cached, 0);
  const auto m = ::astr::testing::MetricSamples(s->RenderMetrics());
  const int64_t requests = static_cast<int64_t>(sent.size());
  EXPECT_EQ(Value(m, "astr:prompt_tokens_total{" + kModel + "}"), prompt_tokens);
  // The output metrics count what a front returned (generate_service_test): with no front here,
  // nothing.
  EXPECT_EQ(Value(m, "astr:generation_tokens_total{" + kModel + "}"), 0);
  EXPECT_EQ(Value(m, "astr:requests_admitted_total{" + kModel + "}"), requests);
  EXPECT_EQ(Value(m, "astr:requests_refused_total{" + kModel + "}"), 0);
  EXPECT_EQ(Value(m, "astr:num_preemptions_total{" + kModel + "}"), 0);
  EXPECT_EQ(Value(m, "astr:num_requests_running{" + kModel + "}"), 0);
  EXPECT_EQ(Value(m, "astr:num_requests_waiting{" + kModel + "}"), 0);
  EXPECT_EQ(Value(m, "astr:weight_version{" + kModel + "}"), 0);
  for (const char* reason : {"length", "stop", "eos", "abort"}) {
    EXPECT_EQ(
        Value(m, "astr:request_success_total{" + kModel + ",finished_reason=\"" + reason + "\"}"),
        0)
        << reason;
  }
  for (const char* per_request :
       {"astr:time_to_first_token_seconds", "astr:e2e_request_latency_seconds",
        "astr:request_queue_time_seconds", "astr:request_prefill_time_seconds",
        "astr:request_decode_time_seconds", "astr:request_prompt_tokens"}) {
    const std::string name = per_request;
    EXPECT_EQ(Value(m, name + "_count{" + kModel + "}"), requests) << name;
    EXPECT_EQ(Value(m, name + "_bucket{" + kModel + ",le=\"+Inf\"}"), requests) << name;
  }
  EXPECT_EQ(Value(m, "astr:request_prompt_tokens_sum{" + kModel + "}"), prompt_tokens);
  EXPECT_EQ(Value(m, "astr:request_generation_tokens_count{" + kModel + "}"), 0);
  // Prompts of 3, 5, 8, 13, 21 tokens: two are <= 5, three <= 10, four <= 20.
  EXPECT_EQ(Value(m, "astr:request_prompt_tokens_bucket{" + kModel + ",le=\"5\"}"), 2);
  EXPECT_EQ(Value(m, "astr:request_prompt_tokens_bucket{" + kModel + ",le=\"10\"}"), 3);
  EXPECT_EQ(Value(m, "astr:request_prompt_tokens_bucket{" + kModel + ",le=\"20\"}"), 4);
  EXPECT_EQ(Value(m, "astr:inter_token_latency_seconds_count{" + kModel + "}"), token_gaps);
  EXPECT_EQ(Value(m, "astr:prefix_cache_queries_total{" + kModel + "}"), queried);
  EXPECT_EQ(Value(m, "astr:prefix_cache_hits_total{" + kModel + "}"), cached);

  // Per worker: what each fake recorded.
  int64_t all_steps = 0, all_fed = 0;
  for (const auto& fake : {f0, f1}) {
    const std::string labels = kModel + ",worker=\"" + fake->config().address + "\"";
    int64_t entries = 0, tokens = 0;
    for (const PlanRecord& plan : fake->history()) {
      entries += static_cast<int64_t>(plan.entries.size());
      tokens += plan.tokens;
    }
    const double steps = static_cast<double>(fake->plans());
    EXPECT_GT(steps, 0) << labels;  // both workers got requests
    EXPECT_EQ(Value(m, "astr:steps_total{" + labels + "}"), steps);
    EXPECT_EQ(Value(m, "astr:step_time_seconds_count{" + labels + "}"), steps);
    EXPECT_EQ(Value(m, "astr:batch_size_count{" + labels + "}"), steps);
    EXPECT_EQ(Value(m, "astr:batch_size_sum{" + labels + "}"), entries);
    EXPECT_EQ(Value(m, "astr:iteration_tokens_count{" + labels + "}"), steps);
    EXPECT_EQ(Value(m, "astr:iteration_tokens_sum{" + labels + "}"), tokens);
    EXPECT_EQ(Value(m, "astr:kv_pages_used{" + labels + "}"), 0);
    EXPECT_EQ(Value(m, "astr:kv_pages_total{" + labels + "}"), fake->config().num_pages);
    EXPECT_EQ(Value(m, "astr:worker_up{" + labels + "}"), 1);
    all_steps += fake->plans();
    all_fed += tokens;
  }
  EXPECT_EQ(all_steps, s->Stats().steps());
  EXPECT_EQ(all_fed, fed);
}

// Each way a sample ends is counted under its reason, once per sample.
TEST_P(SchedulerMetricsTest, FinishedReasonsPerSample) {
  FakeWorkerConfig slow;
  slow.step_delay = 1ms;  // the cancel and FinishSample below land long before max_tokens
  auto fake = std::make_shared<FakeWorker>(slow);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  auto expected = [](int prompt, uint64_t seed, int k) {
    return FakeToken(0, prompt + k, seed, kVocab);
  };
  // EOS: the third token (assuming the first two differ from it).
  SchedRequest eos = MakeRequest(4, 10, 11);
  ASSERT_NE(expected(4, 11, 0), expected(4, 11, 2));
  ASSERT_NE(expected(4, 11, 1), expected(4, 11, 2));
  eos.sampling.eos_token_ids.push_back(expected(4, 11, 2));
  // A stop token id: the second token.
  SchedRequest stop = MakeRequest(4, 10, 12);
  ASSERT_NE(expected(4, 12, 0), expected(4, 12, 1));
  stop.sampling.stop_token_ids.push_back(expected(4, 12, 1));
  auto ch_eos = *s->Submit(std::move(eos));
  auto ch_stop = *s->Submit(std::move(stop));
  auto ch_cancel = *s->Submit(MakeRequest(4, 200, 13));
  auto ch_two = *s->Submit(MakeRequest(3, 60, 14, /*n=*/2));
  EXPECT_TRUE(Drain(ch_eos.get()).ok());
  EXPECT_TRUE(Drain(ch_stop.get()).ok());
  // Cancelled at its first token, as a client that goes away.
  bool cancelled = false;
  const Status cancel_status = Drain(ch_cancel.get(), [&](const SampleEvent&) {
    if (cancelled) return;
    s->Cancel(ch_cancel->key(), Status(StatusCode::kCancelled, "client left"));
    cancelled = true;
  });
  EXPECT_EQ(cancel_status.code(), StatusCode::kCancelled);
  // Sample 1 ended by the front at its first token (a stop string), sample 0 runs to length.
  bool finished_one = false;
  const Status two_status = Drain(ch_two.get(), [&](const SampleEvent& e) {
    if (e.index != 1 || finished_one) return;
    s->FinishSample(ch_two->key(), 1, /*kept_tokens=*/1);
    finished_one = true;
  });
  EXPECT_TRUE(two_status.ok()) << two_status.ToString();
  WaitSettled(s.get(), {fake});
  const auto m = ::astr::testing::MetricSamples(s->RenderMetrics());
  auto finished = [&](const char* reason) {
    return Value(m,
                 "astr:request_success_total{" + kModel + ",finished_reason=\"" + reason + "\"}");
  };
  // How each sample ended is counted by the front that returned it (generate_service_test's
  // OutputMetricsCountWhatWasReturned): the loop counts none of them, whichever way they ended.
  for (const char* reason : {"eos", "stop", "length", "abort"}) EXPECT_EQ(finished(reason), 0);
  // Every request started and produced a token: each is in the request histograms once.
  EXPECT_EQ(Value(m, "astr:e2e_request_latency_seconds_count{" + kModel + "}"), 4);
  EXPECT_EQ(Value(m, "astr:request_decode_time_seconds_count{" + kModel + "}"), 4);
}

TEST_P(SchedulerMetricsTest, RefusalsAreCounted) {
  FakeWorkerConfig small;
  small.num_pages = 8;  // 32 tokens
  auto fake = std::make_shared<FakeWorker>(small);
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Submit(MakeRequest(30, 10, 1)).status().code(), StatusCode::kResourceExhausted);
  s->StartDrain();
  EXPECT_EQ(s->Submit(MakeRequest(3, 3, 2)).status().code(), StatusCode::kUnavailable);
  const auto m = ::astr::testing::MetricSamples(s->RenderMetrics());
  EXPECT_EQ(Value(m, "astr:requests_refused_total{" + kModel + "}"), 2);
  EXPECT_EQ(Value(m, "astr:requests_admitted_total{" + kModel + "}"), 0);
  EXPECT_EQ(Value(m, "astr:kv_pages_total{" + kModel + ",worker=\"fake-worker\"}"), 8);
}

// The front adds its own families to the core's registry; they render with the core's.
TEST_P(SchedulerMetricsTest, TheFrontCanAddFamilies) {
  auto fake = std::make_shared<FakeWorker>();
  auto s = Make({}, {fake});
  ASSERT_TRUE(s);
  metrics::Counter& ok =
      s->metrics()
          .AddCounter("astr:http_requests_total", "HTTP requests.", {"route", "code"})
          .WithLabels({"/v1/completions", "200"});
  ok.Increment();
  const std::string text = s->RenderMetrics();
  EXPECT_NE(text.find("# TYPE astr:http_requests_total counter\n"
                      "astr:http_requests_total{route=\"/v1/completions\",code=\"200\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE astr:num_requests_running gauge\n"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Overlap, SchedulerMetricsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "overlap" : "no_overlap";
                         });

}  // namespace
}  // namespace astr::sched
