// Fuzz target: the regex engine (common/text/regex): the input is a pattern, a NUL byte, and the
// text to search (without a NUL, the pattern searches itself). A pattern that compiles is run over
// the text with FindAll and with a RegexCursor. Checked, as regex.h promises: both give the same
// matches, and the matches are ordered, non-overlapping and inside the text.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/text/regex/regex.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  astr::fuzz::InitQuietLogging((*argv)[0]);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::FuzzInput in(data, size);
  const std::string_view pattern = in.Until(std::string_view("\0", 1));
  const std::string_view text = in.empty() ? pattern : in.Rest();
  auto re = regex::Regex::Compile(pattern);
  if (!re.ok()) return 0;
  std::vector<regex::Regex::Match> all;
  re->FindAll(text, all);
  size_t previous_end = 0;
  for (const regex::Regex::Match& m : all) {
    // Each search starts where the match before it ended.
    if (m.begin > m.end || m.end > text.size() || m.begin < previous_end) __builtin_trap();
    previous_end = m.end;
  }
  regex::RegexCursor cursor(*re, text);
  regex::Regex::Match m;
  size_t n = 0;
  while (cursor.Next(&m)) {
    if (n >= all.size() || m.begin != all[n].begin || m.end != all[n].end) __builtin_trap();
    ++n;
  }
  if (n != all.size()) __builtin_trap();
  return 0;
}
