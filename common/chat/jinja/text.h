// Python `str` semantics over UTF-8 bytes: code point indexing, whitespace, case mapping, line
// splitting. Template values keep their text as UTF-8 `std::string`s; Python counts, slices and
// strips by code point, so every length / index operation goes through these helpers.
//
// Case mapping covers ASCII, Latin-1, Latin Extended-A/Additional, Greek, Cyrillic, Armenian and
// fullwidth Latin (what chat templates meet in practice); other scripts are left unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace astr::jinja::text {

// Decodes UTF-8; a byte that does not start a valid sequence becomes one code point of its own
// value (so no input is ever rejected and Encode(Decode(s)) == s for valid UTF-8).
std::u32string Decode(std::string_view s);
std::string Encode(std::u32string_view s);
// The code point starting at byte `pos` of `s`; `*len` receives its byte length. An invalid byte
// decodes to its own value with length 1.
char32_t DecodeAt(std::string_view s, size_t pos, size_t* len);
void AppendUtf8(std::string* out, char32_t c);

bool IsAscii(std::string_view s);
// Number of code points (Python len()).
size_t Length(std::string_view s);

// Python str.isspace() for one code point.
bool IsSpace(char32_t c);
// Python str.isprintable() for one code point (approximate outside the BMP's common blocks).
bool IsPrintable(char32_t c);
// True when the code point has an upper/lower case partner (Python's "cased").
bool IsCased(char32_t c);
bool IsUpperChar(char32_t c);
bool IsLowerChar(char32_t c);
bool IsAlpha(char32_t c);
bool IsDigit(char32_t c);

std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
// Python str.capitalize(): first code point upper, the rest lower.
std::string Capitalize(std::string_view s);
// Python str.title().
std::string TitleWords(std::string_view s);
// Python str.swapcase().
std::string SwapCase(std::string_view s);

// Python str.strip([chars]) / lstrip / rstrip. `chars` == nullptr strips whitespace.
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right);
// Python str.split(sep, maxsplit) / rsplit. `sep` == nullptr splits on whitespace runs.
std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit,
                               bool from_right);
// Python str.splitlines(keepends).
std::vector<std::string> SplitLines(std::string_view s, bool keepends);
// Python str.replace(old, new, count); count < 0 replaces all.
std::string Replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count);
// Length in bytes of Replace(s, old_text, new_text, count), without building it.
size_t ReplacedSize(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count);
// Python str.find / rfind by code point; -1 when absent.
int64_t Find(std::string_view s, std::string_view sub, bool from_right);
// Python str.count(sub).
int64_t Count(std::string_view s, std::string_view sub);

}  // namespace astr::jinja::text
