// Fuzz target: the safetensors reader (common/model/safetensors.h) on one file: the input is the
// model.safetensors of a folder whose config.json is the tiny model of model_files.h. Every tensor
// the reader lists is looked up and its dtype checked, then the folder is opened as a model and its
// weights loaded, so that a file that parses also meets the config checks and the f32 conversion.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/model/safetensors.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_files.h"

namespace astr::fuzz {
namespace {

std::string* g_dir = nullptr;  // the model folder; its model.safetensors is each input

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  using namespace astr::fuzz;
  InitQuietLogging((*argv)[0]);
  g_dir = new std::string(ScratchDir("safetensors"));
  WriteFileOrDie(*g_dir + "/config.json", TinyConfigJson());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  const std::string path = *fuzz::g_dir + "/model.safetensors";
  fuzz::WriteFileOrDie(path, {reinterpret_cast<const char*>(data), size});
  auto f = model::SafetensorsFile::Open(path);
  if (!f.ok()) return 0;
  for (const auto& [name, tensor] : (*f)->tensors()) {
    (void)(*f)->Find(name);
    (void)(*f)->ReadableDType(tensor);
  }
  (void)(*f)->metadata();
  fuzz::OpenAndLoadModel(*fuzz::g_dir);
  return 0;
}
