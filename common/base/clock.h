// Durations as the integer nanoseconds that timings and stats report.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace astr {

// `d` in nanoseconds; a negative duration (a deadline before the arrival) counts as 0.
template <typename Rep, typename Period>
int64_t Nanos(std::chrono::duration<Rep, Period> d) {
  return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// Nanoseconds from `start` to now on the steady clock.
inline int64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return Nanos(std::chrono::steady_clock::now() - start);
}

}  // namespace astr
