// The metrics library: exact text of a small registry, escaping, bucket placement at the bounds,
// callback children, the checks on names, and concurrent updates while rendering.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/metrics/registry.h"
#include "common/metrics/text_format.h"

namespace astr::metrics {
namespace {

TEST(MetricsTest, RendersTheTextFormat) {
  Registry r;
  CounterFamily& tokens = r.AddCounter("astr:tokens_total", "Tokens.", {"model"});
  GaugeFamily& queue = r.AddGauge("astr:queue", "Waiting\nrequests \\ now.", {});
  HistogramFamily& latency =
      r.AddHistogram("astr:latency_seconds", "Latency.", {"model", "worker"}, {0.5, 1, 2.5});
  tokens.WithLabels({"m"}).Increment(3);
  tokens.WithLabels({"m"}).Increment();
  queue.WithLabels({}).Set(-2.25);
  Histogram& h = latency.WithLabels({"m", "w:1"});
  h.Observe(0.25);
  h.Observe(0.5);  // le is inclusive: counts in the 0.5 bucket
  h.Observe(2);
  h.Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP astr:latency_seconds Latency.\n"
            "# TYPE astr:latency_seconds histogram\n"
            "astr:latency_seconds_bucket{model=\"m\",worker=\"w:1\",le=\"0.5\"} 2\n"
            "astr:latency_seconds_bucket{model=\"m\",worker=\"w:1\",le=\"1\"} 2\n"
            "astr:latency_seconds_bucket{model=\"m\",worker=\"w:1\",le=\"2.5\"} 3\n"
            "astr:latency_seconds_bucket{model=\"m\",worker=\"w:1\",le=\"+Inf\"} 4\n"
            "astr:latency_seconds_sum{model=\"m\",worker=\"w:1\"} 9.75\n"
            "astr:latency_seconds_count{model=\"m\",worker=\"w:1\"} 4\n"
            "# HELP astr:queue Waiting\\nrequests \\\\ now.\n"
            "# TYPE astr:queue gauge\n"
            "astr:queue -2.25\n"
            "# HELP astr:tokens_total Tokens.\n"
            "# TYPE astr:tokens_total counter\n"
            "astr:tokens_total{model=\"m\"} 4\n");
}

TEST(MetricsTest, EscapesLabelValuesAndOrdersChildren) {
  Registry r;
  CounterFamily& f = r.AddCounter("x_total", "X.", {"path"});
  f.WithLabels({"b"}).Increment(2);
  f.WithLabels({"a\"q\\\n"}).Increment(1);
  EXPECT_EQ(r.Render(),
            "# HELP x_total X.\n"
            "# TYPE x_total counter\n"
            "x_total{path=\"a\\\"q\\\\\\n\"} 1\n"
            "x_total{path=\"b\"} 2\n");
}

TEST(MetricsTest, CallbackChildrenAreReadAtRender) {
  Registry r;
  std::atomic<int64_t> waiting{3};
  CallbackFamily& g = r.AddCallbackGauge("astr:waiting", "Waiting.", {"model"});
  g.Add({"m"}, [&] { return static_cast<double>(waiting.load()); });
  CallbackFamily& c = r.AddCallbackCounter("astr:steps_total", "Steps.", {"worker"});
  c.Add({"w1"}, [] { return 10.0; });
  c.Add({"w0"}, [] { return 1e6; });
  waiting = 5;
  EXPECT_EQ(r.Render(),
            "# HELP astr:steps_total Steps.\n"
            "# TYPE astr:steps_total counter\n"
            "astr:steps_total{worker=\"w0\"} 1000000\n"
            "astr:steps_total{worker=\"w1\"} 10\n"
            "# HELP astr:waiting Waiting.\n"
            "# TYPE astr:waiting gauge\n"
            "astr:waiting{model=\"m\"} 5\n");
}

TEST(MetricsTest, ARemovedCallbackChildIsNeitherRenderedNorRead) {
  Registry r;
  CallbackFamily& up = r.AddCallbackGauge("astr:worker_up", "Up.", {"worker"});
  int reads = 0;
  up.Add({"a:1"}, [&] {
    ++reads;
    return 1.0;
  });
  up.Add({"b:2"}, [] { return 0.0; });
  up.Remove({"a:1"});
  up.Remove({"never-added"});
  EXPECT_EQ(r.Render(),
            "# HELP astr:worker_up Up.\n"
            "# TYPE astr:worker_up gauge\n"
            "astr:worker_up{worker=\"b:2\"} 0\n");
  EXPECT_EQ(reads, 0);
  up.Add({"a:1"}, [] { return 1.0; });  // the same worker joins again
  EXPECT_NE(r.Render().find("astr:worker_up{worker=\"a:1\"} 1\n"), std::string::npos);
}

TEST(MetricsTest, ABufferAddsItsObservationsAtFlush) {
  Registry r;
  Histogram& h = r.AddHistogram("h", "H.", {}, {1, 2}).WithLabels({});
  HistogramBuffer buffer(&h);
  buffer.Observe(0.5);
  buffer.Observe(2);
  buffer.Observe(3);
  EXPECT_EQ(h.Read().count, 0u);  // not before the flush
  buffer.Flush();
  buffer.Flush();  // nothing new: adds nothing
  h.Observe(1);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(s.sum, 6.5);
  buffer.Observe(10);
  buffer.Flush();
  EXPECT_EQ(h.Read().cumulative, (std::vector<uint64_t>{2, 3, 5}));
  EXPECT_EQ(h.Read().sum, 16.5);
}

TEST(MetricsTest, NumbersRoundTrip) {
  auto number = [](double v) {
    std::string s;
    text::AppendNumber(v, &s);
    return s;
  };
  EXPECT_EQ(number(0), "0");
  EXPECT_EQ(number(42), "42");
  EXPECT_EQ(number(-7), "-7");
  EXPECT_EQ(number(0.001), "0.001");
  EXPECT_EQ(number(0.0005), "0.0005");
  EXPECT_EQ(number(0.00001), "1e-05");
  EXPECT_EQ(number(16.384), "16.384");
  EXPECT_EQ(number(1e-9), "1e-09");
  EXPECT_EQ(number(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(number(1e300), "1e+300");
  EXPECT_EQ(number(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(number(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(number(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(MetricsTest, Buckets) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 5), (std::vector<double>{1, 2, 4, 8, 16}));
  EXPECT_EQ(OneTwoFiveBuckets(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(OneTwoFiveBuckets(4096),
            (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}));
}

TEST(MetricsTest, NamesAreChecked) {
  EXPECT_TRUE(text::ValidMetricName("astr:step_time_seconds"));
  EXPECT_FALSE(text::ValidMetricName("1x"));
  EXPECT_FALSE(text::ValidMetricName("a-b"));
  EXPECT_TRUE(text::ValidLabelName("finished_reason"));
  EXPECT_FALSE(text::ValidLabelName("__name"));
  EXPECT_FALSE(text::ValidLabelName("a:b"));
  Registry r;
  r.AddGauge("g", "G.", {});
  EXPECT_DEATH(r.AddGauge("g", "Again.", {}), "registered twice");
  EXPECT_DEATH(r.AddCounter("requests", "R.", {}), "ends with _total");
  EXPECT_DEATH(r.AddHistogram("h", "H.", {"le"}, {1}), "'le'");
  EXPECT_DEATH(r.AddHistogram("h", "H.", {}, {2, 1}), "strictly increasing");
  EXPECT_DEATH(r.AddGauge("g2", "G.", {"a"}).WithLabels({"x", "y"}), "2 label values for 1");
}

// Writers on every kind of child while another thread renders and a third adds families: the
// totals come out exact and nothing races (run under TSan in CI builds that have it).
TEST(MetricsTest, ConcurrentUpdatesAndRenders) {
  Registry r;
  Counter& c = r.AddCounter("c_total", "C.", {"k"}).WithLabels({"v"});
  Gauge& g = r.AddGauge("g", "G.", {}).WithLabels({});
  HistogramFamily& hf = r.AddHistogram("h", "H.", {"k"}, {1, 10, 100});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::atomic<bool> done{false};
  std::thread renderer([&] {
    while (!done.load()) {
      const std::string text = r.Render();
      EXPECT_NE(text.find("# TYPE h histogram"), std::string::npos);
    }
  });
  std::thread adder([&] {
    for (int i = 0; i < 50; ++i) r.AddGauge("late_" + std::to_string(i), "Late.", {});
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      Histogram& h = hf.WithLabels({t % 2 == 0 ? "even" : "odd"});
      for (int i = 0; i < kPerThread; ++i) {
        c.Increment();
        g.Add(1);
        h.Observe(i % 200);
      }
    });
  }
  for (auto& w : writers) w.join();
  adder.join();
  done = true;
  renderer.join();
  EXPECT_EQ(c.value(), kThreads * kPerThread);
  EXPECT_EQ(g.value(), kThreads * kPerThread);
  const Histogram::Snapshot even = hf.WithLabels({"even"}).Read();
  EXPECT_EQ(even.count, 2u * kPerThread);
  // Per thread: i % 200 over 0..199, 100 times: 2 values <= 1, 11 <= 10, 101 <= 100.
  EXPECT_EQ(even.cumulative,
            (std::vector<uint64_t>{2 * 2 * 100, 2 * 11 * 100, 2 * 101 * 100, 2u * kPerThread}));
  EXPECT_EQ(even.sum, 2.0 * 100 * (199 * 200 / 2));
}

}  // namespace
}  // namespace astr::metrics
