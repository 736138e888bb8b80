#include "common/text/unicode/unicode.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace astr::unicode {
namespace {

// Decodes all of s with NextCodepoint, recording each code point and the bytes it took.
std::vector<std::pair<uint32_t, size_t>> DecodeAll(std::string_view s) {
  std::vector<std::pair<uint32_t, size_t>> out;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = NextCodepoint(s, i);
    out.emplace_back(cp, i - start);
  }
  return out;
}

using D = std::vector<std::pair<uint32_t, size_t>>;

std::string Utf8(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, s);
  return s;
}

TEST(UnicodeTest, CategoriesAcrossScripts) {
  struct Case {
    uint32_t cp;
    Category category;
  };
  const Case cases[] = {
      {'A', Category::kLu},
      {'z', Category::kLl},
      {0x01C5, Category::kLt},  // ǅ
      {0x02B0, Category::kLm},
      {0x4E2D, Category::kLo},
      {0xAC00, Category::kLo},  // ʰ 中 가
      {0x0E01, Category::kLo},
      {0x0627, Category::kLo},
      {0x0915, Category::kLo},  // ก ا क
      {0x0416, Category::kLu},
      {0x03C3, Category::kLl},
      {0x3042, Category::kLo},  // Ж σ あ
      {0x0301, Category::kMn},
      {0x0E31, Category::kMn},
      {0x0903, Category::kMc},
      {0x20DD, Category::kMe},
      {0xFE0F, Category::kMn},
      {'7', Category::kNd},
      {0x0663, Category::kNd},
      {0xFF11, Category::kNd},
      {0x2160, Category::kNl},  // ٣ １ Ⅰ
      {0x00BD, Category::kNo},
      {0x00B2, Category::kNo},
      {'_', Category::kPc},  // ½ ²
      {'-', Category::kPd},
      {'(', Category::kPs},
      {')', Category::kPe},
      {0x00AB, Category::kPi},
      {0x00BB, Category::kPf},
      {'!', Category::kPo},  // « »
      {0x3002, Category::kPo},
      {'+', Category::kSm},
      {'$', Category::kSc},  // 。
      {'^', Category::kSk},
      {0x1F3FB, Category::kSk},
      {0x00A9, Category::kSo},  // skin tone ©
      {0x1F600, Category::kSo},
      {0x1F1FA, Category::kSo},
      {' ', Category::kZs},  // 😀 🇺
      {0x3000, Category::kZs},
      {0x2028, Category::kZl},
      {0x2029, Category::kZp},
      {0x0000, Category::kCc},
      {0x0085, Category::kCc},
      {0x200B, Category::kCf},
      {0x200D, Category::kCf},
      {0xD800, Category::kCs},
      {0xE000, Category::kCo},
      {0x10FFFD, Category::kCo},
      {0x0378, Category::kCn},
      {0x10FFFF, Category::kCn},
      {0x110000, Category::kCn},
      {0xFFFD, Category::kSo},
      // Assigned in Unicode 15.0 / 16.0, after Python 3.11's tables.
      {0x11F04, Category::kLo},
      {0x1C89, Category::kLu},
      {0x0897, Category::kMn},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(static_cast<int>(GetCategory(c.cp)), static_cast<int>(c.category))
        << std::hex << "U+" << c.cp;
  }
}

TEST(UnicodeTest, CategoryGroups) {
  EXPECT_TRUE(IsLetter(0x01C5));
  EXPECT_FALSE(IsLetter('1'));
  EXPECT_TRUE(IsNumber(0x2160));
  EXPECT_TRUE(IsNumber(0x00BD));
  EXPECT_TRUE(IsMark(0x20DD));
  EXPECT_TRUE(IsPunctuation('_'));
  EXPECT_TRUE(IsSymbol('$'));
  EXPECT_FALSE(IsSymbol('!'));
  EXPECT_TRUE(IsSeparator(0x2029));
  EXPECT_FALSE(IsSeparator('\n'));
  EXPECT_TRUE(IsOther('\n'));
  EXPECT_TRUE(IsOther(0x0378));
}

TEST(UnicodeTest, WhitespaceIsTheWhiteSpaceProperty) {
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u,
                      0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(IsWhitespace(cp)) << std::hex << cp;
  }
  // Zero-width space and the Mongolian vowel separator are format characters; U+001C..U+001F
  // are Python's isspace() but not White_Space.
  for (uint32_t cp : {0x200Bu, 0x180Eu, 0x1Cu, 0x1Fu, 0xFEFFu, 0x61u, 0x08u}) {
    EXPECT_FALSE(IsWhitespace(cp)) << std::hex << cp;
  }
}

