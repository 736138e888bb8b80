#include "common/text/tokenizer/spm_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "common/model/vocab.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

// ------------------------------------------------------------------------------------------
// A test-only GGUF reader: just the header and the tokenizer.ggml.* metadata (tensors ignored),
// so these tests do not depend on the production GGUF loader.

class GgufMetaReader {
 public:
  explicit GgufMetaReader(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    data_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  bool Read(model::Vocab& vocab) {
    if (data_.size() < 24 || std::memcmp(data_.data(), "GGUF", 4) != 0) return false;
    pos_ = 4;
    if (U32() != 3) return false;
    U64();  // tensor count
    const uint64_t kv_count = U64();
    for (uint64_t i = 0; i < kv_count && ok_; ++i) {
      const std::string key = Str();
      const uint32_t type = U32();
      if (key == "tokenizer.ggml.model") {
        vocab.model = Str();
      } else if (key == "tokenizer.ggml.pre") {
        vocab.pre = Str();
      } else if (key == "tokenizer.ggml.tokens") {
        ArrayHeader(8, [&] { vocab.tokens.push_back(Str()); });
      } else if (key == "tokenizer.ggml.scores") {
        ArrayHeader(6, [&] { vocab.scores.push_back(F32()); });
      } else if (key == "tokenizer.ggml.token_type") {
        ArrayHeader(5, [&] { vocab.types.push_back(static_cast<model::TokenType>(U32())); });
      } else if (key == "tokenizer.ggml.bos_token_id" && type == 4) {
        vocab.bos_id = U32();
      } else if (key == "tokenizer.ggml.eos_token_id" && type == 4) {
        vocab.eos_id = U32();
      } else if (key == "tokenizer.ggml.unknown_token_id" && type == 4) {
        vocab.unk_id = U32();
      } else if (key == "tokenizer.ggml.add_bos_token" && type == 7) {
        vocab.add_bos = U8() != 0;
      } else if (key == "tokenizer.ggml.add_space_prefix" && type == 7) {
        vocab.add_space_prefix = U8() != 0;
      } else {
        Skip(type);
      }
    }
    return ok_;
  }

 private:
  template <typename T>
  T Get() {
    T v{};
    if (pos_ + sizeof(T) > data_.size()) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint8_t U8() { return Get<uint8_t>(); }
  uint32_t U32() { return Get<uint32_t>(); }
  uint64_t U64() { return Get<uint64_t>(); }
  float F32() { return Get<float>(); }
  std::string Str() {
    const uint64_t n = U64();
    if (!ok_ || pos_ + n > data_.size()) {
      ok_ = false;
      return "";
    }
    std::string s(data_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  template <typename Fn>
  void ArrayHeader(uint32_t want_type, Fn&& item) {
    const uint32_t type = U32();
    const uint64_t n = U64();
    if (type != want_type) ok_ = false;
    for (uint64_t i = 0; i < n && ok_; ++i) item();
  }
  // Skips one value of GGUF type `type`.
  void Skip(uint32_t type) {
    static constexpr size_t kSize[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
      Str();
    } else if (type == 9) {
      const uint32_t item_type = U32();
      const uint64_t n = U64();
      for (uint64_t i = 0; i < n && ok_; ++i) Skip(item_type);
    } else if (type < 13) {
      pos_ += kSize[type];
    } else {
      ok_ = false;
    }
  }

  std::vector<char> data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

tok::SpmTokenizer LoadTokenizer(const std::string& path) {
  model::Vocab vocab;
  EXPECT_TRUE(GgufMetaReader(path).Read(vocab)) << path;
  auto tok = tok::SpmTokenizer::Create(vocab);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

// ------------------------------------------------------------------------------------------
// stories260K: llama.cpp's golden prompt and generation.

TEST(SpmTokenizerTest, Stories260KPromptMatchesLlamaCpp) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  const tok::SpmTokenizer tok = LoadTokenizer(path);
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.Encode("Once upon a time", true), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.Encode("Once upon a time", false), (std::vector<int32_t>{403, 407, 261, 378}));
}

TEST(SpmTokenizerTest, Stories260KDecodesTheGoldenGeneration) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  const tok::SpmTokenizer tok = LoadTokenizer(path);
  const std::vector<int32_t> generated = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                          338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                          265, 282, 295, 433, 426, 385, 328, 432, 358, 394};
  const std::string text =
      ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
      "saw";
  // Decoded on their own the generated ids are "the start of a text"; the first one (",") has no
  // space prefix to strip, so this is also exactly llama.cpp's continuation text.
  EXPECT_EQ(tok.Decode(generated), text);
  std::vector<int32_t> all = {1, 403, 407, 261, 378};
  all.insert(all.end(), generated.begin(), generated.end());
  EXPECT_EQ(tok.Decode(all), "Once upon a time" + text);
  EXPECT_EQ(tok.Decode(all, /*skip_special=*/false), "<s>Once upon a time" + text);
  EXPECT_EQ(tok.TokenPiece(383), "\xE2\x96\x81there");
  EXPECT_EQ(tok.TokenPiece(9999), "");
}

// ------------------------------------------------------------------------------------------
// Llama-2 vocabulary (32000 pieces, byte fallback).

TEST(SpmTokenizerTest, Llama2KnownIdsAndRoundTrips) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/llama-2-tiny-random.gguf");
  const tok::SpmTokenizer tok = LoadTokenizer(path);
  ASSERT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.Encode("Hello", true), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tok.Encode("Hello world", false), (std::vector<int32_t>{15043, 3186}));
  EXPECT_EQ(tok.Encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(tok.Encode("", false).empty());
  // "\n" is not a piece: byte fallback to <0x0A> (id 13 = 3 + 0x0A).
  EXPECT_EQ(tok.Encode("\n", false), (std::vector<int32_t>{29871, 13}));
  for (const std::string s :
       {"Hello world", "  two  spaces ", "emoji 🦙🚀 and CJK 你好世界, 日本語",
        "tab\tnew\nline", "Ünïcödé ŝtring", "a", "\xF0\x9F\x98\x81!", "<s> is plain text here"}) {
    const std::vector<int32_t> ids = tok.Encode(s, true);
    EXPECT_EQ(ids.front(), 1);
    EXPECT_EQ(tok.Decode(ids), s) << s;
  }
  // Byte tokens are used for the emoji: at least one id in the byte range 3..258.
  const std::vector<int32_t> llama = tok.Encode("🦙", false);
  EXPECT_TRUE(
      std::any_of(llama.begin(), llama.end(), [](int32_t id) { return id >= 3 && id < 259; }));
}

// The reference tokenizations of the GGUF vocabularies (NAME.gguf.inp / .out) are checked through
// the full tokenizer in tokenizer_test.cc, which uses this merge for "llama" vocabularies.

// ------------------------------------------------------------------------------------------
// Hand-made vocabularies: merge order, ties, fallback, Create errors.

model::Vocab TinyVocab() {
  model::Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "c", "ab", "bc", "abc", "<0x21>"};
  v.scores = {0, 0, 0, -1, -1, -1, -1, -2, -3, -0.5f, 0};
  v.types = {model::TokenType::kUnknown, model::TokenType::kControl, model::TokenType::kControl,
             model::TokenType::kNormal,  model::TokenType::kNormal,  model::TokenType::kNormal,
             model::TokenType::kNormal,  model::TokenType::kNormal,  model::TokenType::kNormal,
             model::TokenType::kNormal,  model::TokenType::kByte};
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.add_space_prefix = false;
  return v;
}

