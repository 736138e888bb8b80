// Fuzz target: NcclUniqueIdFromPickle (scheduler/front/torch_rendezvous.h), which reads what a
// trainer published in its TCPStore. Checked: an accepted input yields exactly 128 bytes, and those
// bytes occur in the input (the parser only copies a byte string out of it).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "scheduler/front/torch_rendezvous.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  astr::fuzz::InitQuietLogging((*argv)[0]);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto id = astr::front::NcclUniqueIdFromPickle(in);
  if (!id.ok()) return 0;
  if (id->size() != 128 || in.find(*id) == std::string_view::npos) __builtin_trap();
  return 0;
}