TEST(UnicodeTest, WordChars) {
  EXPECT_TRUE(IsWordChar('a'));
  EXPECT_TRUE(IsWordChar('_'));
  EXPECT_TRUE(IsWordChar(0x0663));   // Arabic-Indic three
  EXPECT_TRUE(IsWordChar(0x2160));   // Roman numeral one (Nl)
  EXPECT_TRUE(IsWordChar(0x24B6));   // circled capital A
  EXPECT_TRUE(IsWordChar(0x00B2));   // superscript two (Oniguruma's Latin-1 table)
  EXPECT_FALSE(IsWordChar(0x00D7));  // multiplication sign
  EXPECT_FALSE(IsWordChar('-'));
  EXPECT_FALSE(IsWordChar(0x200D));  // ZWJ
}

TEST(UnicodeTest, DecodeValidSequences) {
  EXPECT_EQ(DecodeAll("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"),
            (D{{'a', 1}, {0xE9, 2}, {0x4E2D, 3}, {0x1F600, 4}}));
  EXPECT_EQ(DecodeAll("\xF4\x8F\xBF\xBF"), (D{{0x10FFFF, 4}}));
  EXPECT_EQ(DecodeAll("\xEE\x80\x80"), (D{{0xE000, 3}}));
}

TEST(UnicodeTest, DecodeInvalidSequencesOneByteAtATime) {
  const uint32_t R = kReplacementChar;
  EXPECT_EQ(DecodeAll("\xC0\x80"), (D{{R, 1}, {R, 1}}));                          // overlong NUL
  EXPECT_EQ(DecodeAll("\xE0\x80\xAF"), (D{{R, 1}, {R, 1}, {R, 1}}));              // overlong '/'
  EXPECT_EQ(DecodeAll("\xED\xA0\x80"), (D{{R, 1}, {R, 1}, {R, 1}}));              // surrogate D800
  EXPECT_EQ(DecodeAll("\xF4\x90\x80\x80"), (D{{R, 1}, {R, 1}, {R, 1}, {R, 1}}));  // > 10FFFF
  EXPECT_EQ(DecodeAll("\xE2\x82"), (D{{R, 1}, {R, 1}}));                          // truncated
  EXPECT_EQ(DecodeAll("\x80"
                      "a"),
            (D{{R, 1}, {'a', 1}}));  // stray continuation
  EXPECT_EQ(DecodeAll("\xFF\xFE"), (D{{R, 1}, {R, 1}}));
  EXPECT_EQ(DecodeAll("\xC3(a"), (D{{R, 1}, {'(', 1}, {'a', 1}}));
  // A real U+FFFD decodes like any other character.
  EXPECT_EQ(DecodeAll("\xEF\xBF\xBD"), (D{{R, 3}}));
}

TEST(UnicodeTest, PrevCodepointStartMirrorsDecoding) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀: boundaries 0 1 3 6 10
  EXPECT_EQ(PrevCodepointStart(s, 10, 0), 6u);
  EXPECT_EQ(PrevCodepointStart(s, 6, 0), 3u);
  EXPECT_EQ(PrevCodepointStart(s, 3, 0), 1u);
  EXPECT_EQ(PrevCodepointStart(s, 1, 0), 0u);
  // With the floor inside a sequence, the walk from the floor saw single invalid bytes.
  EXPECT_EQ(PrevCodepointStart(s, 10, 7), 9u);
  // Invalid bytes step back one at a time, like the forward walk.
  const std::string bad =
      "\xE2\x82"
      "a\x80";
  EXPECT_EQ(PrevCodepointStart(bad, 4, 0), 3u);
  EXPECT_EQ(PrevCodepointStart(bad, 3, 0), 2u);
  EXPECT_EQ(PrevCodepointStart(bad, 2, 0), 1u);
  EXPECT_EQ(PrevCodepointStart(bad, 1, 0), 0u);
}

TEST(UnicodeTest, AppendUtf8) {
  EXPECT_EQ(Utf8('a'), "a");
  EXPECT_EQ(Utf8(0xE9), "\xC3\xA9");
  EXPECT_EQ(Utf8(0x20AC), "\xE2\x82\xAC");
  EXPECT_EQ(Utf8(0x1F600), "\xF0\x9F\x98\x80");
  EXPECT_EQ(Utf8(0xD800), "\xEF\xBF\xBD");    // surrogates cannot be encoded
  EXPECT_EQ(Utf8(0x110000), "\xEF\xBF\xBD");  // nor can values past U+10FFFF
}

