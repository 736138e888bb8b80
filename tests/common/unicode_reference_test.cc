// Compares Normalize / ToLower / ToLowerChars with Python on a reference file written by
// tests/python/test_unicode_normalize.py (skipped unless ASTR_UNICODE_REFERENCE_FILE names one).
//
// File: {"texts": [str...], "<name>": [expected str or null per text], ...} for the names below;
// null means "not compared" (the reference cannot speak for that text).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/text/unicode/unicode.h"

namespace astr::unicode {
namespace {

constexpr int kMaxReportedMismatches = 8;

// Code points as "U+0041 U+030A ...", so that mismatches in invisible marks can be read.
std::string CodepointDump(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%sU+%04X", out.empty() ? "" : " ", NextCodepoint(s, i));
    out += buf;
  }
  return out;
}

struct Transform {
  const char* name;
  std::function<std::string(std::string_view)> fn;
};

TEST(UnicodeReferenceTest, MatchesPython) {
  const char* path = std::getenv("ASTR_UNICODE_REFERENCE_FILE");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set ASTR_UNICODE_REFERENCE_FILE (tests/python/test_unicode_normalize.py does)";
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  const nlohmann::json reference = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(reference.is_discarded()) << "invalid JSON in " << path;
  std::vector<std::string> texts;
  for (const auto& t : reference.at("texts")) texts.push_back(t.get<std::string>());

  const Transform transforms[] = {
      {"nfc", [](std::string_view s) { return Normalize(s, NormalForm::kNFC); }},
      {"nfd", [](std::string_view s) { return Normalize(s, NormalForm::kNFD); }},
      {"nfkc", [](std::string_view s) { return Normalize(s, NormalForm::kNFKC); }},
      {"nfkd", [](std::string_view s) { return Normalize(s, NormalForm::kNFKD); }},
      {"lower", [](std::string_view s) { return ToLower(s); }},
      {"lower_chars", [](std::string_view s) { return ToLowerChars(s); }},
  };
  size_t total_checked = 0, total_mismatched = 0;
  for (const Transform& t : transforms) {
    const auto& expected_all = reference.at(t.name);
    ASSERT_EQ(expected_all.size(), texts.size()) << t.name;
    size_t checked = 0;
    int mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (expected_all[i].is_null()) continue;
      const std::string expected = expected_all[i].get<std::string>();
      const std::string got = t.fn(texts[i]);
      ++checked;
      if (got == expected) continue;
      if (++mismatches <= kMaxReportedMismatches) {
        ADD_FAILURE() << t.name << " of text #" << i << "\n  text     " << CodepointDump(texts[i])
                      << "\n  expected " << CodepointDump(expected) << "\n  got      "
                      << CodepointDump(got);
      }
    }
    std::printf("%-4s %-11s %6zu texts, %4d mismatches\n", mismatches ? "FAIL" : "ok", t.name,
                checked, mismatches);
    total_checked += checked;
    total_mismatched += mismatches;
  }
  std::printf("checked %zu (transform, text) pairs, %zu mismatched\n", total_checked,
              total_mismatched);
  EXPECT_EQ(total_mismatched, 0u);
}

}  // namespace
}  // namespace astr::unicode
