#include "scheduler/front/peer_limiter.h"

namespace astr::front {

Status PeerLimiter::Acquire(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t& open = open_[peer];
  if (open >= max_per_peer_) {
    return ResourceExhaustedError("this client connection already has " + std::to_string(open) +
                                  " calls open, the most one connection may hold (" + flag_ + " " +
                                  std::to_string(max_per_peer_) + ")");
  }
  ++open;
  ++total_;
  return OkStatus();
}

void PeerLimiter::Release(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(peer);
  if (it == open_.end()) return;
  --total_;
  if (--it->second <= 0) open_.erase(it);
}

int64_t PeerLimiter::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

}  // namespace astr::front
