// Tokenizer::EncodeAtMost (tokenization that stops once past a limit), Tokenizer::MinTokens (the
// lower bound on the token count from a text's bytes) and the memory encoding takes.
//
// EncodeAtMost is checked against the complete Encode, whose ids tokenizer_test.cc and
// tests/python/test_tokenizers_hf.py check against Hugging Face `tokenizers` and llama.cpp.
// Expected length bounds are derived here from the tokenizer files themselves (longest token,
// added tokens), not taken from the code. Memory is counted by replacing operator new.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/text/tokenizer/normalizer.h"
#include "common/text/tokenizer/tokenizer.h"
#include "common/text/unicode/unicode.h"
#include "tests/support/test_util.h"

// ------------------------------------------------------------------------------------------
// Counting allocator: every operator new of this binary records the bytes live and their peak.

namespace {

std::atomic<size_t> g_live_bytes{0};
std::atomic<size_t> g_peak_bytes{0};
constexpr size_t kHeader = 16;  // keeps the block 16-byte aligned

void* CountedAlloc(size_t n) {
  void* base = std::malloc(n + kHeader);
  if (base == nullptr) throw std::bad_alloc();
  *static_cast<size_t*>(base) = n;
  const size_t live = g_live_bytes.fetch_add(n) + n;
  size_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(base) + kHeader;
}

void CountedFree(void* p) {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kHeader;
  g_live_bytes.fetch_sub(*reinterpret_cast<size_t*>(base));
  std::free(base);
}

}  // namespace

void* operator new(size_t n) { return CountedAlloc(n); }
void* operator new[](size_t n) { return CountedAlloc(n); }
void operator delete(void* p) noexcept { CountedFree(p); }
void operator delete[](void* p) noexcept { CountedFree(p); }
void operator delete(void* p, size_t) noexcept { CountedFree(p); }
void operator delete[](void* p, size_t) noexcept { CountedFree(p); }

namespace astr {
namespace {

using json = nlohmann::json;

// The most bytes live at once while `fn` runs, beyond those live when it started.
template <typename Fn>
size_t PeakExtraBytes(Fn&& fn) {
  const size_t before = g_live_bytes.load();
  g_peak_bytes.store(before);
  fn();
  return g_peak_bytes.load() - before;
}

std::shared_ptr<const tok::Tokenizer> MustLoad(const std::string& path) {
  auto t = tok::Tokenizer::Load(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

json ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return json::parse(in);
}

// English prose of about `bytes` bytes; sentences vary (a counter) so that not every word hits
// the word cache.
std::string Prose(size_t bytes) {
  static const char* const kSentences[] = {
      "The quick brown fox jumps over the lazy dog. ",
      "Permission is hereby granted, free of charge, to any person obtaining a copy. ",
      "In the beginning, the tokenizer read every byte twice and kept each word forever. ",
      "Numbers such as 1,234.56 and dates like 2026-11-29 appear now and then.\n",
      "She said: \"don't worry, it'll be fine\" -- and it was (mostly).\n",
  };
  std::string text;
  text.reserve(bytes + 128);
  for (size_t i = 0; text.size() < bytes; ++i) {
    text += kSentences[i % 5];
    if (i % 7 == 0) text += "Item " + std::to_string(i) + ": ";
  }
  return text;
}

// Texts that stress the bound: the shrinking normalizations, dropped bytes, whitespace runs next
// to added tokens, long runs of one character, every special token written out.
std::vector<std::string> HardTexts(const tok::Tokenizer& tok) {
  std::vector<std::string> texts = {
      "",
      "a",
      std::string(3000, ' '),
      std::string(3000, 'a'),
      std::string(3000, '\x04'),
      std::string(3000, '\x04') + "Hi",
      std::string(3000, '\n'),
      "</s>" + std::string(3000, ' ') + "x",
      "<|end|>" + std::string(3000, '\n'),
      Prose(5000),
  };
  const std::pair<const char*, int> repeated[] = {
      {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", 400},  // Hangul L V T: 9 bytes, NFC 3
      {"\xEF\xBC\xA1", 800},                          // fullwidth A: 3 bytes, NFKC 1
      {"e\xCC\x81", 800},                             // e + combining acute: NFC 2 bytes
      {"\xCE\xB1\xCC\x93\xCC\x80\xCD\x85", 400},      // alpha + 3 marks: NFC one 3-byte char
      {"\xE2\x84\xAA", 800},                          // KELVIN SIGN: NFC / lowercase "k"
      {"\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9", 200},  // emoji ZWJ sequence
      {"\xE4\xB8\xAD\xE6\x96\x87", 500},                      // CJK
      {"\xF1\x80\x80\x80", 500},                              // U+40000: lead byte 0xF1
  };
  for (const auto& [unit, n] : repeated) {
    std::string s;
    for (int i = 0; i < n; ++i) s += unit;
    texts.push_back(s);
  }
  std::string specials;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.IsSpecial(id)) specials += tok.IdToToken(id) + "  ";
  }
  texts.push_back(specials);
  return texts;
}

const char* const kTokenizers[] = {
    "tokenizers/hf/smollm2-135m-instruct",
    "tokenizers/hf/tinyllama-1.1b-chat-v1.0",
    "tokenizers/hf/gpt2",
    "tokenizers/hf/phi-3-mini-instruct",
    "tokenizers/hf/mistral-7b-v0.1",
    "models/stories260K.gguf",
    "tokenizers/gguf/ggml-vocab-deepseek-llm.gguf",
};

class TokenizerLimitsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    path_ = testing::SharedFile(GetParam());
    if (path_.empty()) GTEST_SKIP() << "shared test data missing: " << GetParam();
    tok_ = MustLoad(path_);
    ASSERT_NE(tok_, nullptr);
  }
  std::string path_;
  std::shared_ptr<const tok::Tokenizer> tok_;
};

