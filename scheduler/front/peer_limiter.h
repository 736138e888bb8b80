// Admission per client connection: at most `max_per_peer` calls open at once from one peer, so
// that one client (or one runaway connection pool) cannot take every slot of the server.
//
// A peer is what gRPC reports as the call's peer, "ipv4:127.0.0.1:45678": one client connection.
// Every client on a loopback or NAT address shares the IP, so the IP alone would lock them all
// out together; a client that opens many connections is bounded by the scheduler's admission
// queue instead (--max-queued-requests).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/base/status.h"

namespace astr::front {

class PeerLimiter {
 public:
  // `flag` names the option in refusals ("--max-calls-per-peer").
  PeerLimiter(int64_t max_per_peer, std::string flag)
      : max_per_peer_(max_per_peer), flag_(std::move(flag)) {}

  // Takes a slot for `peer`, or RESOURCE_EXHAUSTED naming the limit when it has none left.
  Status Acquire(const std::string& peer);
  // Gives back a slot Acquire took.
  void Release(const std::string& peer);
  // Slots held, all peers together (the calls open now).
  int64_t open() const;

 private:
  const int64_t max_per_peer_;
  const std::string flag_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, int64_t> open_;  // guarded by mu_; entries are > 0
  int64_t total_ = 0;                              // guarded by mu_: the sum of open_
};

}  // namespace astr::front
