// The one conversion between gRPC deadlines (system_clock; time_point::max() means none) and the
// steady clock the scheduler keeps time in: the time left is carried over, never the wall time.
#pragma once

#include <chrono>
#include <optional>

namespace astr::rpc {

// A deadline further away than this is no deadline (and would overflow the steady clock).
inline constexpr std::chrono::hours kNoDeadlineBeyond{24 * 365};

// The steady-clock point of a gRPC deadline; nullopt when the call has none.
inline std::optional<std::chrono::steady_clock::time_point> SteadyDeadline(
    std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  const auto left = deadline - std::chrono::system_clock::now();
  if (left > kNoDeadlineBeyond) return std::nullopt;
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
}

// SteadyDeadline, with steady_clock::time_point::max() standing for none.
inline std::chrono::steady_clock::time_point SteadyDeadlineOrMax(
    std::chrono::system_clock::time_point deadline) {
  return SteadyDeadline(deadline).value_or(std::chrono::steady_clock::time_point::max());
}

// The gRPC deadline (for ClientContext::set_deadline) of a steady-clock point; max() stays max().
inline std::chrono::system_clock::time_point GrpcDeadline(
    std::chrono::steady_clock::time_point deadline) {
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    return std::chrono::system_clock::time_point::max();
  }
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             deadline - std::chrono::steady_clock::now());
}

}  // namespace astr::rpc
