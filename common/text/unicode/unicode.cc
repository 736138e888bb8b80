#include "common/text/unicode/unicode.h"

#include <algorithm>

#include "common/text/unicode/data.h"

namespace astr::unicode {
namespace {

inline bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// The well-formed UTF-8 sequences (Unicode Table 3-7) are described by the lead byte: total length
// and the allowed range of the second byte (which excludes overlong forms, surrogates and values
// above U+10FFFF); the third and fourth bytes are any continuation byte.
struct LeadInfo {
  int length;  // 0: not a valid lead byte
  unsigned char second_lo;
  unsigned char second_hi;
};

inline LeadInfo Lead(unsigned char b) {
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Examines the sequence at s[i] (s[i] >= 0x80). Returns its length if it is complete and well
// formed (and sets *cp); otherwise returns minus the length of its maximal valid prefix (at least 1
// byte: a lone invalid byte is a prefix of length 1 for replacement purposes) and sets *truncated
// when that prefix runs to the end of s.
int Examine(std::string_view s, size_t i, uint32_t* cp, bool* truncated) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const LeadInfo lead = Lead(b0);
  *truncated = false;
  if (lead.length == 0) return -1;
  uint32_t value = b0 & (0x7F >> lead.length);
  for (int k = 1; k < lead.length; ++k) {
    if (i + k >= s.size()) {
      *truncated = true;
      return -k;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lead.second_lo && b <= lead.second_hi) : IsContinuation(b);
    if (!ok) return -k;
    value = (value << 6) | (b & 0x3F);
  }
  *cp = value;
  return lead.length;
}

template <typename T>
bool InRangePairs(const T* pairs, size_t size, uint32_t cp) {
  // pairs = lo0, hi0, lo1, hi1, ... sorted; small tables, so a linear scan with early exit.
  for (size_t k = 0; k + 1 < size; k += 2) {
    if (cp < pairs[k]) return false;
    if (cp <= pairs[k + 1]) return true;
  }
  return false;
}

// Index of cp in a sorted key table, or -1.
int64_t FindKey(const uint32_t* keys, size_t size, uint32_t cp) {
  const uint32_t* end = keys + size;
  const uint32_t* it = std::lower_bound(keys, end, cp);
  return (it != end && *it == cp) ? it - keys : -1;
}

// Final_Sigma context classes (see kCaseKindRanges): 0 other, 1 cased, 2 case-ignorable.
int CaseKind(uint32_t cp) {
  using internal::kCaseKindRanges;
  size_t lo = 0, hi = internal::kCaseKindRangesSize / 3;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (cp < kCaseKindRanges[mid * 3]) {
      hi = mid;
    } else if (cp > kCaseKindRanges[mid * 3 + 1]) {
      lo = mid + 1;
    } else {
      return static_cast<int>(kCaseKindRanges[mid * 3 + 2]);
    }
  }
  return 0;
}

// True when the text before U+03A3 at byte `pos` ends with a cased letter followed by
// case-ignorables, and the text after it (skipping case-ignorables) does not continue with a cased
// letter: Unicode's Final_Sigma condition, as Rust's str::to_lowercase evaluates it.
bool IsFinalSigma(std::string_view s, size_t pos, size_t next) {
  bool cased_before = false;
  for (size_t j = pos; j > 0;) {
    j = PrevCodepointStart(s, j, 0);
    size_t k = j;
    const int kind = CaseKind(NextCodepoint(s, k));
    if (kind == 2) continue;
    cased_before = kind == 1;
    break;
  }
  if (!cased_before) return false;
  for (size_t j = next; j < s.size();) {
    const int kind = CaseKind(NextCodepoint(s, j));
    if (kind == 2) continue;
    return kind != 1;
  }
  return true;
}

void AppendLower(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    return;
  }
  const int64_t k = FindKey(internal::kLowerKeys, internal::kLowerKeysSize, cp);
  if (k < 0) {
    AppendUtf8(cp, out);
    return;
  }
  const uint32_t span = internal::kLowerSpans[k];
  for (uint32_t n = 0; n < (span & 31); ++n) AppendUtf8(internal::kLowerPool[(span >> 5) + n], out);
}

}  // namespace

