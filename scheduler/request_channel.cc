#include "scheduler/request_channel.h"

#include <utility>

namespace astr::sched {

RequestChannel::Batch RequestChannel::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || closed_; });
  lock.unlock();
  return Take();
}

RequestChannel::Batch RequestChannel::Take() {
  Batch batch;
  std::lock_guard<std::mutex> lock(mu_);
  batch.events.swap(pending_);
  // `closed` is reported only with the last events, so a consumer that sees it has seen all.
  batch.closed = closed_;
  if (closed_) {
    batch.status = status_;
    batch.timings = timings_;
  }
  return batch;
}

void RequestChannel::Push(std::vector<SampleEvent>* events) {
  if (events->empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty()) {
      pending_.swap(*events);
    } else {
      for (SampleEvent& e : *events) pending_.push_back(std::move(e));
    }
    if (listener_) listener_();
  }
  events->clear();
  cv_.notify_one();
}

void RequestChannel::SetListener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
  if (listener_ && (!pending_.empty() || closed_)) listener_();
}

void RequestChannel::Close(Status status, RequestTimings timings) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    status_ = std::move(status);
    timings_ = timings;
    if (listener_) listener_();
  }
  cv_.notify_one();
}

}  // namespace astr::sched
