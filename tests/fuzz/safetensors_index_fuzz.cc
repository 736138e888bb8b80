// Fuzz target: the sharded-checkpoint index (model.safetensors.index.json) of the safetensors
// reader (common/model/safetensors.h): the input is the index of a folder holding the tiny model of
// model_files.h in two valid shards, model-00001-of-00002.safetensors (embeddings, final norm,
// lm_head) and model-00002-of-00002.safetensors (the layer). An index that the reader accepts is
// then opened as a model and its weights loaded.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/model/safetensors.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_files.h"

namespace astr::fuzz {
namespace {

std::string* g_dir = nullptr;  // the model folder; its index is each input

void WriteShards(const std::string& dir) {
  std::vector<model::SafetensorsTensorData> shards[2];
  for (model::SafetensorsTensorData& t : TinyWeights()) {
    shards[t.name.starts_with("model.layers.") ? 1 : 0].push_back(std::move(t));
  }
  for (int i = 0; i < 2; ++i) {
    const std::string path = dir + "/model-0000" + std::to_string(i + 1) + "-of-00002.safetensors";
    if (Status s = model::WriteSafetensorsFile(path, shards[i]); !s.ok()) {
      LOG(FATAL) << "cannot write the shards: " << s.ToString();
    }
  }
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  using namespace astr::fuzz;
  InitQuietLogging((*argv)[0]);
  g_dir = new std::string(ScratchDir("safetensors_index"));
  WriteFileOrDie(*g_dir + "/config.json", TinyConfigJson());
  WriteShards(*g_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::WriteFileOrDie(*fuzz::g_dir + "/model.safetensors.index.json",
                       {reinterpret_cast<const char*>(data), size});
  auto f = model::SafetensorsFile::Open(*fuzz::g_dir);
  if (!f.ok()) return 0;
  for (const auto& [name, tensor] : (*f)->tensors()) (void)(*f)->ReadableDType(tensor);
  fuzz::OpenAndLoadModel(*fuzz::g_dir);
  return 0;
}
