// scheduler/constraint (structured outputs over XGrammar) with real vocabularies: the mask a
// matcher gives is checked against the tokens' own text (the tokenizer's decoding and std::regex,
// not the code under test), for a byte-level BPE vocabulary (GPT-2) and a SentencePiece one with
// byte fallback (stories260K). Errors name the field and the position.
#include "scheduler/constraint.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "scheduler/front/request_builder.h"
#include "tests/support/test_util.h"

namespace astr::sched {
namespace {

bool Allowed(const std::vector<uint32_t>& mask, int32_t t) {
  return (mask[t / 32] >> (t % 32)) & 1u;
}

std::vector<int32_t> AllowedIds(const std::vector<uint32_t>& mask, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < vocab; ++t) {
    if (Allowed(mask, t)) ids.push_back(t);
  }
  return ids;
}

struct Loaded {
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  std::unique_ptr<ConstraintCompiler> compiler;
  int32_t vocab = 0;
  int32_t eos = -1;
};

// `extra` logits rows beyond the tokenizer's ids (a model padded past its vocabulary).
Loaded Load(const std::string& path, int32_t extra, int32_t eos) {
  Loaded l;
  auto tok = tok::Tokenizer::Load(path);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  if (!tok.ok()) return l;
  l.tokenizer = *tok;
  l.vocab = l.tokenizer->vocab_size() + extra;
  l.eos = eos;
  auto c = front::MakeConstraintCompiler(*l.tokenizer, l.vocab, {eos},
                                         {.threads = 2, .cache_bytes = -1});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (c.ok()) l.compiler = std::move(*c);
  return l;
}

std::vector<uint32_t> Mask(ConstraintMatcher& m) {
  std::vector<uint32_t> mask(static_cast<size_t>(ConstraintMaskWords(m.vocab_size())), 0xDEADBEEF);
  m.FillMask(mask);
  return mask;
}

TEST(ConstraintTest, ByteLevelRegexMaskIsEveryTokenThatKeepsTheTextMatching) {
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/gguf/ggml-vocab-gpt-2.gguf");
  Loaded l = Load(path, /*extra=*/7, /*eos=*/50256);
  ASSERT_NE(l.compiler, nullptr);
  ConstraintSpec spec{.kind = ConstraintSpec::Kind::kRegex, .text = "[0-9]{3}"};
  auto compiled = l.compiler->Compile(spec, "regex");
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ConstraintMatcher m(*compiled);

  // At the start: the tokens whose text is 1 to 3 digits.
  const std::regex digits("[0-9]{1,3}");
  std::vector<int32_t> want;
  for (int32_t t = 0; t < l.tokenizer->vocab_size(); ++t) {
    if (l.tokenizer->IsSpecial(t)) continue;
    if (std::regex_match(l.tokenizer->Decode(std::vector<int32_t>{t}), digits)) want.push_back(t);
  }
  ASSERT_GT(want.size(), 100u);  // GPT-2 has single, double and triple digit tokens
  std::vector<uint32_t> mask = Mask(m);
  EXPECT_EQ(AllowedIds(mask, l.vocab), want);

  // "12" then the rest: one digit, then only the end (EOS); padding rows never.
  const int32_t t12 = l.tokenizer->TokenToId("12");
  ASSERT_GE(t12, 0);
  ASSERT_TRUE(m.Accept(t12));
  mask = Mask(m);
  std::vector<int32_t> one_digit;
  for (char c = '0'; c <= '9'; ++c) one_digit.push_back(l.tokenizer->TokenToId(std::string(1, c)));
  EXPECT_EQ(AllowedIds(mask, l.vocab), one_digit);
  // A token that breaks the text is refused and changes nothing.
  EXPECT_FALSE(m.Accept(l.tokenizer->TokenToId("a")));
  EXPECT_EQ(Mask(m), mask);
  ASSERT_TRUE(m.Accept(l.tokenizer->TokenToId("7")));
  EXPECT_EQ(AllowedIds(Mask(m), l.vocab), std::vector<int32_t>{l.eos});
  EXPECT_FALSE(m.Terminated());
  ASSERT_TRUE(m.Accept(l.eos));
  EXPECT_TRUE(m.Terminated());
}

// stories260K: "▁" is a space and <0xXX> a byte. The choice " cat" / " dog" allows at the start
// exactly the pieces whose bytes are a prefix of one of them.
TEST(ConstraintTest, SentencePieceChoiceMask) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  Loaded l = Load(path, /*extra=*/0, /*eos=*/2);
  ASSERT_NE(l.compiler, nullptr);
  const std::vector<std::string> choices = {" cat", " dog"};
  auto compiled =
      l.compiler->Compile({.kind = ConstraintSpec::Kind::kChoice, .choices = choices}, "choice");
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ConstraintMatcher m(*compiled);
  auto bytes_of = [&](int32_t t) {
    std::string piece = l.tokenizer->IdToToken(t);
    if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece.back() == '>') {
      return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    }
    std::string out;
    for (size_t i = 0; i < piece.size(); ++i) {
      if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581
        out += ' ';
        i += 2;
      } else {
        out += piece[i];
      }
    }
    return out;
  };
  std::vector<int32_t> want;
  for (int32_t t = 0; t < l.vocab; ++t) {
    if (l.tokenizer->IsSpecial(t)) continue;
    const std::string b = bytes_of(t);
    for (const std::string& c : choices) {
      if (!b.empty() && c.compare(0, b.size(), b) == 0) {
        want.push_back(t);
        break;
      }
    }
  }
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(AllowedIds(Mask(m), l.vocab), want);
}

