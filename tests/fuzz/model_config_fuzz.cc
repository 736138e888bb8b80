// Fuzz target: a Hugging Face config.json (and the generation_config.json beside it) to a model
// config (common/model/model_config.h ConfigFromHfJson). The input is config.json up to its first
// NUL byte; what follows a NUL, when there is one, is generation_config.json (else there is none).
// A config that parses is validated and, when valid, written back out as config.json,
// generation_config.json and GGUF metadata, the converter's paths.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/model/gguf.h"
#include "common/model/model_config.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"

namespace astr::fuzz {
namespace {

std::string* g_dir = nullptr;

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  using namespace astr::fuzz;
  InitQuietLogging((*argv)[0]);
  g_dir = new std::string(ScratchDir("model_config"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::FuzzInput in(data, size);
  const std::string config_path = *fuzz::g_dir + "/config.json";
  const std::string generation_path = *fuzz::g_dir + "/generation_config.json";
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  fuzz::WriteFileOrDie(config_path, in.Until(std::string_view("\0", 1)));
  if (all.find('\0') != std::string_view::npos) {
    fuzz::WriteFileOrDie(generation_path, in.Rest());
  } else {
    std::filesystem::remove(generation_path);
  }
  auto config = model::ConfigFromHfJson(config_path);
  if (!config.ok() || !config->Validate().ok()) return 0;
  (void)model::ConfigToHfJson(*config);
  (void)model::GenerationConfigJson(*config);
  model::GgufWriter writer;  // metadata only: never opened, nothing is written
  (void)model::AddGgufMetadata(*config, &writer);
  return 0;
}
