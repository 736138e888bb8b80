#include "common/chat/jinja/text.h"

#include <algorithm>

#include "common/chat/jinja/render_budget.h"

namespace astr::jinja::text {
namespace {

// Simple (one-to-one) lower -> upper mapping; returns c when it has none.
char32_t SimpleUpper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c == 0xB5) return 0x39C;
  if (c == 0xFF) return 0x178;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? c - 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) {
    return (c & 1) ? c - 1 : c;
  }
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return (c & 1) ? c - 1 : c;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

// Simple upper -> lower mapping.
char32_t SimpleLower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? c : c + 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) {
    return (c & 1) ? c : c + 1;
  }
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return (c & 1) ? c : c + 1;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

void AppendUpper(std::u32string* out, char32_t c) {
  if (c == 0xDF) {  // German sharp s upper-cases to "SS".
    out->append(U"SS");
    return;
  }
  out->push_back(SimpleUpper(c));
}

// Title case of one code point: upper case, except that the sharp s becomes "Ss".
void AppendTitle(std::u32string* out, char32_t c) {
  if (c == 0xDF) {
    out->append(U"Ss");
    return;
  }
  out->push_back(SimpleUpper(c));
}

bool InSet(char32_t c, const std::u32string& set) { return set.find(c) != std::u32string::npos; }

// Code point offsets -> byte offsets helpers for find().
size_t ByteToCodepointIndex(std::string_view s, size_t byte_pos) {
  return Length(s.substr(0, byte_pos));
}

}  // namespace

char32_t DecodeAt(std::string_view s, size_t pos, size_t* len) {
  unsigned char b = static_cast<unsigned char>(s[pos]);
  int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  *len = 1;
  if (n == 0 || pos + n > s.size()) return b;
  char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n; ++k) {
    unsigned char cb = static_cast<unsigned char>(s[pos + k]);
    if ((cb & 0xC0) != 0x80) return b;
    cp = (cp << 6) | (cb & 0x3F);
  }
  *len = static_cast<size_t>(n);
  return cp;
}

std::u32string Decode(std::string_view s) {
  // Most text work (case mapping, stripping, splitting, slicing non-ASCII text) decodes first:
  // it is charged here, in proportion to the text, to the render running (if any).
  SpendText(s.size());
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 1;
    out.push_back(DecodeAt(s, i, &len));
    i += len;
  }
  return out;
}

void AppendUtf8(std::string* out, char32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Encode(std::u32string_view s) {
  SpendText(s.size());
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(&out, c);
  return out;
}

bool IsAscii(std::string_view s) {
  SpendBytes(s.size());  // the ASCII fast paths of most text work start here
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t Length(std::string_view s) {
  if (IsAscii(s)) return s.size();
  return Decode(s).size();
}

bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool IsPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c < 0x300) return true;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x8E2 ||
      c == 0x180E || c == 0x1680) {
    return false;
  }
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000) {
    return false;
  }
  if ((c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF0 && c <= 0xFFFB) || c == 0xFFFE ||
      c == 0xFFFF) {
    return false;
  }
  if (c == 0x110BD || (c >= 0x1D173 && c <= 0x1D17A) || (c >= 0xE0000 && c <= 0xE0FFF) ||
      c >= 0xF0000) {
    return false;
  }
  return true;
}

bool IsCased(char32_t c) { return SimpleUpper(c) != c || SimpleLower(c) != c || c == 0xDF; }
bool IsUpperChar(char32_t c) { return SimpleLower(c) != c; }
bool IsLowerChar(char32_t c) { return SimpleUpper(c) != c || c == 0xDF; }

bool IsAlpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (IsCased(c)) return true;
  // CJK ideographs, kana, hangul: letters without case.
  return (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x9FFF) ||
         (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x20000 && c <= 0x2FFFF);
}

bool IsDigit(char32_t c) { return c >= '0' && c <= '9'; }

std::string Upper(std::string_view s) {
  if (IsAscii(s)) {
    SpendBytes(s.size());
    std::string out(s);
    for (char& c : out) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    }
    return out;
  }
  std::u32string out;
  for (char32_t c : Decode(s)) AppendUpper(&out, c);
  return Encode(out);
}

std::string Lower(std::string_view s) {
  if (IsAscii(s)) {
    SpendBytes(s.size());
    std::string out(s);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return out;
  }
  std::u32string cps = Decode(s);
  for (char32_t& c : cps) c = SimpleLower(c);
  return Encode(cps);
}