TEST(SpmTokenizerTest, MergesHighestScoreFirstAndFallsBack) {
  auto tok = tok::SpmTokenizer::Create(TinyVocab());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // "ab" (-2) beats "bc" (-3); then "ab"+"c" = "abc" merges.
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<int32_t>{9}));
  // "bcb": "bc" first, then "bc"+"b" is no token.
  EXPECT_EQ(tok->Encode("bcb", false), (std::vector<int32_t>{8, 5}));
  // "!" has a byte token; "?" has none -> unk.
  EXPECT_EQ(tok->Encode("a!?", false), (std::vector<int32_t>{4, 10, 0}));
  EXPECT_EQ(tok->Decode({4, 10, 0}), "a!");
  EXPECT_EQ(tok->Decode({4, 10, 0}, false), "a!<unk>");
}

TEST(SpmTokenizerTest, CreateRejectsBadVocabularies) {
  model::Vocab v = TinyVocab();
  v.model = "gpt2";
  EXPECT_EQ(tok::SpmTokenizer::Create(v).status().code(), StatusCode::kInvalidArgument);
  v = TinyVocab();
  v.scores.pop_back();
  EXPECT_FALSE(tok::SpmTokenizer::Create(v).ok());
  v = TinyVocab();
  v.types.pop_back();
  EXPECT_FALSE(tok::SpmTokenizer::Create(v).ok());
  v = TinyVocab();
  v.bos_id = 11;
  EXPECT_FALSE(tok::SpmTokenizer::Create(v).ok());
  v = TinyVocab();
  v.tokens.clear();
  v.scores.clear();
  v.types.clear();
  EXPECT_FALSE(tok::SpmTokenizer::Create(v).ok());
}

}  // namespace
}  // namespace astr
