#include "common/grpc/stream_memory.h"

#include <malloc.h>

#include <algorithm>
#include <thread>

namespace astr::rpc {

void KeepFreedMemoryForStreams() {
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  mallopt(M_ARENA_MAX, std::max(2, cores / 4));
}

}  // namespace astr::rpc
