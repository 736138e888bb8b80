// Fuzz target: the tokenizer.json loader (common/text/tokenizer, Tokenizer::Load): the input is the
// tokenizer.json of an otherwise empty folder. A tokenizer that loads then encodes a fixed
// multilingual text (with and without special tokens), decodes the ids back, and decodes the first
// ids of its vocabulary, so that the model, normalizer, pre-tokenizer, decoder and added tokens the
// file describes all run.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/text/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace astr::fuzz {
namespace {

std::string* g_path = nullptr;  // <scratch>/tokenizer.json

constexpr char kText[] =
    "Hello world! <s></s><|endoftext|> It's   12345 ünïcödé 日本語の文章 😀\n\tend  ";

void Exercise(const tok::Tokenizer& t) {
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids =
        t.Encode(kText, {.add_special_tokens = special, .parse_special = special});
    (void)t.Decode(ids, /*skip_special_tokens=*/special);
    (void)t.EncodeAtMost(kText, ids.size() / 2, {.parse_special = special});
    (void)t.MinTokens(kText, special);
  }
  std::vector<int32_t> first;
  for (int32_t id = 0; id < t.vocab_size() && id < 256; ++id) {
    first.push_back(id);
    (void)t.IdToToken(id);
  }
  (void)t.Decode(first, /*skip_special_tokens=*/false);
  (void)t.Describe();
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  using namespace astr::fuzz;
  InitQuietLogging((*argv)[0]);
  g_path = new std::string(ScratchDir("tokenizer_json") + "/tokenizer.json");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::WriteFileOrDie(*fuzz::g_path, {reinterpret_cast<const char*>(data), size});
  auto t = tok::Tokenizer::Load(*fuzz::g_path);
  if (t.ok()) fuzz::Exercise(**t);
  return 0;
}
