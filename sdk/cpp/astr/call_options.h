// astr::client::CallOptions: the per-call options of every client of the SDK (Client,
// AdminClient).
#pragma once

#include <chrono>

namespace astr::client {

struct CallOptions {
  // The call fails with DEADLINE_EXCEEDED (and the server stops working on it) at this time.
  // The default (time_point::max()) is no deadline.
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  // Wait for the server to become reachable instead of failing at once with UNAVAILABLE while
  // the channel is not connected (bounded by the deadline).
  bool wait_for_ready = false;

  // Options with a deadline `timeout` from now.
  static CallOptions Timeout(std::chrono::milliseconds timeout) {
    CallOptions o;
    o.deadline = std::chrono::system_clock::now() + timeout;
    return o;
  }
};

}  // namespace astr::client
