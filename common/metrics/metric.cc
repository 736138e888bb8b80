#include "common/metrics/metric.h"

#include "common/base/logging.h"
#include "common/metrics/text_format.h"

namespace astr::metrics {
namespace {

// `name{labels} value\n`.
void AppendSample(std::string_view name, std::string_view suffix,
                  const std::vector<std::string>& label_names,
                  const std::vector<std::string>& values, std::string_view le, double value,
                  std::string* out) {
  out->append(name);
  out->append(suffix);
  text::AppendLabels(label_names, values, le, out);
  out->push_back(' ');
  text::AppendNumber(value, out);
  out->push_back('\n');
}

}  // namespace

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

void HistogramBuffer::Flush() {
  if (!pending_) return;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] == 0) continue;
    histogram_->counts_[i].fetch_add(counts_[i], std::memory_order_relaxed);
    counts_[i] = 0;
  }
  histogram_->sum_.fetch_add(sum_, std::memory_order_relaxed);
  sum_ = 0;
  pending_ = false;
}

std::vector<std::string> FamilyBase::CheckedValues(
    std::initializer_list<std::string_view> values) const {
  CHECK(values.size() == label_names_.size())
      << "metric " << name_ << ": " << values.size() << " label values for " << label_names_.size()
      << " label names";
  return std::vector<std::string>(values.begin(), values.end());
}

template <>
void Family<Counter>::RenderSamples(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_) {
    AppendSample(name(), "", label_names(), values, "", static_cast<double>(child->value()), out);
  }
}

template <>
void Family<Gauge>::RenderSamples(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_) {
    AppendSample(name(), "", label_names(), values, "", child->value(), out);
  }
}

template <>
void Family<Histogram>::RenderSamples(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string le;
  for (const auto& [values, child] : children_) {
    const Histogram::Snapshot s = child->Read();
    const std::span<const double> bounds = child->bounds();
    for (size_t i = 0; i <= bounds.size(); ++i) {
      le.clear();
      if (i < bounds.size()) {
        text::AppendNumber(bounds[i], &le);
      } else {
        le = "+Inf";
      }
      AppendSample(name(), "_bucket", label_names(), values, le,
                   static_cast<double>(s.cumulative[i]), out);
    }
    AppendSample(name(), "_sum", label_names(), values, "", s.sum, out);
    AppendSample(name(), "_count", label_names(), values, "", static_cast<double>(s.count), out);
  }
}

void CallbackFamily::Add(std::initializer_list<std::string_view> values,
                         std::function<double()> read) {
  std::vector<std::string> key = CheckedValues(values);
  std::lock_guard<std::mutex> lock(mu_);
  children_[std::move(key)] = std::move(read);
}

void CallbackFamily::Remove(std::initializer_list<std::string_view> values) {
  std::vector<std::string> key = CheckedValues(values);
  std::lock_guard<std::mutex> lock(mu_);
  children_.erase(key);
}

void CallbackFamily::RenderSamples(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, read] : children_) {
    AppendSample(name(), "", label_names(), values, "", read(), out);
  }
}

}  // namespace astr::metrics
