#include "scheduler/output_queue.h"

#include <utility>

namespace astr::sched {

OutputQueue::OutputQueue(std::atomic<int64_t>* open_requests)
    : open_requests_(open_requests), thread_([this] { Run(); }) {}

OutputQueue::~OutputQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void OutputQueue::Post(OutputBatch* batch) {
  if (batch->empty()) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty()) {
      std::swap(pending_, *batch);
    } else {
      for (OutputEvent& e : batch->events) pending_.events.push_back(std::move(e));
      for (OutputClose& c : batch->closes) pending_.closes.push_back(std::move(c));
    }
    wake = waiting_;
  }
  batch->Clear();
  // Only a sleeping output thread needs the (syscall) wake-up.
  if (wake) cv_.notify_one();
}

void OutputQueue::Run() {
  OutputBatch local;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      waiting_ = true;
      cv_.wait(lock, [&] { return !pending_.empty() || stop_; });
      waiting_ = false;
      if (pending_.empty()) return;  // stop_ and nothing left
      std::swap(local, pending_);
    }
    Deliver(&local);
    local.Clear();
  }
}

void OutputQueue::Deliver(OutputBatch* batch) {
  // A request's events of one step are usually adjacent (its samples run on one worker): push
  // each run of one channel with a single lock and wake-up of its reader.
  std::vector<OutputEvent>& events = batch->events;
  for (size_t i = 0; i < events.size();) {
    RequestChannel* channel = events[i].channel;
    group_.clear();
    for (; i < events.size() && events[i].channel == channel; ++i) {
      group_.push_back(std::move(events[i].event));
    }
    channel->Push(&group_);
  }
  for (OutputClose& close : batch->closes) {
    close.channel->Close(std::move(close.status), close.timings);
    close.channel.reset();
    open_requests_->fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace astr::sched