TEST_P(TokenizerLimitsTest, EncodeAtMostIsEncodeOrAPrefixOfIt) {
  std::vector<std::string> texts = HardTexts(*tok_);
  texts.push_back(Prose(40000));
  for (const std::string& text : texts) {
    for (const bool add : {false, true}) {
      for (const bool parse : {false, true}) {
        const tok::EncodeOptions options{.add_special_tokens = add, .parse_special = parse};
        const std::vector<int32_t> full = tok_->Encode(text, options);
        const size_t n = full.size();
        std::vector<size_t> limits = {0, 1, n / 2, n, n + 1, SIZE_MAX};
        if (n > 0) limits.push_back(n - 1);
        for (const size_t limit : limits) {
          SCOPED_TRACE(::testing::Message()
                       << "text of " << text.size() << " bytes, limit " << limit << ", " << n
                       << " ids, add " << add << ", parse " << parse);
          const tok::BoundedEncoding e = tok_->EncodeAtMost(text, limit, options);
          if (limit >= n) {
            EXPECT_TRUE(e.complete);
            EXPECT_EQ(e.ids, full);
            continue;
          }
          EXPECT_FALSE(e.complete);
          EXPECT_GT(e.min_tokens, limit);
          EXPECT_LE(e.min_tokens, n);
          ASSERT_LE(e.ids.size(), n);
          EXPECT_TRUE(std::equal(e.ids.begin(), e.ids.end(), full.begin()));
        }
      }
    }
  }
}

