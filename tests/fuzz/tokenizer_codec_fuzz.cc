// Fuzz target: encoding and decoding (common/text/tokenizer) with the real tokenizers of the shared
// test data, loaded once: the Hugging Face folders under tokenizers/hf, the GGUF vocabularies under
// tokenizers/gguf and stories260K's. Input: one byte picks the tokenizer, one byte the options,
// one byte a token limit; the rest is both the text to encode and, read as little-endian u16s,
// ids to decode (some outside the vocabulary, which decoding skips).
//
// Properties checked (__builtin_trap on a violation), each one the tokenizer's header promises:
//   - EncodeAtMost: complete means the ids of Encode; otherwise a prefix of them, and a bound
//     min_tokens above the limit and not above their count;
//   - MinTokens is not above the count of Encode's ids without the post-processor's;
//   - StreamDecoder: what Push and Finish return, joined, is Decode of the same ids;
//   - byte-level BPE without a normalizer (GPT-2's) gives back any valid UTF-8 text exactly:
//     Decode(Encode(text)) == text, special tokens neither parsed nor skipped.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/text/tokenizer/stream_decoder.h"
#include "common/text/tokenizer/tokenizer.h"
#include "common/text/unicode/unicode.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"

namespace astr::fuzz {
namespace {

struct Loaded {
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  bool lossless = false;  // Decode(Encode(valid UTF-8)) == the text
};
std::vector<Loaded>* g_tokenizers = nullptr;

// Shared-data paths, and whether the round trip holds for them.
constexpr struct {
  const char* rel;
  bool lossless;
} kTokenizers[] = {
    {"tokenizers/hf/gpt2", true},
    {"tokenizers/hf/mistral-7b-v0.1", false},
    {"tokenizers/hf/phi-3-mini-instruct", false},
    {"tokenizers/hf/smollm2-135m-instruct", false},  // no tokens for six control bytes
    {"tokenizers/hf/tinyllama-1.1b-chat-v1.0", false},
    {"tokenizers/gguf/ggml-vocab-gpt-2.gguf", true},
    {"tokenizers/gguf/ggml-vocab-deepseek-llm.gguf", false},
    {"tokenizers/gguf/ggml-vocab-starcoder.gguf", false},
    {"tokenizers/gguf/ggml-vocab-llama-spm.gguf", false},
    {"tokenizers/gguf/ggml-vocab-phi-3.gguf", false},
    {"models/stories260K.gguf", false},
};

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool IsPrefix(const std::vector<int32_t>& prefix, const std::vector<int32_t>& all) {
  return prefix.size() <= all.size() && std::equal(prefix.begin(), prefix.end(), all.begin());
}

void EncodeChecks(const Loaded& l, std::string_view text, const tok::EncodeOptions& options,
                  size_t limit) {
  const tok::Tokenizer& t = *l.tokenizer;
  const std::vector<int32_t> ids = t.Encode(text, options);
  const tok::BoundedEncoding bounded = t.EncodeAtMost(text, limit, options);
  if (bounded.complete) {
    Check(bounded.ids == ids);
  } else {
    Check(IsPrefix(bounded.ids, ids));
    Check(bounded.min_tokens > limit && bounded.min_tokens <= ids.size());
  }
  const std::vector<int32_t> plain =
      options.add_special_tokens
          ? t.Encode(text, {.add_special_tokens = false, .parse_special = options.parse_special})
          : ids;
  Check(t.MinTokens(text, options.parse_special) <= plain.size());
  if (l.lossless && !options.parse_special && unicode::IsValidUtf8(text)) {
    Check(t.Decode(plain, /*skip_special_tokens=*/false) == text);
  }
}

void DecodeChecks(const tok::Tokenizer& t, std::string_view bytes, bool skip_special) {
  std::vector<int32_t> ids;
  // Ids a little past both ends of the vocabulary, so that out-of-range ids are decoded too.
  const int32_t span = t.vocab_size() + 16;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const auto v = static_cast<uint16_t>(static_cast<uint8_t>(bytes[i]) |
                                         (static_cast<uint8_t>(bytes[i + 1]) << 8));
    ids.push_back(static_cast<int32_t>(v % span) - 8);
  }
  const std::string whole = t.Decode(ids, skip_special);
  tok::StreamDecoder stream(t, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.Push(id);
  streamed += stream.Finish();
  Check(streamed == whole);
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  using namespace astr;
  fuzz::InitQuietLogging((*argv)[0]);
  fuzz::g_tokenizers = new std::vector<fuzz::Loaded>;
  for (const auto& [rel, lossless] : fuzz::kTokenizers) {
    auto t = tok::Tokenizer::Load(fuzz::SharedFileOrSkip(rel));
    if (!t.ok()) {
      std::fprintf(stderr, "fuzz: %s: %s\n", rel, t.status().ToString().c_str());
      std::abort();
    }
    fuzz::g_tokenizers->push_back({*t, lossless});
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::FuzzInput in(data, size);
  const fuzz::Loaded& l = (*fuzz::g_tokenizers)[in.Byte() % fuzz::g_tokenizers->size()];
  const uint8_t flags = in.Byte();
  const size_t limit = in.Byte();
  const std::string_view text = in.Rest();
  const tok::EncodeOptions options{.add_special_tokens = (flags & 1) != 0,
                                   .parse_special = (flags & 2) != 0};
  fuzz::EncodeChecks(l, text, options, limit);
  fuzz::DecodeChecks(*l.tokenizer, text, (flags & 4) != 0);
  return 0;
}
