// Unicode support for the tokenizer: UTF-8 decoding and repair, General_Category and the other
// properties the pre-tokenizer regexes test, normalization forms and lowercasing.
//
// The tables (common/text/unicode/data.cc, written by scripts/gen_unicode_data.py) are
// Unicode 16.0, the version of the Oniguruma engine inside Hugging Face `tokenizers`, which this
// code must match split for split. Malformed UTF-8 never fails: it decodes to U+FFFD, one per byte
// (NextCodepoint) or one per maximal invalid subsequence (Utf8Lossy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace astr::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

namespace internal {
// General_Category as a two-level table (see unicode_data.h); declared here so that the regex
// matcher's per-character lookup inlines.
extern const uint8_t kCategoryStage1[];
extern const uint8_t kCategoryStage2[];
// Decodes a multi-byte sequence at s[i] (s[i] >= 0x80); the slow path of NextCodepoint.
uint32_t NextCodepointMultibyte(std::string_view s, size_t& i);
}  // namespace internal

// ---- UTF-8 -------------------------------------------------------------------------------------

// Decodes the code point starting at s[i] and advances i. Invalid or truncated UTF-8 (overlong
// forms, surrogates, values above U+10FFFF, stray continuation bytes) yields U+FFFD and advances by
// 1 byte. Requires i < s.size().
inline uint32_t NextCodepoint(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  return internal::NextCodepointMultibyte(s, i);
}

// The start of the code point that ends at byte i, as NextCodepoint would have walked to i from any
// position <= `floor` that NextCodepoint also reached: a complete well-formed sequence of 2..4
// bytes ending at i that starts at or after `floor`, else i - 1. Requires floor < i.
size_t PrevCodepointStart(std::string_view s, size_t i, size_t floor);

// Appends the UTF-8 form of cp; a surrogate or a value above U+10FFFF appends U+FFFD.
void AppendUtf8(uint32_t cp, std::string& out);

bool IsValidUtf8(std::string_view s);

// Rust's String::from_utf8_lossy: each maximal invalid subsequence (the Unicode "maximal subpart"
// practice, W3C/WHATWG decoding) becomes one U+FFFD; valid text is copied unchanged.
std::string Utf8Lossy(std::string_view bytes);

// Length of the longest prefix of s that does not end inside an incomplete-but-so-far-valid UTF-8
// sequence: what a streaming decoder may emit now, holding the rest until more bytes arrive.
// Invalid bytes are not held back (they can never become valid).
size_t CompletePrefixLength(std::string_view s);

// ---- Properties --------------------------------------------------------------------------------

// General_Category; the numeric order is the table's encoding and a bit position in category masks.
// clang-format off
enum class Category : uint8_t {
  kLu, kLl, kLt, kLm, kLo,            // letters
  kMn, kMc, kMe,                      // marks
  kNd, kNl, kNo,                      // numbers
  kPc, kPd, kPs, kPe, kPi, kPf, kPo,  // punctuation
  kSm, kSc, kSk, kSo,                 // symbols
  kZs, kZl, kZp,                      // separators
  kCc, kCf, kCs, kCo, kCn,            // other (Cs only for code points in D800..DFFF)
};
// clang-format on
inline constexpr int kNumCategories = 30;

// O(1): two table loads. Values above U+10FFFF are kCn.
inline Category GetCategory(uint32_t cp) {
  if (cp > kMaxCodepoint) return Category::kCn;
  const uint32_t block = internal::kCategoryStage1[cp >> 8];
  return static_cast<Category>(internal::kCategoryStage2[(block << 8) | (cp & 0xFF)]);
}

// The bit of a category in a category mask (bit i = Category i).
constexpr uint32_t CategoryBit(Category c) { return uint32_t{1} << static_cast<int>(c); }

inline bool IsLetter(uint32_t cp) { return GetCategory(cp) <= Category::kLo; }
inline bool IsMark(uint32_t cp) {
  const Category c = GetCategory(cp);
  return c >= Category::kMn && c <= Category::kMe;
}
inline bool IsNumber(uint32_t cp) {
  const Category c = GetCategory(cp);
  return c >= Category::kNd && c <= Category::kNo;
}
inline bool IsPunctuation(uint32_t cp) {
  const Category c = GetCategory(cp);
  return c >= Category::kPc && c <= Category::kPo;
}
inline bool IsSymbol(uint32_t cp) {
  const Category c = GetCategory(cp);
  return c >= Category::kSm && c <= Category::kSo;
}
inline bool IsSeparator(uint32_t cp) {
  const Category c = GetCategory(cp);
  return c >= Category::kZs && c <= Category::kZp;
}
inline bool IsOther(uint32_t cp) { return GetCategory(cp) >= Category::kCc; }

// The White_Space property: Rust's char::is_whitespace and Oniguruma's \s.
bool IsWhitespace(uint32_t cp);

// Oniguruma's \w (outside brackets) and \b with Unicode semantics: letters, marks, Nd, Nl, Pc and
// a few symbols (the circled Latin letters, Latin-1 superscript digits and fractions).
bool IsWordChar(uint32_t cp);

// Simple case folding (one code point to one code point); cp itself where there is none.
uint32_t SimpleCaseFold(uint32_t cp);

// Canonical_Combining_Class (0 for starters).
uint8_t CombiningClass(uint32_t cp);

// "16.0.0": the Unicode version of the tables.
const char* UnicodeVersion();

// ---- Transformations ---------------------------------------------------------------------------
// Each takes UTF-8 and returns UTF-8; malformed input bytes become U+FFFD (one per byte).

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string Normalize(std::string_view utf8, NormalForm form);

// Rust's str::to_lowercase (full lowercase mappings, with the Final_Sigma rule for U+03A3).
std::string ToLower(std::string_view utf8);

// Per-character lowercasing, Rust's char::to_lowercase applied to each code point (no Final_Sigma
// context): what the `tokenizers` Lowercase normalizer does.
std::string ToLowerChars(std::string_view utf8);

}  // namespace astr::unicode
