// Tool calls in generated text (docs/tools.md): the formats of the chat templates astr renders,
// parsed incrementally, so that streamed deltas (the name first, then fragments of the arguments)
// join to the same calls as the whole text parsed at once, however the text is split.
//
//   hermes       Hermes / Qwen: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeated
//   llama3_json  Llama 3.x: the whole output is {"name": ..., "parameters": {...}} (optionally
//   after
//                <|python_tag|>; several separated by ';')
//   mistral      Mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]
//   forced       tool_choice "required": the output is a JSON array of {"name", "arguments"}
//                (the constraint makes it so, whatever the model's own format)
//   named        tool_choice naming a function: the output is its arguments object
//
// Text outside the calls is content. A call's arguments are the exact text of its JSON value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace astr::front {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral, kForced, kNamed };

// "hermes", "llama3_json", "mistral", "none" (flag values); nullopt for anything else.
std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name);
// The format a chat template's source writes its tool calls in (kNone when it shows none).
ToolCallFormat DetectToolCallFormat(std::string_view template_source);

struct ToolCallDelta {
  enum class Kind { kContent, kStart, kArguments };
  Kind kind = Kind::kContent;
  int32_t index = 0;  // the call's (kStart, kArguments)
  std::string text;   // content, the name (kStart), or a fragment of the arguments
};

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text
};

class ToolCallStream {
 public:
  // `named`: the function of kNamed.
  explicit ToolCallStream(ToolCallFormat format, std::string named = "");
  ~ToolCallStream();

  // Appends what `text` makes final to *out (content is held back while it may begin a marker).
  void Push(std::string_view text, std::vector<ToolCallDelta>* out);
  // The end of the text: everything held back. Text that began like a call but is not one (an
  // unfinished or malformed call) comes out as content.
  void Finish(std::vector<ToolCallDelta>* out);

  // The calls and the content (what the kContent deltas joined) so far; whole after Finish.
  const std::vector<ToolCall>& calls() const { return calls_; }
  const std::string& content() const { return content_; }

 private:
  struct Scanner;
  void Emit(ToolCallDelta d, std::vector<ToolCallDelta>* out);
  void Run(bool at_end, std::vector<ToolCallDelta>* out);

  ToolCallFormat format_;
  std::string named_;
  std::string buf_;  // text not consumed yet
  std::unique_ptr<Scanner> scan_;
  int state_ = 0;
  std::vector<ToolCall> calls_;
  std::string content_;
  std::string pending_;  // a call's text since its start (reverted to content if it fails)
};

// Whole text at once (unary responses), as Push + Finish.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text,
                               const std::string& named = "");

}  // namespace astr::front
