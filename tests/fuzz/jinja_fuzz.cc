// Fuzz target: the Jinja engine (common/chat/jinja) on chat templates: parse, then render with a
// conversation. Input: the template source up to the first NUL byte. Without a NUL, the template
// renders a fixed conversation (system, user, an assistant tool call, its result, user) with tools,
// so that a real template from the corpus runs all its branches as it is. After a NUL: one flags
// byte, then messages separated by NUL bytes, each a role byte and its content.
//
// The render runs under a quarter of the default step budget and an eighth of the default byte
// and output limits (the depth limit is the default): the limits' code paths are the same, and a
// template that exhausts them ends in milliseconds instead of seconds under the sanitizers, so that
// the fuzzer spends its time on new templates. Checked: every frame a render makes is freed when it
// returns, refused or not (interpreter.h's Frame::live_count).
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/template.h"
#include "common/text/unicode/unicode.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"

namespace astr::fuzz {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kNul("\0", 1);
constexpr size_t kMaxMessages = 64;

ojson Tools() {
  return ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather of a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

ojson DefaultConversation() {
  return ojson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temperature\": 21}", "tool_call_id": "call_1"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks! And in Rome?"}]}])");
}

// One message from a segment: its first byte picks the role and the shape of the content.
ojson Message(std::string_view segment, uint8_t flags) {
  static constexpr const char* kRoles[] = {"system",    "user",    "assistant", "tool",
                                           "developer", "ipython", ""};
  const uint8_t head = segment.empty() ? 0 : static_cast<uint8_t>(segment[0]);
  // Requests reach the engine as JSON, whose strings are valid UTF-8.
  const std::string content = unicode::Utf8Lossy(segment.substr(segment.empty() ? 0 : 1));
  ojson m = {{"role", kRoles[head % std::size(kRoles)]}};
  if ((head & 0x10) != 0) {
    m["content"] = ojson::array({{{"type", "text"}, {"text", content}}});
  } else if ((head & 0x20) != 0) {
    m["content"] = nullptr;
  } else {
    m["content"] = content;
  }
  if ((head & 0x40) != 0) {
    ojson call = {{"id", "call_1"},
                  {"type", "function"},
                  {"function", {{"name", content}, {"arguments", {{"city", content}}}}}};
    m["tool_calls"] = ojson::array({call});
  }
  if ((flags & 0x08) != 0) m["reasoning_content"] = content;
  return m;
}

ojson Context(FuzzInput& in) {
  ojson context = ojson::object();
  uint8_t flags = 0x07;  // the default conversation: generation prompt, tools, special tokens
  if (in.empty()) {
    context["messages"] = DefaultConversation();
  } else {
    flags = in.Byte();
    ojson messages = ojson::array();
    while (!in.empty() && messages.size() < kMaxMessages) {
      messages.push_back(Message(in.Until(kNul), flags));
    }
    context["messages"] = std::move(messages);
  }
  context["add_generation_prompt"] = (flags & 0x01) != 0;
  if ((flags & 0x02) != 0) context["tools"] = Tools();
  if ((flags & 0x04) != 0) {
    context["bos_token"] = "<s>";
    context["eos_token"] = "</s>";
  }
  if ((flags & 0x10) != 0) context["enable_thinking"] = (flags & 0x20) != 0;
  return context;
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  astr::fuzz::InitQuietLogging((*argv)[0]);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::FuzzInput in(data, size);
  const std::string_view source = in.Until(fuzz::kNul);
  auto t = jinja::Template::Parse(source);
  if (!t.ok()) return 0;
  const nlohmann::ordered_json context = fuzz::Context(in);
  jinja::RenderOptions options;
  options.now_unix_seconds = 1'700'000'000;
  options.max_steps = jinja::kDefaultMaxSteps / 4;
  options.max_bytes = jinja::kDefaultMaxBytes / 8;
  options.max_output_bytes = jinja::kDefaultMaxOutputBytes / 8;
  const int64_t frames = jinja::Frame::live_count();
  (void)t->Render(context, options);
  if (jinja::Frame::live_count() != frames) __builtin_trap();
  return 0;
}