TEST(ConstraintTest, ErrorsNameTheFieldAndThePosition) {
  ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
  Loaded l = Load(path, 0, 2);
  ASSERT_NE(l.compiler, nullptr);
  struct Case {
    ConstraintSpec spec;
    std::string field, expect;
  };
  const std::vector<Case> cases = {
      {{.kind = ConstraintSpec::Kind::kGrammar, .text = "root ::= \"a\" |"},
       "g",
       "g: EBNF parser error at line 1, column"},
      {{.kind = ConstraintSpec::Kind::kGrammar, .text = "start ::= \"a\""}, "g", "g: "},
      {{.kind = ConstraintSpec::Kind::kJsonSchema, .text = "{\"type\": \"obj"},
       "s",
       "s: not valid JSON at byte 14"},
      {{.kind = ConstraintSpec::Kind::kJsonSchema, .text = "{\"type\": 5}"}, "s", "s: "},
      {{.kind = ConstraintSpec::Kind::kRegex, .text = "(ab"}, "r", "r: "},
      {{.kind = ConstraintSpec::Kind::kChoice}, "c", "c must list at least one choice"},
      {{.kind = ConstraintSpec::Kind::kChoice, .choices = {"a", ""}},
       "c",
       "c[1] must not be empty"},
  };
  for (const Case& c : cases) {
    auto r = l.compiler->Compile(c.spec, c.field);
    ASSERT_FALSE(r.ok()) << c.spec.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.spec.text;
    EXPECT_EQ(r.status().message().rfind(c.expect, 0), 0u)
        << c.spec.text << ": " << r.status().message();
  }
}

// A JSON schema's output walked token by token: the text the tokenizer makes of a valid document
// is accepted whole, then only EOS.
TEST(ConstraintTest, JsonSchemaAcceptsAValidDocumentsTokens) {
  ASTR_REQUIRE_SHARED_FILE(path, "tokenizers/gguf/ggml-vocab-gpt-2.gguf");
  Loaded l = Load(path, 0, 50256);
  ASSERT_NE(l.compiler, nullptr);
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["name", "n"], "additionalProperties": false})";
  auto compiled =
      l.compiler->Compile({.kind = ConstraintSpec::Kind::kJsonSchema, .text = schema}, "s");
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ConstraintMatcher m(*compiled);
  const std::vector<int32_t> ids = l.tokenizer->Encode(R"({"name": "Ada", "n": 36})");
  for (int32_t t : ids) {
    std::vector<uint32_t> mask = Mask(m);
    ASSERT_TRUE(Allowed(mask, t)) << "token " << t << " " << l.tokenizer->IdToToken(t);
    ASSERT_TRUE(m.Accept(t));
  }
  EXPECT_EQ(AllowedIds(Mask(m), l.vocab), std::vector<int32_t>{50256});
  // The compact form is the one allowed: no space before a colon.
  ConstraintMatcher m2(*compiled);
  for (int32_t t : l.tokenizer->Encode(R"({"name")")) ASSERT_TRUE(m2.Accept(t));
  EXPECT_FALSE(m2.Accept(l.tokenizer->TokenToId("Ġ:")));
  EXPECT_GE(l.compiler->stats().compiles, 1);
}

}  // namespace
}  // namespace astr::sched
