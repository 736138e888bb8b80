#include "common/metrics/registry.h"

#include <cmath>

#include "common/base/logging.h"
#include "common/metrics/text_format.h"

namespace astr::metrics {
namespace {

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void CheckNames(const std::string& name, MetricType type,
                const std::vector<std::string>& label_names) {
  CHECK(text::ValidMetricName(name)) << "metric name '" << name << "' is not a Prometheus name";
  CHECK(type != MetricType::kCounter || name.ends_with("_total"))
      << "counter " << name << ": a counter's name ends with _total";
  for (const std::string& label : label_names) {
    CHECK(text::ValidLabelName(label))
        << "metric " << name << ": label name '" << label << "' is not a Prometheus label name";
    CHECK(type != MetricType::kHistogram || label != "le")
        << "histogram " << name << ": the label 'le' is the bucket's";
  }
}

}  // namespace

template <typename F>
F& Registry::Add(std::unique_ptr<F> family) {
  CheckNames(family->name(), family->type(), family->label_names());
  F& ref = *family;
  std::string name = family->name();
  std::lock_guard<std::mutex> lock(mu_);
  const bool added = families_.try_emplace(name, std::move(family)).second;
  CHECK(added) << "metric " << name << " is registered twice";
  return ref;
}

CounterFamily& Registry::AddCounter(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  return Add(std::make_unique<CounterFamily>(std::move(name), std::move(help), MetricType::kCounter,
                                             std::move(label_names),
                                             [] { return std::make_unique<Counter>(); }));
}

GaugeFamily& Registry::AddGauge(std::string name, std::string help,
                                std::vector<std::string> label_names) {
  return Add(std::make_unique<GaugeFamily>(std::move(name), std::move(help), MetricType::kGauge,
                                           std::move(label_names),
                                           [] { return std::make_unique<Gauge>(); }));
}

HistogramFamily& Registry::AddHistogram(std::string name, std::string help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    CHECK(std::isfinite(bounds[i]) && (i == 0 || bounds[i] > bounds[i - 1]))
        << "histogram " << name << ": bucket bounds must be finite and strictly increasing";
  }
  // The children keep a view of the bounds; the family's closure owns them.
  auto owned = std::make_shared<const std::vector<double>>(std::move(bounds));
  return Add(std::make_unique<HistogramFamily>(
      std::move(name), std::move(help), MetricType::kHistogram, std::move(label_names),
      [owned] { return std::make_unique<Histogram>(std::span<const double>(*owned)); }));
}

CallbackFamily& Registry::AddCallbackGauge(std::string name, std::string help,
                                           std::vector<std::string> label_names) {
  return Add(std::make_unique<CallbackFamily>(std::move(name), std::move(help), MetricType::kGauge,
                                              std::move(label_names)));
}

CallbackFamily& Registry::AddCallbackCounter(std::string name, std::string help,
                                             std::vector<std::string> label_names) {
  return Add(std::make_unique<CallbackFamily>(std::move(name), std::move(help),
                                              MetricType::kCounter, std::move(label_names)));
}

std::string Registry::Render() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, family] : families_) {
    out.append("# HELP ");
    out.append(name);
    out.push_back(' ');
    text::AppendHelp(family->help(), &out);
    out.append("\n# TYPE ");
    out.append(name);
    out.push_back(' ');
    out.append(TypeName(family->type()));
    out.push_back('\n');
    family->RenderSamples(&out);
  }
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(count));
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

std::vector<double> OneTwoFiveBuckets(double max) {
  std::vector<double> out;
  for (double scale = 1;; scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > max) return out;
      out.push_back(m * scale);
    }
  }
}

}  // namespace astr::metrics
