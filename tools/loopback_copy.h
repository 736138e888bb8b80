// astr::bench::LoopbackCopySeconds: the physical bound of a weight push on one machine, the same
// bytes sent over loopback TCP by plain send() / recv() with no framing, no parsing, no staging.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"

namespace astr::bench {

// Sends every span of `data` in turn over loopback TCP to `receivers` receivers at once (one
// sender thread per receiver), each reading into its own buffer of the full size. The buffers are
// allocated and touched before the clock starts, or with `fresh` allocated by each receiver on
// the clock and first touched by recv() (the page faults a receiver pays that must allocate
// where the bytes land). Returns the seconds from the first byte sent to the last one read;
// checks that receiver 0 got the bytes unchanged.
StatusOr<double> LoopbackCopySeconds(const std::vector<std::span<const uint8_t>>& data,
                                     int64_t total, int64_t receivers, bool fresh);

}  // namespace astr::bench
