#include "common/base/json_depth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace astr {
namespace {

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(JsonDepthTest, CountsArraysAndObjects) {
  EXPECT_EQ(JsonNestingDepth("1"), 0);
  EXPECT_EQ(JsonNestingDepth("[]"), 1);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": [[]]}], "c": {}})"), 5);
  EXPECT_EQ(JsonNestingDepth(Nested(kMaxJsonDepth)), kMaxJsonDepth);
  // Counting stops one level past the limit.
  EXPECT_EQ(JsonNestingDepth(Nested(50'000)), kMaxJsonDepth + 1);
}

TEST(JsonDepthTest, SkipsBracketsInsideStrings) {
  const std::string brackets(10'000, '[');
  EXPECT_EQ(JsonNestingDepth("[\"" + brackets + "\"]"), 1);
  // An escaped quote does not end the string; an escaped backslash does not escape the quote.
  EXPECT_EQ(JsonNestingDepth(R"(["\"[[[", "\\", [2]])"), 2);
  EXPECT_EQ(JsonNestingDepth(R"({"k\\": [[]], "x": "]]]"})"), 3);
}

TEST(JsonDepthTest, AgreesWithTheParserOnValidDocuments) {
  // The same depth as walking the parsed value (the parser sees strings properly).
  for (const char* text : {R"([[1], {"a": {"b": "[{"}}])", R"({"x": "\"]", "y": [[[[]]]]})",
                           R"("just [ a string")", R"([[], [[], [[]]]])"}) {
    const nlohmann::json j = nlohmann::json::parse(text);
    std::function<int(const nlohmann::json&)> depth = [&](const nlohmann::json& v) {
      if (!v.is_structured()) return 0;
      int deepest = 0;
      for (const auto& item : v) deepest = std::max(deepest, depth(item));
      return deepest + 1;
    };
    EXPECT_EQ(JsonNestingDepth(text), depth(j)) << text;
  }
}

TEST(JsonDepthTest, CheckNamesTheFieldAndTheByte) {
  EXPECT_TRUE(CheckJsonDepth(Nested(kMaxJsonDepth), "tools_json").ok());
  const Status s = CheckJsonDepth("{\"a\": " + Nested(50'000), "tools_json");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tools_json: JSON nested deeper than 128 levels (at byte " +
                             std::to_string(6 + kMaxJsonDepth - 1) + ")");
  EXPECT_FALSE(CheckJsonDepth(Nested(5, '{', '}'), "f", 4).ok());
  EXPECT_TRUE(CheckJsonDepth(Nested(4, '{', '}'), "f", 4).ok());
}

}  // namespace
}  // namespace astr