TEST(UnicodeTest, IsValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));
  EXPECT_FALSE(IsValidUtf8("abc\xE2\x82"));
  EXPECT_FALSE(IsValidUtf8("\xF8\x88\x80\x80\x80"));
}

// Expected values follow the WHATWG / Unicode "maximal subpart" rule, which Rust's
// String::from_utf8_lossy implements.
TEST(UnicodeTest, Utf8LossyReplacesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(Utf8Lossy("hello"), "hello");
  EXPECT_EQ(Utf8Lossy("\xF0\x90\x80"
                      "A"),
            r + "A");                                       // truncated 4-byte prefix
  EXPECT_EQ(Utf8Lossy("\xE2\x28\xA1"), r + "(" + r);        // lead, ASCII, stray byte
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), r + r + r);          // surrogates: ED is a dead end
  EXPECT_EQ(Utf8Lossy("\xC0\x80"), r + r);                  // C0 is never a lead byte
  EXPECT_EQ(Utf8Lossy("\xE0\x80\x80"), r + r + r);          // overlong: E0 needs A0..BF
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(Utf8Lossy("\xE2\x82\xAC\xE2\x82"), "\xE2\x82\xAC" + r);
  EXPECT_EQ(Utf8Lossy("\xF1\x80\x80\xE1\x80\xC2"), r + r + r);  // three truncated prefixes
  EXPECT_EQ(Utf8Lossy("a\xFF"
                      "b"),
            "a" + r + "b");
}

