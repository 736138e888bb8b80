#include "common/grpc/stream_memory.h"

#include <malloc.h>

namespace astr::rpc {

void KeepFreedMemoryForStreams() {
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

}  // namespace astr::rpc
