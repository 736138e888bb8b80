// A set of metric families and their rendering in the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), what GET /metrics answers:
//
//   # HELP astr:generation_tokens_total Tokens generated.
//   # TYPE astr:generation_tokens_total counter
//   astr:generation_tokens_total{model="m"} 42
//
// Families render in name order, children in label-value order. Counters are named with their
// `_total` suffix (the TYPE line too, as prometheus_client writes them); a histogram renders
// cumulative `_bucket{le=".."}` lines up to le="+Inf", then `_sum` and `_count`.
//
// Thread-safe: families may be added while another thread renders or updates (the HTTP front adds
// its own to the scheduler's registry). A name that is not a valid Prometheus name, a counter
// name without `_total`, a histogram with the label `le` or bounds that do not strictly increase,
// and a name registered twice are programming errors: they CHECK-fail naming the metric.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics/metric.h"

namespace astr::metrics {

// Content-Type of Render's text.
inline constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

class Registry {
 public:
  // Each returns the new family, owned by the registry (valid for its life).
  CounterFamily& AddCounter(std::string name, std::string help,
                            std::vector<std::string> label_names);
  GaugeFamily& AddGauge(std::string name, std::string help, std::vector<std::string> label_names);
  // `bounds`: the buckets' upper bounds, finite and strictly increasing (+Inf is implied).
  HistogramFamily& AddHistogram(std::string name, std::string help,
                                std::vector<std::string> label_names, std::vector<double> bounds);
  // Children read at render time (CallbackFamily::Add).
  CallbackFamily& AddCallbackGauge(std::string name, std::string help,
                                   std::vector<std::string> label_names);
  CallbackFamily& AddCallbackCounter(std::string name, std::string help,
                                     std::vector<std::string> label_names);

  // Every family in the text format 0.0.4 (kTextContentType).
  std::string Render() const;

 private:
  // Checks the names and takes ownership; returns `family`.
  template <typename F>
  F& Add(std::unique_ptr<F> family);

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>, std::less<>> families_;
};

// Bucket bounds: `count` values start, start * factor, start * factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// 1, 2, 5, 10, 20, 50, ... up to and including `max` (token counts).
std::vector<double> OneTwoFiveBuckets(double max);

}  // namespace astr::metrics
