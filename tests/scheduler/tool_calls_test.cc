// scheduler/front/tool_calls: each format's calls and content, written out by hand, whatever way
// the text is split into pushes (every split into two and three pieces, and one char at a time):
// the streamed deltas name a call before its arguments and join to the same calls and content.
#include "scheduler/front/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/chat/chat_template.h"
#include "tests/support/test_util.h"

namespace astr::front {
namespace {

struct Case {
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<ToolCall> calls;
  std::string named = "";
};

std::vector<Case> Cases() {
  using F = ToolCallFormat;
  return {
      {F::kHermes,
       "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
       "\"unit\": "
       "\"c\"}}\n</tool_call>",
       "Sure.",
       {{"get_weather", R"({"city": "Paris", "unit": "c"})"}}},
      {F::kHermes,
       "<tool_call>\n{\"name\": \"a\", \"arguments\": "
       "{}}\n</tool_call>\n<tool_call>\n{\"arguments\": "
       "{\"x\": [1, {\"y\": \"}\"}]}, \"name\": \"b\"}\n</tool_call>",
       "\n",
       {{"a", "{}"}, {"b", R"({"x": [1, {"y": "}"}]})"}}},
      {F::kHermes,
       "No tools needed: 1 < 2 and <b>bold</b>.",
       "No tools needed: 1 < 2 and <b>bold</b>.",
       {}},
      {F::kHermes, "<tool_call>\nnot json at all", "<tool_call>\nnot json at all", {}},
      {F::kHermes, "text <tool_ca", "text <tool_ca", {}},
      {F::kHermes, "<tool_call>{\"name\": \"f\"}</tool_call>", "", {{"f", "{}"}}},
      {F::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"a",
       "",
       {{"f", R"({"q": "a)"}}},  // cut by max_tokens: what came
      {F::kLlama3Json,
       "{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}",
       "",
       {{"f", R"({"a": [1, 2]})"}}},
      {F::kLlama3Json,
       "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": "
       "{\"k\": true}}",
       "",
       {{"f", "{}"}, {"g", R"({"k": true})"}}},
      {F::kLlama3Json, "  Hello {there}", "  Hello {there}", {}},
      {F::kLlama3Json, "{\"answer\": 42}", "{\"answer\": 42}", {}},
      {F::kMistral,
       "Calling.[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
       "\"arguments\": "
       "{\"k\": \"v\\\"]\"}}]",
       "Calling.",
       {{"a", "{}"}, {"b", R"({"k": "v\"]"})"}}},
      {F::kForced,
       "[{\"name\": \"f\", \"arguments\": {\"q\": \"}\"}}, {\"name\": \"g\", \"arguments\": 7}]",
       "",
       {{"f", R"({"q": "}"})"}, {"g", "7"}}},
      {F::kNamed, "{\"q\": 1}", "", {{"f", R"({"q": 1})"}}, "f"},
      {F::kNone,
       "<tool_call>{\"name\": \"f\"}</tool_call>",
       "<tool_call>{\"name\": \"f\"}</tool_call>",
       {}},
  };
}

// Pushes `pieces`, checks the deltas' order and returns what they join to.
ParsedToolCalls Stream(const Case& c, const std::vector<std::string>& pieces) {
  ToolCallStream s(c.format, c.named);
  std::vector<ToolCallDelta> deltas;
  for (const std::string& p : pieces) s.Push(p, &deltas);
  s.Finish(&deltas);
  ParsedToolCalls joined;
  for (const ToolCallDelta& d : deltas) {
    switch (d.kind) {
      case ToolCallDelta::Kind::kContent:
        joined.content += d.text;
        break;
      case ToolCallDelta::Kind::kStart:
        EXPECT_EQ(d.index, static_cast<int32_t>(joined.calls.size())) << c.text;
        joined.calls.push_back({d.text, ""});
        break;
      case ToolCallDelta::Kind::kArguments:
        // A call's arguments come after its name, and only for the latest call.
        EXPECT_EQ(d.index + 1, static_cast<int32_t>(joined.calls.size())) << c.text;
        if (!joined.calls.empty()) joined.calls.back().arguments += d.text;
        break;
    }
  }
  EXPECT_EQ(s.content(), joined.content);
  return joined;
}

void ExpectEqual(const ParsedToolCalls& got, const Case& c, const std::string& how) {
  EXPECT_EQ(got.content, c.content) << how << ": " << c.text;
  ASSERT_EQ(got.calls.size(), c.calls.size()) << how << ": " << c.text;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, c.calls[i].name) << how << ": " << c.text;
    EXPECT_EQ(got.calls[i].arguments, c.calls[i].arguments) << how << ": " << c.text;
  }
}

TEST(ToolCalls, WholeTextParses) {
  for (const Case& c : Cases()) {
    ExpectEqual(ParseToolCalls(c.format, c.text, c.named), c, "whole");
  }
}

TEST(ToolCalls, EverySplitStreamsTheSameCalls) {
  for (const Case& c : Cases()) {
    const std::string& t = c.text;
    ExpectEqual(Stream(c, {t}), c, "one push");
    for (size_t a = 0; a <= t.size(); ++a) {
      ExpectEqual(Stream(c, {t.substr(0, a), t.substr(a)}), c, "split at " + std::to_string(a));
      for (size_t b = a; b <= t.size(); b += 3) {
        ExpectEqual(Stream(c, {t.substr(0, a), t.substr(a, b - a), t.substr(b)}), c,
                    "split at " + std::to_string(a) + ", " + std::to_string(b));
      }
    }
    std::vector<std::string> chars;
    for (char ch : t) chars.emplace_back(1, ch);
    ExpectEqual(Stream(c, chars), c, "char by char");
  }
}

TEST(ToolCalls, FormatsFromTemplatesAndNames) {
  EXPECT_EQ(DetectToolCallFormat("{{- '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS]' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("<|python_tag|>"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ '<|im_start|>' + message.role }}"), ToolCallFormat::kNone);
  EXPECT_EQ(ParseToolCallFormat("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(ParseToolCallFormat("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ParseToolCallFormat("mistral"), ToolCallFormat::kMistral);
  EXPECT_EQ(ParseToolCallFormat("none"), ToolCallFormat::kNone);
  EXPECT_EQ(ParseToolCallFormat("qwen"), std::nullopt);
}

// What each real template writes for an assistant turn with tool calls, parsed back in the format
// detected from that template, is the calls it was given.
TEST(ToolCalls, TemplatesOwnFormatParsesBack) {
  const std::vector<std::pair<std::string, ToolCallFormat>> templates = {
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3Json},
  };
  using ojson = nlohmann::ordered_json;
  const ojson args = {{"city", "Paris"}, {"days", 3}};
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object", "properties": {"city":
      {"type": "string"}, "days": {"type": "integer"}}}}}])");
  for (const auto& [file, want] : templates) {
    ASTR_REQUIRE_SHARED_FILE(path, "templates/" + file);
    std::ifstream in(path);
    std::stringstream src;
    src << in.rdbuf();
    tok::ChatSpecialTokens special;
    special.bos = "<s>";
    special.eos = "</s>";
    auto tmpl = chat::ChatTemplate::FromString(src.str(), special, file);
    ASSERT_TRUE(tmpl.ok()) << file << ": " << tmpl.status().ToString();
    EXPECT_EQ(DetectToolCallFormat(tmpl->source()), want) << file;

    chat::ChatInputs before;
    before.tools = tools;
    before.messages.push_back({{"role", "user"}, {"content", "Weather in Paris?"}});
    before.add_generation_prompt = true;
    before.now_unix_seconds = 0;
    chat::ChatInputs with = before;
    with.add_generation_prompt = false;
    with.messages.push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls",
          ojson::array({{{"id", "abcdefghi"},
                         {"type", "function"},
                         {"function", {{"name", "get_weather"}, {"arguments", args}}}}})}});
    auto a = tmpl->Render(before);
    auto b = tmpl->Render(with);
    ASSERT_TRUE(a.ok() && b.ok()) << file << ": " << a.status().ToString() << " / "
                                  << b.status().ToString();
    ASSERT_EQ(b->rfind(*a, 0), 0u) << file << ": the turn does not extend the prompt";
    const std::string turn = b->substr(a->size());
    const ParsedToolCalls parsed = ParseToolCalls(want, turn);
    ASSERT_EQ(parsed.calls.size(), 1u) << file << ": " << turn;
    EXPECT_EQ(parsed.calls[0].name, "get_weather") << file;
    EXPECT_EQ(nlohmann::ordered_json::parse(parsed.calls[0].arguments), args)
        << file << ": " << turn;
    EXPECT_EQ(parsed.content.find("get_weather"), std::string::npos) << file << ": " << turn;
  }
}

}  // namespace
}  // namespace astr::front