TEST(UnicodeTest, CompletePrefixLengthHoldsBackOnlyUnfinishedSequences) {
  EXPECT_EQ(CompletePrefixLength(""), 0u);
  EXPECT_EQ(CompletePrefixLength("abc"), 3u);
  EXPECT_EQ(CompletePrefixLength("abc\xE2\x82"), 3u);
  EXPECT_EQ(CompletePrefixLength("abc\xE2"), 3u);
  EXPECT_EQ(CompletePrefixLength("abc\xE2\x82\xAC"), 6u);
  EXPECT_EQ(CompletePrefixLength("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(CompletePrefixLength("a\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(CompletePrefixLength("a\xC3"), 1u);
  EXPECT_EQ(CompletePrefixLength("a\xFF"), 2u);      // can never become valid
  EXPECT_EQ(CompletePrefixLength("a\xED\xA0"), 3u);  // surrogate prefix: already invalid
  EXPECT_EQ(CompletePrefixLength("a\x80"), 2u);
  EXPECT_EQ(CompletePrefixLength("\xE2\x82\xAC\xF0"), 3u);
}

TEST(UnicodeTest, SimpleCaseFold) {
  EXPECT_EQ(SimpleCaseFold('A'), uint32_t{'a'});
  EXPECT_EQ(SimpleCaseFold('a'), uint32_t{'a'});
  EXPECT_EQ(SimpleCaseFold(0x212A), uint32_t{'k'});  // KELVIN SIGN
  EXPECT_EQ(SimpleCaseFold(0x017F), uint32_t{'s'});  // LONG S
  EXPECT_EQ(SimpleCaseFold(0x03A3), 0x03C3u);        // Σ -> σ
  EXPECT_EQ(SimpleCaseFold(0x03C2), 0x03C3u);        // ς -> σ
  EXPECT_EQ(SimpleCaseFold(0x1E9E), 0x00DFu);        // ẞ -> ß (simple, not "ss")
  EXPECT_EQ(SimpleCaseFold(0x00DF), 0x00DFu);
  EXPECT_EQ(SimpleCaseFold(0x0130), 0x0130u);  // İ has only a full folding
  EXPECT_EQ(SimpleCaseFold(0x1C89), 0x1C8Au);  // Cyrillic TJE, new in Unicode 16.0
}

TEST(UnicodeTest, CombiningClass) {
  EXPECT_EQ(CombiningClass('a'), 0);
  EXPECT_EQ(CombiningClass(0x0301), 230);  // acute above
  EXPECT_EQ(CombiningClass(0x0323), 220);  // dot below
  EXPECT_EQ(CombiningClass(0x094D), 9);    // Devanagari virama
}

TEST(UnicodeTest, NormalizationForms) {
  // UAX #15 examples and classic cases.
  EXPECT_EQ(Normalize("e\xCC\x81", NormalForm::kNFC), "\xC3\xA9");
  EXPECT_EQ(Normalize("\xC3\xA9", NormalForm::kNFD), "e\xCC\x81");
  EXPECT_EQ(Normalize("\xE1\xB8\x8B\xCC\xA3", NormalForm::kNFC), "\xE1\xB8\x8D\xCC\x87");
  EXPECT_EQ(Normalize("\xE1\xB8\x8B\xCC\xA3", NormalForm::kNFD), "d\xCC\xA3\xCC\x87");
  EXPECT_EQ(Normalize("q\xCC\x87\xCC\xA3", NormalForm::kNFC), "q\xCC\xA3\xCC\x87");
  EXPECT_EQ(Normalize("\xE2\x84\xAB", NormalForm::kNFC), "\xC3\x85");      // Å ANGSTROM -> Å
  EXPECT_EQ(Normalize("\xEF\xAC\x81", NormalForm::kNFC), "\xEF\xAC\x81");  // ﬁ stays
  EXPECT_EQ(Normalize("\xEF\xAC\x81", NormalForm::kNFKC), "fi");
  EXPECT_EQ(Normalize("\xE2\x91\xA0", NormalForm::kNFKD), "1");       // ①
  EXPECT_EQ(Normalize("\xC7\x85", NormalForm::kNFKD), "Dz\xCC\x8C");  // ǅ
  EXPECT_EQ(Normalize("\xC7\x85", NormalForm::kNFKC), "D\xC5\xBE");   // D ž
  // Hangul: algorithmic decomposition and composition.
  EXPECT_EQ(Normalize("\xEA\xB0\x81", NormalForm::kNFD), "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");
  EXPECT_EQ(Normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", NormalForm::kNFC), "\xEA\xB0\x81");
  EXPECT_EQ(Normalize("\xE1\x84\x80\xE1\x85\xA1", NormalForm::kNFC), "\xEA\xB0\x80");
  // a + acute (230) + dot below (220): reordered dot below first, which composes to U+1EA1;
  // U+1EA1 has no composite with the acute, which stays.
  EXPECT_EQ(Normalize("a\xCC\x81\xCC\xA3", NormalForm::kNFC), "\xE1\xBA\xA1\xCC\x81");
  EXPECT_EQ(Normalize("plain", NormalForm::kNFKC), "plain");
  EXPECT_EQ(Normalize("", NormalForm::kNFD), "");
  EXPECT_EQ(Normalize("\xFF", NormalForm::kNFC), "\xEF\xBF\xBD");
}

TEST(UnicodeTest, ToLower) {
  EXPECT_EQ(ToLower("HeLLo World"), "hello world");
  EXPECT_EQ(ToLower("\xC3\x80\xC3\x89"), "\xC3\xA0\xC3\xA9");  // ÀÉ -> àé
  EXPECT_EQ(ToLower("\xC4\xB0"), "i\xCC\x87");                 // İ -> i̇
  EXPECT_EQ(ToLower("\xE1\xBA\x9E"), "\xC3\x9F");              // ẞ -> ß
  EXPECT_EQ(ToLower("\xE2\x84\xAA"), "k");                     // KELVIN SIGN
  // Final sigma: Σ at the end of a word becomes ς, elsewhere σ.
  EXPECT_EQ(ToLower("\xCE\xA3"), "\xCF\x83");                  // Σ alone
  EXPECT_EQ(ToLower("\xCE\x91\xCE\xA3"), "\xCE\xB1\xCF\x82");  // ΑΣ -> ας
  EXPECT_EQ(ToLower("\xCE\x91\xCE\xA3\xCE\x91"), "\xCE\xB1\xCF\x83\xCE\xB1");
  EXPECT_EQ(ToLower("\xCE\x91\xCE\xA3 x"), "\xCE\xB1\xCF\x82 x");
  EXPECT_EQ(ToLower("\xCE\x91\xCE\xA3'"), "\xCE\xB1\xCF\x82'");  // ' is case-ignorable
  EXPECT_EQ(ToLower("\xCE\x91'\xCE\xA3"), "\xCE\xB1'\xCF\x82");
  EXPECT_EQ(ToLower("\xCE\x91\xCE\xA3'b"), "\xCE\xB1\xCF\x83'b");
  // Per-character lowercasing has no final-sigma context.
  EXPECT_EQ(ToLowerChars("\xCE\x91\xCE\xA3"), "\xCE\xB1\xCF\x83");
  EXPECT_EQ(ToLower("\xFF"
                    "A"),
            "\xEF\xBF\xBD"
            "a");
}

TEST(UnicodeTest, Version) { EXPECT_STREQ(UnicodeVersion(), "16.0.0"); }

}  // namespace
}  // namespace astr::unicode