TEST_P(TokenizerLimitsTest, MinTokensNeverExceedsTheRealCount) {
  std::vector<std::string> texts = HardTexts(*tok_);
  for (int b = 1; b < 128; ++b) texts.push_back(std::string(500, static_cast<char>(b)));
  for (const std::string& text : texts) {
    for (const bool parse : {false, true}) {
      const size_t count =
          tok_->Encode(text, {.add_special_tokens = false, .parse_special = parse}).size();
      EXPECT_LE(tok_->MinTokens(text, parse), count)
          << text.size() << " bytes starting " << json(text.substr(0, 16)).dump() << ", parse "
          << parse;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SharedTokenizers, TokenizerLimitsTest, ::testing::ValuesIn(kTokenizers));

// ------------------------------------------------------------------------------------------
// The bounds themselves, derived from the files.

// Bytes of the longest key of model.vocab in a tokenizer.json.
size_t LongestVocabToken(const json& j) {
  size_t most = 0;
  for (const auto& [token, id] : j["model"]["vocab"].items()) most = std::max(most, token.size());
  return most;
}

// Bytes of the longest added_tokens[].content.
size_t LongestAddedToken(const json& j) {
  size_t most = 0;
  for (const json& a : j["added_tokens"]) {
    most = std::max(most, a["content"].get<std::string>().size());
  }
  return most;
}

TEST(TokenizerLengthBoundTest, SharedTokenizersBoundBytesByTheirLongestToken) {
  // GPT-2 (byte-level, every byte a token), TinyLlama and Mistral (byte fallback; TinyLlama's
  // normalizer only lengthens: a prefix, and " " -> "▁"): one token covers at most the longest
  // token's bytes, or an added token's.
  for (const char* name : {"gpt2", "tinyllama-1.1b-chat-v1.0", "mistral-7b-v0.1"}) {
    SCOPED_TRACE(name);
    const std::string rel = std::string("tokenizers/hf/") + name + "/tokenizer.json";
    ASTR_REQUIRE_SHARED_FILE(path, rel);
    const json j = ReadJson(path);
    const size_t want = std::max(LongestVocabToken(j), LongestAddedToken(j));
    auto tok = MustLoad(path);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->max_bytes_per_token(false), want);
    EXPECT_EQ(tok->max_bytes_per_token(true), want);
    EXPECT_EQ(tok->MinTokens(std::string(want * 10, 'x'), true), 10u);
  }
}

TEST(TokenizerLengthBoundTest, SmolLm2CountsOnlyTheBytesItDoesNotDrop) {
  // SmolLM2's byte-level vocabulary has no token for the control bytes 0x04, 0x06, 0x13, 0x14,
  // 0x16, 0x1D (nor for 0xF1, 0xF2, never in text it sees whole): `tokenizers` drops them, so a
  // text's length alone bounds nothing. Its other bytes still count.
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/hf/smollm2-135m-instruct/tokenizer.json");
  const json j = ReadJson(path);
  const size_t longest = std::max(LongestVocabToken(j), LongestAddedToken(j));
  auto tok = MustLoad(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->max_bytes_per_token(true), longest);
  const std::string dropped(100000, '\x04');
  EXPECT_EQ(tok->MinTokens(dropped, true), 0u);
  EXPECT_EQ(tok->Encode(dropped + "Hi", {.add_special_tokens = false}),
            (std::vector<int32_t>{26843}));  // "Hi", README ids
  // A valid prompt of 100,001 bytes and one token is not refused by a limit of one.
  EXPECT_TRUE(tok->EncodeAtMost(dropped + "Hi", 1, {.add_special_tokens = false}).complete);
  EXPECT_EQ(tok->MinTokens(dropped + std::string(longest * 3, 'a'), true), 3u);
}

TEST(TokenizerLengthBoundTest, StripAddedTokensAndShrinkingPartsHaveNoBound) {
  // Phi-3's "</s>" (not special) swallows the whitespace after it: "</s>" + a million spaces is
  // one token.
  ASTR_REQUIRE_SHARED_FILE(phi3, "tokenizers/hf/phi-3-mini-instruct/tokenizer.json");
  auto tok = MustLoad(phi3);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->max_bytes_per_token(false), 0u);
  EXPECT_EQ(tok->MinTokens(std::string(1 << 20, ' '), false), 0u);

  // Variants of TinyLlama's tokenizer.json: parts that can delete any amount of text.
  ASTR_REQUIRE_SHARED_FILE(tiny, "tokenizers/hf/tinyllama-1.1b-chat-v1.0/tokenizer.json");
  const json base = ReadJson(tiny);
  const json strip = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
  const json regex_replace = {
      {"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}};
  const json empty_replace = {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", ""}};
  const json removed = {{"type", "WhitespaceSplit"}};
  struct Variant {
    const char* what;
    json normalizer;
    json pre_tokenizer;
  };
  const Variant variants[] = {{"Strip", strip, nullptr},
                              {"Replace with a regex", regex_replace, nullptr},
                              {"Replace with nothing", empty_replace, nullptr},
                              {"WhitespaceSplit (Removed)", nullptr, removed}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    json j = base;
    j["normalizer"] = v.normalizer;
    j["pre_tokenizer"] = v.pre_tokenizer;
    auto t = tok::Tokenizer::FromHfJson(j, v.what);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->max_bytes_per_token(true), 0u);
  }
  // An rstrip special token breaks the bound only when special tokens are parsed.
  json j = base;
  j["added_tokens"][2]["rstrip"] = true;  // </s>, special
  auto t = tok::Tokenizer::FromHfJson(j, "rstrip </s>");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->max_bytes_per_token(true), 0u);
  EXPECT_EQ((*t)->max_bytes_per_token(false), 48u);  // TinyLlama's longest token
}

TEST(TokenizerLengthBoundTest, UnicodeNormalizersAndLowercaseScaleTheBound) {
  // Under NFKC a 4-byte character can become 1 byte (U+1D400 -> "A") and up to 4 decomposed
  // characters can compose into one: 16 input bytes per output byte at worst. Lowercase maps each
  // character (<= 4 bytes) to at least one byte.
  ASTR_REQUIRE_SHARED_FILE(tiny, "tokenizers/hf/tinyllama-1.1b-chat-v1.0/tokenizer.json");
  json j = ReadJson(tiny);
  for (const auto& [type, factor] :
       {std::pair<const char*, size_t>{"NFKC", 16}, {"NFC", 16}, {"NFD", 16}, {"Lowercase", 4}}) {
    SCOPED_TRACE(type);
    j["normalizer"] = {{"type", type}};
    auto t = tok::Tokenizer::FromHfJson(j, type);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->max_bytes_per_token(true), factor * 48);
    for (const std::string& text : HardTexts(**t)) {
      EXPECT_LE((*t)->MinTokens(text, true),
                (*t)->Encode(text, {.add_special_tokens = false}).size())
          << json(text.substr(0, 16)).dump();
    }
  }
}

