// Compares Regex::FindAll with Hugging Face `tokenizers` on a reference file written by
// tests/python/test_regex_splits.py (skipped unless ASTR_REGEX_REFERENCE_FILE names one).
//
// File: {"texts": [str...], "patterns": [{"pattern": str, "ends": [[int...] per text]}]} where
// `ends` are the UTF-8 byte offsets at which each piece of
// Split(Regex(pattern), "isolated").pre_tokenize_str(text) ends.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/text/regex/regex.h"
#include "common/text/unicode/unicode.h"

namespace astr {
namespace {

constexpr int kMaxReportedMismatches = 8;

// The piece ends `tokenizers` derives from the matches: matched pieces and the gaps between them
// (an empty match still cuts the text), empty pieces dropped.
std::vector<size_t> PieceEnds(const std::vector<regex::Regex::Match>& matches, size_t size) {
  std::vector<size_t> ends;
  size_t prev = 0;
  auto add = [&](size_t begin, size_t end) {
    if (end > begin) ends.push_back(end);
  };
  for (const regex::Regex::Match& m : matches) {
    if (prev != m.begin) add(prev, m.begin);
    add(m.begin, m.end);
    prev = m.end;
  }
  if (prev != size) add(prev, size);
  return ends;
}

// A C-like escaped rendering for messages: printable ASCII and UTF-8 as is, the rest as \xNN.
std::string Escape(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Pieces(std::string_view text, const std::vector<size_t>& ends) {
  std::string out = "[";
  size_t prev = 0;
  for (size_t k = 0; k < ends.size(); ++k) {
    if (k > 0) out += ", ";
    const size_t end = std::min(ends[k], text.size());
    out += Escape(text.substr(prev, end > prev ? end - prev : 0));
    prev = end;
  }
  return out + "]";
}

TEST(RegexReferenceTest, MatchesTokenizersSplits) {
  const char* path = std::getenv("ASTR_REGEX_REFERENCE_FILE");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set ASTR_REGEX_REFERENCE_FILE (tests/python/test_regex_splits.py does)";
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  const nlohmann::json reference = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(reference.is_discarded()) << "invalid JSON in " << path;
  std::vector<std::string> texts;
  for (const auto& t : reference.at("texts")) texts.push_back(t.get<std::string>());

  size_t total_checked = 0, total_mismatched = 0;
  for (const auto& entry : reference.at("patterns")) {
    const std::string pattern = entry.at("pattern").get<std::string>();
    StatusOr<regex::Regex> re = regex::Regex::Compile(pattern);
    if (!re.ok()) {
      ADD_FAILURE() << "pattern " << Escape(pattern)
                    << " does not compile: " << re.status().ToString();
      continue;
    }
    const auto& expected_all = entry.at("ends");
    ASSERT_EQ(expected_all.size(), texts.size());
    int mismatches = 0;
    std::vector<regex::Regex::Match> matches;
    for (size_t i = 0; i < texts.size(); ++i) {
      matches.clear();
      re->FindAll(texts[i], matches);
      const std::vector<size_t> got = PieceEnds(matches, texts[i].size());
      const std::vector<size_t> expected = expected_all[i].get<std::vector<size_t>>();
      ++total_checked;
      if (got == expected) continue;
      ++total_mismatched;
      if (++mismatches <= kMaxReportedMismatches) {
        ADD_FAILURE() << "pattern " << Escape(pattern) << "\n  text #" << i << " "
                      << Escape(texts[i]) << "\n  expected " << Pieces(texts[i], expected)
                      << "\n  got      " << Pieces(texts[i], got);
      }
    }
    std::string shown = Escape(pattern);
    if (shown.size() > 90) shown.resize(unicode::CompletePrefixLength(shown.substr(0, 90)));
    std::printf("%-4s %5zu texts, %4d mismatches: %s\n", mismatches ? "FAIL" : "ok", texts.size(),
                mismatches, shown.c_str());
  }
  std::printf("checked %zu (pattern, text) pairs, %zu mismatched\n", total_checked,
              total_mismatched);
  EXPECT_EQ(total_mismatched, 0u);
}

}  // namespace
}  // namespace astr
