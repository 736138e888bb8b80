// Fuzz target: the GGUF reader (common/model/gguf.h) and what is built from a GGUF file's
// contents: the input is the file. Every metadata value is read back through each typed getter and
// rendered, every tensor is looked up and dequantized, and the tokenizer vocabulary, the model
// config and the checked ModelFile (with its weights) are made from it, as a worker loading a
// hostile model file would. Errors are expected; a crash, a sanitizer report or a hang is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/model/gguf.h"
#include "common/model/model_config.h"
#include "common/model/vocab.h"
#include "common/text/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_files.h"

namespace astr::fuzz {
namespace {

std::string* g_path = nullptr;  // the scratch file each input is written to

void ReadMetadata(const model::GgufFile& f) {
  for (const auto& [key, value] : f.metadata()) {
    (void)value.ToString();
    (void)f.Find(key);
    (void)f.GetInt(key);
    (void)f.GetFloat(key);
    (void)f.GetString(key);
    (void)f.GetBool(key);
  }
}

void ReadTensors(const model::GgufFile& f) {
  std::vector<float> values;
  for (const model::GgufTensor& t : f.tensors()) {
    (void)f.FindTensor(t.name);
    (void)f.ReadF32(t, &values);
  }
}

void BuildFromContents(const model::GgufFile& f, const std::string& path) {
  if (auto vocab = model::ReadVocab(f); vocab.ok() && *vocab != nullptr) {
    if (auto tok = tok::Tokenizer::FromGgufVocab(**vocab, path); tok.ok()) {
      const std::vector<int32_t> ids = (*tok)->Encode("Hello world! <s> ünïcödé\n\t 12345");
      (void)(*tok)->Decode(ids, /*skip_special_tokens=*/false);
    }
  }
  if (auto config = model::ConfigFromGguf(f); config.ok()) (void)config->Validate();
  OpenAndLoadModel(path);
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  astr::fuzz::InitQuietLogging((*argv)[0]);
  astr::fuzz::g_path = new std::string(astr::fuzz::ScratchDir("gguf") + "/input.gguf");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  const std::string& path = *fuzz::g_path;
  fuzz::WriteFileOrDie(path, {reinterpret_cast<const char*>(data), size});
  auto f = model::GgufFile::Open(path);
  if (!f.ok()) return 0;
  fuzz::ReadMetadata(**f);
  fuzz::ReadTensors(**f);
  fuzz::BuildFromContents(**f, path);
  return 0;
}