TEST(TokenizerLengthBoundTest, UnicodeFactsTheNormalizerFactorRestsOn) {
  // kUnicodeNormalizerMaxShrink = 4 bytes per character x kMaxCanonicalDecomposition. That
  // holds if no character normalizes (or lowercases) to nothing and no full canonical
  // decomposition is longer than kMaxCanonicalDecomposition code points.
  using unicode::NormalForm;
  size_t longest = 0;
  std::string ch;
  for (uint32_t cp = 1; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    ch.clear();
    unicode::AppendUtf8(cp, ch);
    const std::string nfd = unicode::Normalize(ch, NormalForm::kNFD);
    size_t n = 0;
    for (size_t i = 0; i < nfd.size(); ++n) unicode::NextCodepoint(nfd, i);
    longest = std::max(longest, n);
    ASSERT_FALSE(unicode::Normalize(ch, NormalForm::kNFKD).empty()) << cp;
    ASSERT_FALSE(unicode::ToLowerChars(ch).empty()) << cp;
  }
  EXPECT_EQ(longest, tok::kMaxCanonicalDecomposition);
}

// ------------------------------------------------------------------------------------------
// Memory.

TEST(TokenizerMemoryTest, RefusingALongPromptAllocatesAlmostNothing) {
  // 20 MB against a context of 2048: refused from the bytes (or, for Phi-3, which has no bound,
  // by the word bound after normalizing: the normalized copy is the cost).
  const std::string prose = Prose(20 << 20);
  const std::string one_char(20 << 20, 'a');
  for (const char* rel : kTokenizers) {
    const std::string path = testing::SharedFile(rel);
    if (path.empty()) continue;
    SCOPED_TRACE(rel);
    auto tok = MustLoad(path);
    ASSERT_NE(tok, nullptr);
    const bool bounded = tok->max_bytes_per_token(true) > 0;
    for (const std::string* text : {&prose, &one_char}) {
      tok::BoundedEncoding e;
      const size_t peak = PeakExtraBytes([&] { e = tok->EncodeAtMost(*text, 2048); });
      EXPECT_FALSE(e.complete);
      EXPECT_GT(e.min_tokens, 2048u);
      if (bounded) {
        EXPECT_TRUE(e.from_length);
        EXPECT_LT(peak, size_t{64} << 10) << peak << " bytes";
      } else {
        // Before: ~20 bytes per byte of merge state for the whole text as one word.
        EXPECT_LT(peak, 3 * text->size()) << peak << " bytes";
      }
    }
  }
}

TEST(TokenizerMemoryTest, EncodingCostsTheIdsAndASmallMultipleOfTheText) {
  // Without a limit: the ids, at most two copies of a segment (normalizer input and output), and
  // per-word state. Before, every pre-token was held (a string and 40 bytes each, plus 60 bytes
  // per regex match while splitting) and Llama-style texts without a pre-tokenizer were merged
  // as one word: 13x to 45x the text.
  const std::string prose = Prose(4 << 20);
  for (const char* rel : kTokenizers) {
    const std::string path = testing::SharedFile(rel);
    if (path.empty()) continue;
    SCOPED_TRACE(rel);
    auto tok = MustLoad(path);
    ASSERT_NE(tok, nullptr);
    std::vector<int32_t> ids = tok->Encode(prose);  // fills the word cache (bounded, shared)
    ids.clear();
    ids.shrink_to_fit();
    const size_t peak = PeakExtraBytes([&] { ids = tok->Encode(prose); });
    const size_t ids_bytes = ids.capacity() * sizeof(int32_t);
    // The ids vector passes through one reallocation (old + new buffer) at most once.
    EXPECT_LT(peak, 2 * ids_bytes + 3 * prose.size() + (size_t{1} << 20))
        << peak << " bytes for " << ids.size() << " ids";
  }
}

}  // namespace
}  // namespace astr