std::string Capitalize(std::string_view s) {
  std::u32string cps = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      AppendTitle(&out, cps[i]);
    } else {
      out.push_back(SimpleLower(cps[i]));
    }
  }
  return Encode(out);
}

std::string TitleWords(std::string_view s) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t c : Decode(s)) {
    if (prev_cased) {
      out.push_back(SimpleLower(c));
    } else {
      AppendTitle(&out, c);
    }
    prev_cased = IsCased(c);
  }
  return Encode(out);
}

std::string SwapCase(std::string_view s) {
  std::u32string out;
  for (char32_t c : Decode(s)) {
    if (IsUpperChar(c)) {
      out.push_back(SimpleLower(c));
    } else {
      AppendUpper(&out, c);
    }
  }
  return Encode(out);
}

std::string Strip(std::string_view s, const std::string* chars, bool left, bool right) {
  if (IsAscii(s) && (chars == nullptr || IsAscii(*chars))) {
    // Byte offsets are code point offsets; only the stripped ends are looked at.
    auto strip_char = [&](char c) {
      return chars == nullptr ? IsSpace(static_cast<unsigned char>(c))
                              : chars->find(c) != std::string::npos;
    };
    size_t begin = 0, end = s.size();
    if (left) {
      while (begin < end && strip_char(s[begin])) ++begin;
    }
    if (right) {
      while (end > begin && strip_char(s[end - 1])) --end;
    }
    return std::string(s.substr(begin, end - begin));
  }
  std::u32string cps = Decode(s);
  const std::u32string_view cps_view = cps;
  std::u32string set = chars != nullptr ? Decode(*chars) : std::u32string();
  auto strip_char = [&](char32_t c) { return chars == nullptr ? IsSpace(c) : InSet(c, set); };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip_char(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_char(cps[end - 1])) --end;
  }
  return Encode(cps_view.substr(begin, end - begin));
}

std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit,
                               bool from_right) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    if (from_right) {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t pos = end < sep->size() ? std::string_view::npos : s.rfind(*sep, end - sep->size());
        if (pos == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos + sep->size(), end - pos - sep->size()));
        end = pos;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
      return parts;
    }
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t pos = s.find(*sep, start);
      if (pos == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, pos - start));
      start = pos + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  // Whitespace split: runs of whitespace separate, no empty strings.
  std::u32string cps = Decode(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsSpace(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      std::u32string rest = cps.substr(i);
      if (from_right) std::reverse(rest.begin(), rest.end());
      parts.push_back(Encode(rest));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsSpace(cps[j])) ++j;
    std::u32string word = cps.substr(i, j - i);
    if (from_right) std::reverse(word.begin(), word.end());
    parts.push_back(Encode(word));
    i = j;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> SplitLines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  std::u32string cps = Decode(s);
  const std::u32string_view cps_view = cps;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    char32_t c = cps[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                    c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (c == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
    lines.push_back(Encode(cps_view.substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) lines.push_back(Encode(cps_view.substr(start)));
  return lines;
}

std::string Replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` between every code point (and at both ends).
    std::u32string cps = Decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      if (i < cps.size()) AppendUtf8(&out, cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t pos = s.find(old_text, start);
    if (pos == std::string_view::npos) break;
    out.append(s.substr(start, pos - start));
    out.append(new_text);
    start = pos + old_text.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

size_t ReplacedSize(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count) {
  SpendBytes(s.size());  // the search, made twice (here and by Replace)
  int64_t n = Count(s, old_text);
  if (count >= 0 && count < n) n = count;
  const size_t k = static_cast<size_t>(n);
  // k * old_text.size() <= s.size(), so only the insertion can overflow.
  size_t inserted;
  if (__builtin_mul_overflow(k, new_text.size(), &inserted)) return SIZE_MAX;
  return s.size() - k * old_text.size() + inserted;
}

int64_t Find(std::string_view s, std::string_view sub, bool from_right) {
  size_t pos = from_right ? s.rfind(sub) : s.find(sub);
  if (pos == std::string_view::npos) return -1;
  return static_cast<int64_t>(ByteToCodepointIndex(s, pos));
}

int64_t Count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(Length(s)) + 1;
  int64_t n = 0;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sub, start);
    if (pos == std::string_view::npos) break;
    ++n;
    start = pos + sub.size();
  }
  return n;
}

}  // namespace astr::jinja::text
