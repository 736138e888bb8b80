// The hand-off from the loop thread to the output thread: the loop collects a step's events and
// closes in an OutputBatch and posts it in one move; the output thread pushes them into the
// requests' RequestChannels, so that waking client threads never costs the loop anything.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "scheduler/scheduler.h"

namespace astr::sched {

// One sample event of one request. The channel pointer stays valid until the request's close is
// delivered, which comes later in the same or a later batch.
struct OutputEvent {
  RequestChannel* channel = nullptr;
  SampleEvent event;
};

// The end of a request: its channel (kept alive until delivered), final status and timings.
struct OutputClose {
  std::shared_ptr<RequestChannel> channel;
  Status status;
  RequestTimings timings;
};

// Events are delivered before closes; a close never precedes events of its request.
struct OutputBatch {
  std::vector<OutputEvent> events;
  std::vector<OutputClose> closes;
  bool empty() const { return events.empty() && closes.empty(); }
  void Clear() {  // keeps the capacity
    events.clear();
    closes.clear();
  }
};

class OutputQueue {
 public:
  // `open_requests` is decremented after each close is delivered (Scheduler::Idle reads it).
  explicit OutputQueue(std::atomic<int64_t>* open_requests);
  // Delivers everything posted, then stops the thread.
  ~OutputQueue();

  // Loop side: moves the batch's contents to the output thread and leaves *batch empty (buffers
  // rotate between the two threads, so the steady state allocates nothing).
  void Post(OutputBatch* batch);

 private:
  void Run();
  void Deliver(OutputBatch* batch);

  std::atomic<int64_t>* open_requests_;
  std::mutex mu_;
  std::condition_variable cv_;
  OutputBatch pending_;
  bool stop_ = false;
  bool waiting_ = false;            // the output thread sleeps on cv_
  std::vector<SampleEvent> group_;  // output thread: consecutive events of one channel
  std::thread thread_;
};

}  // namespace astr::sched
