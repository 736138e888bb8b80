// Prometheus metrics, the values: Counter, Gauge and Histogram (one labelled child of a family),
// and Family<M>, the children of one metric name keyed by their label values. A Registry
// (registry.h) owns the families and renders them.
//
// Hot path: a child is resolved once (Family::WithLabels takes the family's lock) and kept by
// reference; updating it is a relaxed atomic add or store, never a lock or an allocation. A
// Histogram::Observe is a binary search over the family's bounds and two relaxed atomic adds; a
// HistogramBuffer takes a loop's many observations (one per token) with plain adds and hands them
// to its histogram once per iteration.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace astr::metrics {

// A count that only goes up (events, tokens). Integers: every counter astr exports counts things.
class Counter {
 public:
  void Increment(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets: bucket i counts values <= bounds[i] (Prometheus' `le`,
// inclusive); one more bucket counts the rest (+Inf).
class Histogram {
 public:
  // A consistent-enough view for rendering: `cumulative` has bounds + 1 entries (the last is
  // +Inf) and count == cumulative.back(); `sum` may be read a moment apart from the buckets.
  struct Snapshot {
    std::vector<uint64_t> cumulative;
    double sum = 0;
    uint64_t count = 0;
  };

  // `bounds`: finite and strictly increasing (the family checks); outlives the histogram.
  explicit Histogram(std::span<const double> bounds);

  void Observe(double v) {
    counts_[BucketOf(v)].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
  }
  Snapshot Read() const;
  std::span<const double> bounds() const { return bounds_; }
  // Index of the bucket that counts `v` (bounds().size() for +Inf).
  size_t BucketOf(double v) const {
    return static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                               bounds_.begin());
  }

 private:
  friend class HistogramBuffer;

  std::span<const double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [bounds + 1], not cumulative
  std::atomic<double> sum_{0};
};

// Observations of one thread, gathered without atomics and added to a Histogram by Flush (one
// relaxed add per non-empty bucket, one for the sum). For a loop that observes many values per
// iteration: they show up at its next Flush. Not thread-safe; one owner.
class HistogramBuffer {
 public:
  HistogramBuffer() = default;  // attached to nothing: assign one made with a histogram
  explicit HistogramBuffer(Histogram* histogram)
      : histogram_(histogram), counts_(histogram->bounds().size() + 1, 0) {}

  void Observe(double v) {
    ++counts_[histogram_->BucketOf(v)];
    sum_ += v;
    pending_ = true;
  }
  void Flush();

 private:
  Histogram* histogram_ = nullptr;
  std::vector<uint64_t> counts_;  // [bounds + 1], since the last Flush
  double sum_ = 0;
  bool pending_ = false;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// What every family has; the registry renders through it.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(type),
        label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends the family's sample lines (no HELP / TYPE), children in label-value order.
  virtual void RenderSamples(std::string* out) const = 0;

 protected:
  // CHECK-fails unless there is one value per label name (a programming error, like a wrong
  // metric name: both are fixed in the code that registers the family).
  std::vector<std::string> CheckedValues(std::initializer_list<std::string_view> values) const;

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
};

// The children of one counter, gauge or histogram name, one per label values, made on first use
// and kept for the registry's life (a reference from WithLabels never dangles).
template <typename M>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
         std::function<std::unique_ptr<M>()> make)
      : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)),
        make_(std::move(make)) {}

  // The child for `values` (one per label name, in order). Takes the family's lock: resolve
  // children at setup and keep the reference on hot paths. Thread-safe.
  M& WithLabels(std::initializer_list<std::string_view> values) {
    std::vector<std::string> key = CheckedValues(values);
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<M>& child = children_[std::move(key)];
    if (child == nullptr) child = make_();
    return *child;
  }
  void RenderSamples(std::string* out) const override;

 private:
  const std::function<std::unique_ptr<M>()> make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// A counter or gauge whose children are read when the registry renders: for values kept
// elsewhere already (atomics that Stats() reads too), so the hot path updates them once.
class CallbackFamily final : public FamilyBase {
 public:
  using FamilyBase::FamilyBase;

  // Adds (or replaces) the child for `values`. `read` runs on the rendering thread under this
  // family's lock: it must be cheap and thread-safe, and whatever it reads must outlive the
  // registry's renders. Thread-safe.
  void Add(std::initializer_list<std::string_view> values, std::function<double()> read);
  // Removes the child for `values` (nothing if there is none). Once it returns, its `read` is
  // not running and will not run again, so what it read may go. Thread-safe.
  void Remove(std::initializer_list<std::string_view> values);
  void RenderSamples(std::string* out) const override;

 private:
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::function<double()>> children_;
};

}  // namespace astr::metrics