namespace internal {
uint32_t NextCodepointMultibyte(std::string_view s, size_t& i) {
  uint32_t cp = 0;
  bool truncated = false;
  const int n = Examine(s, i, &cp, &truncated);
  if (n > 0) {
    i += n;
    return cp;
  }
  ++i;
  return kReplacementChar;
}
}  // namespace internal

size_t PrevCodepointStart(std::string_view s, size_t i, size_t floor) {
  // A well-formed sequence is found by its lead byte; its trailing bytes are continuation bytes,
  // which can never start one, so a forward walk from at or before its lead reaches the lead.
  for (size_t len = 2; len <= 4 && len <= i - floor; ++len) {
    const size_t start = i - len;
    const auto b = static_cast<unsigned char>(s[start]);
    if (IsContinuation(b)) continue;
    if (Lead(b).length != static_cast<int>(len)) break;
    uint32_t cp = 0;
    bool truncated = false;
    if (Examine(s, start, &cp, &truncated) == static_cast<int>(len)) return start;
    break;
  }
  return i - 1;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = kReplacementChar;
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= kMaxCodepoint) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    AppendUtf8(kReplacementChar, out);
  }
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp = 0;
    bool truncated = false;
    const int n = Examine(s, i, &cp, &truncated);
    if (n < 0) return false;
    i += n;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      out.push_back(bytes[i++]);
      continue;
    }
    uint32_t cp = 0;
    bool truncated = false;
    const int n = Examine(bytes, i, &cp, &truncated);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      AppendUtf8(kReplacementChar, out);
      i += -n;
    }
  }
  return out;
}

size_t CompletePrefixLength(std::string_view s) {
  // Only the last three bytes can belong to an unfinished sequence (the longest is four bytes).
  const size_t first = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t j = first; j < s.size(); ++j) {
    if (Lead(static_cast<unsigned char>(s[j])).length == 0) continue;
    uint32_t cp = 0;
    bool truncated = false;
    const int n = Examine(s, j, &cp, &truncated);
    if (n < 0 && truncated) return j;
  }
  return s.size();
}

bool IsWhitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return InRangePairs(internal::kWhiteSpaceRanges, internal::kWhiteSpaceRangesSize, cp);
}

bool IsWordChar(uint32_t cp) {
  constexpr uint32_t kWordCategories =
      CategoryBit(Category::kLu) | CategoryBit(Category::kLl) | CategoryBit(Category::kLt) |
      CategoryBit(Category::kLm) | CategoryBit(Category::kLo) | CategoryBit(Category::kMn) |
      CategoryBit(Category::kMc) | CategoryBit(Category::kMe) | CategoryBit(Category::kNd) |
      CategoryBit(Category::kNl) | CategoryBit(Category::kPc);
  if ((kWordCategories >> static_cast<int>(GetCategory(cp))) & 1) return true;
  return InRangePairs(internal::kWordExtraRanges, internal::kWordExtraRangesSize, cp) ||
         InRangePairs(internal::kWordExtraOutsideClassRanges,
                      internal::kWordExtraOutsideClassRangesSize, cp);
}

uint32_t SimpleCaseFold(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const int64_t k = FindKey(internal::kFoldKeys, internal::kFoldKeysSize, cp);
  return k < 0 ? cp : internal::kFoldValues[k];
}

uint8_t CombiningClass(uint32_t cp) {
  if (cp > kMaxCodepoint) return 0;
  const uint32_t block = internal::kCombiningClassStage1[cp >> 8];
  return internal::kCombiningClassStage2[(block << 8) | (cp & 0xFF)];
}

const char* UnicodeVersion() { return internal::kUnicodeVersion; }

// Defined here, not in unicode_normalize.cc, so that it is linked whenever the rest of unicode.h
// is: in a static library a separate object file could be shadowed by another (weak) definition.
std::string Normalize(std::string_view utf8, NormalForm form) {
  return internal::NormalizeImpl(utf8, form);
}

std::string ToLower(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) {
    const size_t start = i;
    const uint32_t cp = NextCodepoint(utf8, i);
    if (cp == 0x03A3) {
      AppendUtf8(IsFinalSigma(utf8, start, i) ? 0x03C2 : 0x03C3, out);
    } else {
      AppendLower(cp, out);
    }
  }
  return out;
}

std::string ToLowerChars(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) AppendLower(NextCodepoint(utf8, i), out);
  return out;
}

}  // namespace astr::unicode
