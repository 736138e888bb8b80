#include "common/text/regex/regex.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

namespace astr {
namespace {

// The matched substrings, in order (empty matches included).
std::vector<std::string> Matches(std::string_view pattern, std::string_view text) {
  StatusOr<regex::Regex> re = regex::Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << pattern << ": " << re.status().ToString();
  if (!re.ok()) return {};
  std::vector<regex::Regex::Match> found;
  re->FindAll(text, found);
  std::vector<std::string> out;
  out.reserve(found.size());
  for (const regex::Regex::Match& m : found)
    out.emplace_back(text.substr(m.begin, m.end - m.begin));
  return out;
}

std::vector<std::pair<size_t, size_t>> Spans(std::string_view pattern, std::string_view text) {
  StatusOr<regex::Regex> re = regex::Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << pattern << ": " << re.status().ToString();
  if (!re.ok()) return {};
  std::vector<regex::Regex::Match> found;
  re->FindAll(text, found);
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(found.size());
  for (const regex::Regex::Match& m : found) out.emplace_back(m.begin, m.end);
  return out;
}

using V = std::vector<std::string>;
using S = std::vector<std::pair<size_t, size_t>>;

TEST(RegexTest, LiteralsAndEscapes) {
  EXPECT_EQ(Matches("ab", "xabyab"), (V{"ab", "ab"}));
  EXPECT_EQ(Matches(R"(\t\n\r\f\v)", "\t\n\r\f\v"), (V{"\t\n\r\f\v"}));
  EXPECT_EQ(Matches(R"(\x41\x{42}\u0043)", "ABC"), (V{"ABC"}));
  EXPECT_EQ(Matches(R"(\x{1F600})", "a\xF0\x9F\x98\x80"), (V{"\xF0\x9F\x98\x80"}));
  EXPECT_EQ(Matches(R"(\u00e9)", "caf\xC3\xA9"), (V{"\xC3\xA9"}));
  EXPECT_EQ(Matches(R"(\o{101}\0)", std::string("A\0", 2)), (V{std::string("A\0", 2)}));
  EXPECT_EQ(Matches(R"(\.\*\+\?\(\)\[\]\{\}\|\\\/\-)", R"(.*+?()[]{}|\/-)"),
            (V{R"(.*+?()[]{}|\/-)"}));
  EXPECT_EQ(Matches(R"(\cA\e\a)", "\x01\x1B\x07"), (V{"\x01\x1B\x07"}));
  // A '{' that does not open a valid interval is a literal, as in Oniguruma.
  EXPECT_EQ(Matches("a{", "a{"), (V{"a{"}));
  EXPECT_EQ(Matches("a{,}", "a{,}"), (V{"a{,}"}));
  // Non-ASCII literals are whole code points.
  EXPECT_EQ(Matches("\xC3\xA9+", "\xC3\xA9\xC3\xA9x"), (V{"\xC3\xA9\xC3\xA9"}));
}

TEST(RegexTest, DotExcludesNewlineUnlessM) {
  EXPECT_EQ(Matches(".", "a\nb"), (V{"a", "b"}));
  EXPECT_EQ(Matches("(?m:.)", "a\n"), (V{"a", "\n"}));
  EXPECT_EQ(Matches(".", "\r"), (V{"\r"}));
  EXPECT_EQ(Matches(".", "\xE4\xB8\xAD"), (V{"\xE4\xB8\xAD"}));
}

TEST(RegexTest, CharacterClasses) {
  EXPECT_EQ(Matches("[a-c]+", "abcd"), (V{"abc"}));
  EXPECT_EQ(Matches("[^a-c]+", "abcdef"), (V{"def"}));
  EXPECT_EQ(Matches("[]a]+", "]a]b"), (V{"]a]"}));  // ']' first is a literal
  EXPECT_EQ(Matches("[^]a]+", "]ab"), (V{"b"}));
  EXPECT_EQ(Matches("[a-]+", "-a-b"), (V{"-a-"}));     // '-' last is a literal
  EXPECT_EQ(Matches("[-a]+", "a-b"), (V{"a-"}));       // '-' first is a literal
  EXPECT_EQ(Matches("[a-c-e]+", "b-ed"), (V{"b-e"}));  // '-' after a range is a literal
  EXPECT_EQ(Matches(R"([\w-]+)", "ab-c d"), (V{"ab-c", "d"}));
  EXPECT_EQ(Matches(R"([\s\d]+)", "a 1\t2b"), (V{" 1\t2"}));
  EXPECT_EQ(Matches(R"([^\s\p{L}\p{N}]+)", "ab!?12 #"), (V{"!?", "#"}));
  EXPECT_EQ(Matches(R"([\p{Lu}\p{Nd}]+)", "aB1c"), (V{"B1"}));
  EXPECT_EQ(Matches("[a-z&&[^aeiou]]+", "hello"), (V{"h", "ll"}));
  EXPECT_EQ(Matches("[[a-b][x-y]]+", "abcxy"), (V{"ab", "xy"}));
  EXPECT_EQ(Matches(R"([\x41-\x43]+)", "ABCD"), (V{"ABC"}));
  EXPECT_EQ(Matches("[\xE4\xB8\x80-\xE9\xBE\xA5]+", "a\xE4\xB8\xAD\xE6\x96\x87!"),
            (V{"\xE4\xB8\xAD\xE6\x96\x87"}));          // [一-龥] on "a中文!"
  EXPECT_EQ(Matches(R"([\b])", "\x08"), (V{"\x08"}));  // backspace inside a class
}

TEST(RegexTest, ShorthandClasses) {
  EXPECT_EQ(Matches(R"(\d+)",
                    "a12\xD9\xA3"
                    "b"),
            (V{"12\xD9\xA3"}));  // ASCII and Arabic-Indic 3
  EXPECT_EQ(Matches(R"(\D+)", "a1b"), (V{"a", "b"}));
  // \s is White_Space: U+00A0 and U+3000 are in, U+200B (a format character) is not.
  EXPECT_EQ(Matches(R"(\s+)",
                    "a \t\xC2\xA0\xE3\x80\x80"
                    "b\xE2\x80\x8B"
                    "c"),
            (V{" \t\xC2\xA0\xE3\x80\x80"}));
  EXPECT_EQ(Matches(R"(\S+)", "ab c"), (V{"ab", "c"}));
  EXPECT_EQ(Matches(R"(\w+)", "ab_1 \xC3\xA9-x"), (V{"ab_1", "\xC3\xA9", "x"}));
  EXPECT_EQ(Matches(R"(\W+)", "ab, c"), (V{", "}));
  EXPECT_EQ(Matches(R"(\h+)", "0fAg"), (V{"0fA"}));
  EXPECT_EQ(Matches(R"(\R)", "a\r\nb\nc\rd"), (V{"\r\n", "\n", "\r"}));
  // Oniguruma's quirk: superscript two (U+00B2) is in \w but not in [\w].
  EXPECT_EQ(Matches(R"(\w)", "\xC2\xB2"), (V{"\xC2\xB2"}));
  EXPECT_EQ(Matches(R"([\w])", "\xC2\xB2"), V{});
}

TEST(RegexTest, UnicodeProperties) {
  const std::string text =
      "aB\xC7\x85\xCA\xB0\xE4\xB8\xAD"
      "5\xE2\x85\xA0!";  // a B ǅ ʰ 中 5 Ⅰ !
  EXPECT_EQ(Matches(R"(\p{L}+)", text), (V{"aB\xC7\x85\xCA\xB0\xE4\xB8\xAD"}));
  EXPECT_EQ(Matches(R"(\p{Lu})", text), (V{"B"}));
  EXPECT_EQ(Matches(R"(\p{Ll})", text), (V{"a"}));
  EXPECT_EQ(Matches(R"(\p{Lt})", text), (V{"\xC7\x85"}));
  EXPECT_EQ(Matches(R"(\p{Lm})", text), (V{"\xCA\xB0"}));
  EXPECT_EQ(Matches(R"(\p{Lo})", text), (V{"\xE4\xB8\xAD"}));
  EXPECT_EQ(Matches(R"(\p{N}+)", text), (V{"5\xE2\x85\xA0"}));
  EXPECT_EQ(Matches(R"(\p{Nl})", text), (V{"\xE2\x85\xA0"}));
  EXPECT_EQ(Matches(R"(\p{P})", text), (V{"!"}));
  EXPECT_EQ(Matches(R"(\p{Letter}\p{Uppercase_Letter})", "aB"), (V{"aB"}));
  EXPECT_EQ(Matches(R"(\p{lowercase letter})", "aB"), (V{"a"}));
  EXPECT_EQ(Matches(R"(\p{^L}+)", "ab12cd"), (V{"12"}));
  EXPECT_EQ(Matches(R"(\P{L}+)", "ab12cd"), (V{"12"}));
  EXPECT_EQ(Matches(R"(\P{^L}+)", "ab12cd"), (V{"ab", "cd"}));
  EXPECT_EQ(Matches(R"(\p{M})", "e\xCC\x81"), (V{"\xCC\x81"}));  // combining acute
  EXPECT_EQ(Matches(R"(\p{S}+)", "a+$^\xC2\xA9"), (V{"+$^\xC2\xA9"}));
  EXPECT_EQ(Matches(R"(\p{Z})", "a b\xE2\x80\xA8"), (V{" ", "\xE2\x80\xA8"}));
  EXPECT_EQ(Matches(R"(\p{C})", "a\x01\xE2\x80\x8B"), (V{"\x01", "\xE2\x80\x8B"}));
}

TEST(RegexTest, AlternativesAreOrderedNotLongest) {
  EXPECT_EQ(Matches("a|ab", "ab"), (V{"a"}));
  EXPECT_EQ(Matches("ab|a", "ab"), (V{"ab"}));
  EXPECT_EQ(Matches("(?:a|ab)(?:c|bcd)", "abcd"), (V{"abcd"}));  // a + bcd
  EXPECT_EQ(Matches("(?:ab|a)(?:c|bcd)", "abcd"), (V{"abc"}));   // ab + c
  EXPECT_EQ(Matches("|a", "a"), (V{"", ""}));  // the empty alternative wins at every position
}

TEST(RegexTest, GreedyLazyPossessive) {
  EXPECT_EQ(Matches("a+ab", "aaab"), (V{"aaab"}));  // greedy gives back
  EXPECT_EQ(Matches("a*?b", "aab"), (V{"aab"}));
  EXPECT_EQ(Matches("a+?", "aaa"), (V{"a", "a", "a"}));
  EXPECT_EQ(Matches("a??b", "ab"), (V{"ab"}));
  EXPECT_EQ(Matches("a{2,3}?", "aaaaa"), (V{"aa", "aa"}));
  EXPECT_EQ(Matches("a{2}", "aaaaa"), (V{"aa", "aa"}));
  EXPECT_EQ(Matches("a{2,}", "aaaaa"), (V{"aaaaa"}));
  EXPECT_EQ(Matches("a{,2}b", "aaab"), (V{"aab"}));
  EXPECT_EQ(Matches("a{1,2}+", "aaa"), (V{"aaa"}));  // Ruby: {n,m}+ is a nested repeat
  EXPECT_EQ(Matches("a++a", "aaa"), V{});            // possessive never gives back
  EXPECT_EQ(Matches("a*+b", "aab"), (V{"aab"}));
  EXPECT_EQ(Matches("a?+a", "a"), V{});
  EXPECT_EQ(Matches("(?>a+)a", "aaa"), V{});
  EXPECT_EQ(Matches("(?:ab)+", "ababa"), (V{"abab"}));
  EXPECT_EQ(Matches("(?:ab)+?", "abab"), (V{"ab", "ab"}));
  EXPECT_EQ(Matches("(?:ab){2}", "ababab"), (V{"abab"}));
  EXPECT_EQ(Matches("(?:a|b)*c", "abac"), (V{"abac"}));
  EXPECT_EQ(Matches("(?:a*)*b", "aab"), (V{"aab"}));  // empty-loop check terminates
}

TEST(RegexTest, Lookaround) {
  EXPECT_EQ(Matches(R"(\s+(?!\S))", "a   b"), (V{"  "}));
  EXPECT_EQ(Matches(R"(\w+(?=!))", "hi! yo"), (V{"hi"}));
  EXPECT_EQ(Matches("(?<=a)b", "abcb"), (V{"b"}));
  EXPECT_EQ(Spans("(?<=a)b", "abcb"), (S{{1, 2}}));
  EXPECT_EQ(Spans("(?<!a)b", "abcb"), (S{{3, 4}}));
  EXPECT_EQ(Spans("(?<=ab|c)d", "abdcdd"), (S{{2, 3}, {4, 5}}));
  EXPECT_EQ(Spans("(?<!a|bc)d", "bcdxd"), (S{{4, 5}}));
  EXPECT_EQ(Spans("(?<=\xC3\xA9)x", "\xC3\xA9x"), (S{{2, 3}}));  // looks back one code point
  EXPECT_EQ(Spans(R"((?<!^)a)", "aa"), (S{{1, 2}}));
  // Lookbehind sees text before the search start.
  EXPECT_EQ(Spans("(?<=a)a", "aaa"), (S{{1, 2}, {2, 3}}));
}

TEST(RegexTest, Anchors) {
  EXPECT_EQ(Spans("^a", "a\na\n"), (S{{0, 1}, {2, 3}}));
  EXPECT_EQ(Spans("a$", "a\na"), (S{{0, 1}, {2, 3}}));  // $ is a line anchor in Ruby
  EXPECT_EQ(Spans(R"(\Aa)", "aa"), (S{{0, 1}}));
  EXPECT_EQ(Spans(R"(a\z)", "a\na"), (S{{2, 3}}));
  EXPECT_EQ(Spans(R"(a\Z)", "aa\n"), (S{{1, 2}}));
  EXPECT_EQ(Matches(R"(\bab\b)", "ab abc ab"), (V{"ab", "ab"}));
  EXPECT_EQ(Spans(R"(\B.)", "ab c"), (S{{1, 2}}));
  EXPECT_EQ(Spans(R"(\s+$)", "a  \n  b  "), (S{{1, 3}, {7, 9}}));
  EXPECT_EQ(Spans(R"(\G.)", "ab"), (S{{0, 1}, {1, 2}}));
}

TEST(RegexTest, CaseInsensitive) {
  EXPECT_EQ(Matches("(?i:'s|'t)", "'S 'T 's"), (V{"'S", "'T", "'s"}));
  EXPECT_EQ(Matches("(?i)s", "\xC5\xBF"), (V{"\xC5\xBF"}));          // U+017F LONG S folds to s
  EXPECT_EQ(Matches("(?i)k", "\xE2\x84\xAA"), (V{"\xE2\x84\xAA"}));  // U+212A KELVIN SIGN
  EXPECT_EQ(Matches("(?i)\xCF\x83", "\xCE\xA3\xCF\x82"), (V{"\xCE\xA3", "\xCF\x82"}));  // σ: Σ ς
  EXPECT_EQ(Matches("(?i:[a-c]+)", "ABCabcd"), (V{"ABCabc"}));
  EXPECT_EQ(Matches("(?i)[^k]", "K\xE2\x84\xAAk"), V{});  // folding happens before negation
  // Options without ':' run to the end of the group, alternatives included ("a(?i:b|c)").
  EXPECT_EQ(Matches("a(?i)b|c", "c ac aB"), (V{"ac", "aB"}));
  EXPECT_EQ(Matches("(?i:a)(?-i:a)", "AA Aa"), (V{"Aa"}));
}

TEST(RegexTest, ExtendedModeAndComments) {
  EXPECT_EQ(Matches("(?x) a b # comment\n c", "abc"), (V{"abc"}));
  EXPECT_EQ(Matches("(?x)[ a]+", " a"), (V{" a"}));  // classes keep their spaces
  EXPECT_EQ(Matches("a(?#comment)b", "ab"), (V{"ab"}));
}

// onig's find iteration: an empty match is reported, but one at the end of the previous match is
// skipped by moving the search start one character on.
TEST(RegexTest, EmptyMatchIteration) {
  EXPECT_EQ(Spans("x*", "ab"), (S{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(Spans("a*", "baa"), (S{{0, 0}, {1, 3}}));
  EXPECT_EQ(Spans("", ""), (S{{0, 0}}));
  EXPECT_EQ(Spans("x*", "\xC3\xA9"), (S{{0, 0}, {2, 2}}));  // steps over whole code points
}

TEST(RegexTest, Gpt2PatternSplitsLikeTokenizers) {
  const char* gpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(Matches(gpt2, "Hello world's 123  foo\n"),
            (V{"Hello", " world", "'s", " 123", " ", " foo", "\n"}));
  EXPECT_EQ(Matches(gpt2, "I'M fine!!  "), (V{"I", "'", "M", " fine", "!!", "  "}));
  const std::string llama3 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
                             R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(Matches(llama3, "I'M 12345 (ok)\n\n x"),
            (V{"I", "'M", " ", "123", "45", " (", "ok", ")\n\n", " x"}));
}

TEST(RegexTest, InvalidUtf8TextKeepsByteOffsets) {
  // An invalid byte is a one-byte U+FFFD (a symbol, So): never a letter, never dropped.
  EXPECT_EQ(Spans(R"(\p{L}+)",
                  "\xFF"
                  "ab\xE2\x82"
                  "c"),
            (S{{1, 3}, {5, 6}}));
  EXPECT_EQ(Spans(R"(\p{So})", "\xE2\x82"), (S{{0, 1}, {1, 2}}));
  EXPECT_EQ(Spans(".", "\xC0\x80"), (S{{0, 1}, {1, 2}}));
}

TEST(RegexTest, ErrorsNameTheConstructAndOffset) {
  struct Case {
    const char* pattern;
    const char* message;
  };
  const Case cases[] = {
      {"(ab", "unmatched parenthesis at offset 0"},
      {"ab)", "unmatched close parenthesis at offset 2"},
      {"[ab", "premature end of char-class at offset 0"},
      {"*a", "target of repeat operator is not specified at offset 0"},
      {"a|+", "target of repeat operator is not specified at offset 2"},
      {"^*", "target of repeat operator is invalid at offset 1"},
      {R"(\p{Foo})", "property name {Foo}"},
      {R"(\pL)", "braced property name"},
      {"[b-a]", "empty range in char class"},
      {R"([\d-z])", "unmatched range specifier"},
      {"a{3,2}", "n > m"},
      {"a{100001}", "repeat count too large"},
      {R"(\1)", "backreferences are not supported"},
      {"(?<name>a)", "named groups are not supported"},
      {"(?<=a+)b", "lookbehind of variable length"},
      {"(?s:.)", "undefined group option"},
      {"[[:alpha:]]", "POSIX bracket"},
      {R"(\x{110000})", "out of range"},
      {R"(\u12)", "invalid code point value"},
      {R"(\X)", "unsupported escape \\X"},
      {"a\\", "end pattern at escape"},
      {"a{0,60000}{0,60000}", "too large"},
  };
  for (const Case& c : cases) {
    StatusOr<regex::Regex> re = regex::Regex::Compile(c.pattern);
    ASSERT_FALSE(re.ok()) << c.pattern;
    EXPECT_EQ(re.status().code(), StatusCode::kInvalidArgument) << c.pattern;
    EXPECT_NE(re.status().message().find(c.message), std::string::npos)
        << c.pattern << " -> " << re.status().message();
  }
}

TEST(RegexTest, DeepNestingIsAnErrorNotACrash) {
  EXPECT_FALSE(regex::Regex::Compile(std::string(5000, '(') + std::string(5000, ')')).ok());
  EXPECT_FALSE(regex::Regex::Compile("a" + std::string(5000, '*')).ok());
}

// Inputs that make a plain backtracker quadratic or exponential; the memoizing fallback keeps
// them fast, and the answers must stay exact.
TEST(RegexTest, PathologicalInputsStayCorrect) {
  const std::string spaces(200000, ' ');
  EXPECT_EQ(Spans(R"(\s+$)", spaces + "x  "), (S{{200001, 200003}}));
  EXPECT_EQ(Spans(R"(\s+$)", spaces + "x"), S{});
  EXPECT_EQ(Spans("(?:a+)+b", std::string(5000, 'a')), S{});
  EXPECT_EQ(Spans("(?:a+)+b", std::string(5000, 'a') + "b"), (S{{0, 5001}}));
  EXPECT_EQ(Spans("(a|aa)*c", std::string(3000, 'a') + "c"), (S{{0, 3001}}));
  EXPECT_EQ(Spans(R"(\p{L}+\d)", std::string(100000, 'a')), S{});
  // After the memo switch the later matches are still found.
  const std::string text = spaces + "x  y " + "zz  ";
  EXPECT_EQ(Spans(R"(\s+$|\p{L}+)", text),
            (S{{200000, 200001}, {200003, 200004}, {200005, 200007}, {200007, 200009}}));
}

TEST(RegexTest, ConcurrentUseOfOneRegex) {
  StatusOr<regex::Regex> re = regex::Regex::Compile(R"( ?\p{L}+| ?\p{N}+|\s+(?!\S)|\s+|.)");
  ASSERT_TRUE(re.ok());
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "word " + std::to_string(i) + "  \xE4\xB8\xAD ";
  std::vector<regex::Regex::Match> expected;
  re->FindAll(text, expected);
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<regex::Regex::Match> got;
        re->FindAll(text, got);
        bool same = got.size() == expected.size();
        for (size_t i = 0; same && i < got.size(); ++i) {
          same = got[i].begin == expected[i].begin && got[i].end == expected[i].end;
        }
        ok[t] += same;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(ok[t], 20);
}

// Random patterns and texts: compiling either succeeds or fails cleanly, and matching always
// terminates with matches that are in bounds, ordered and non-overlapping.
TEST(RegexTest, RandomPatternsNeverCrash) {
  const std::string alphabet = "ab()[]{}|*+?^$.\\-,0123:!=<>#pPsSdDwWbBAzZ &";
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string pattern;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) pattern.push_back(alphabet[rng() % alphabet.size()]);
    StatusOr<regex::Regex> re = regex::Regex::Compile(pattern);
    if (!re.ok()) {
      EXPECT_EQ(re.status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    std::string text;
    for (int k = 0; k < 40; ++k) text.push_back("ab \n1\xC3\xA9-"[rng() % 8]);
    std::vector<regex::Regex::Match> found;
    re->FindAll(text, found);
    size_t prev_end = 0;
    for (const regex::Regex::Match& m : found) {
      ASSERT_LE(m.begin, m.end) << pattern;
      ASSERT_LE(m.end, text.size()) << pattern;
      ASSERT_GE(m.begin, prev_end) << pattern;
      prev_end = m.end;
    }
  }
}

}  // namespace
}  // namespace astr
