// Tests of the per-render budget of the Jinja engine (common/chat/jinja/render_budget.h): templates
// that would run for hours, allocate gigabytes or nest values deep enough to overflow a recursive
// walk end with ResourceExhausted naming where in the template and which limit; every value and
// frame of such a render is freed; and real templates with a big conversation stay far inside the
// defaults. Each hostile template here crashed, hung or exhausted memory before the budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/chat/chat_template.h"
#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/parser.h"
#include "common/chat/jinja/render_budget.h"
#include "common/chat/jinja/template.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

using ojson = nlohmann::ordered_json;
using jinja::Frame;

struct Outcome {
  StatusOr<std::string> out;
  int64_t steps = 0;
  size_t peak_bytes = 0;
  size_t live_bytes = 0;  // after the render returned
  int64_t frames_left = 0;
};

// Renders through the Interpreter, to see its budget afterwards.
Outcome RenderWithBudget(const std::string& source, const jinja::InterpreterOptions& options,
                         const ojson& context = ojson::object()) {
  StatusOr<jinja::Program> program = jinja::ParseTemplate(source, {});
  if (!program.ok()) return {program.status()};
  const int64_t frames_before = Frame::live_count();
  jinja::Interpreter interp(*program, options);
  Outcome o{interp.Render(jinja::Value::FromJson(context))};
  o.steps = interp.budget().steps();
  o.peak_bytes = interp.budget().peak_bytes();
  o.live_bytes = interp.budget().live_bytes();
  o.frames_left = Frame::live_count() - frames_before;
  return o;
}

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// "line L, column C" of the first occurrence of `needle` in `source`, counted by hand.
std::string PositionOf(const std::string& source, const std::string& needle) {
  const size_t at = source.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  const size_t line_start = source.rfind('\n', at);
  const size_t column = line_start == std::string::npos ? at + 1 : at - line_start;
  const int line = 1 + static_cast<int>(std::count(source.begin(), source.begin() + at, '\n'));
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
}

// The render failed with ResourceExhausted, naming `limit`, and left nothing behind.
void ExpectRefused(const Outcome& o, const std::string& limit, const std::string& source) {
  ASSERT_FALSE(o.out.ok()) << source << " rendered " << o.out->size() << " bytes";
  EXPECT_EQ(o.out.status().code(), StatusCode::kResourceExhausted)
      << source << ": " << o.out.status().ToString();
  EXPECT_TRUE(Contains(o.out.status().message(), limit))
      << source << ": " << o.out.status().message();
  EXPECT_EQ(o.live_bytes, 0u) << source;
  EXPECT_EQ(o.frames_left, 0) << source;
}

jinja::InterpreterOptions SmallBudget() {
  jinja::InterpreterOptions options;
  options.max_bytes = size_t{4} << 20;
  options.max_steps = 200'000;
  return options;
}

// Doubling a namespace string 40 times asked for a terabyte and aborted the process with
// std::bad_alloc (or was killed by the OOM killer first). Now it stops at the byte limit, naming
// the concatenation that passed it, having held no more than about the limit.
TEST(JinjaBudgetTest, DoublingAStringStopsAtTheByteLimit) {
  for (const std::string op : {"~", "+"}) {
    const std::string source =
        "{% set ns = namespace(s='x') %}\n{% for i in range(40) %}{% set ns.s = ns.s " + op +
        " ns.s %}{% endfor %}{{ ns.s|length }}";
    jinja::InterpreterOptions options = SmallBudget();
    Outcome o = RenderWithBudget(source, options);
    ExpectRefused(o, std::to_string(options.max_bytes) + " bytes (max_bytes)", source);
    EXPECT_TRUE(Contains(o.out.status().message(), PositionOf(source, "ns.s " + op)))
        << o.out.status().message();
    EXPECT_LE(o.peak_bytes, 2 * options.max_bytes);
  }
}

// The same template at the default limits, through the public API.
TEST(JinjaBudgetTest, DoublingAStringFailsAtTheDefaults) {
  StatusOr<jinja::Template> t = jinja::Template::Parse(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s|length }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  StatusOr<std::string> out = t->Render(ojson::object());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(out.status().message(), "(max_bytes)")) << out.status().message();
}

// Loop iterations are steps, also when the body is empty: a 10^5 x 10^5 loop with an empty body
// was a few steps per outer iteration and ran for hours.
TEST(JinjaBudgetTest, LoopIterationsAreSteps) {
  const std::string nested =
      "a\n{% for i in range(100000) %}\n  {% for j in range(100000) %}{% endfor %}{% endfor %}";
  Outcome o = RenderWithBudget(nested, jinja::InterpreterOptions());
  ExpectRefused(o, std::to_string(jinja::kDefaultMaxSteps) + " steps (max_steps)", nested);
  // The inner loop (or the range it iterates), on line 3, is where the steps run out.
  EXPECT_TRUE(Contains(o.out.status().message(), "line 3, column ")) << o.out.status().message();

  // 100000 empty iterations were 3 steps (the loop, its call, its argument) before; now each is
  // one, plus the bytes of the loop object it makes.
  const std::string single = "{% for i in range(100000) %}{% endfor %}";
  jinja::InterpreterOptions options;
  options.max_steps = 50'000;
  ExpectRefused(RenderWithBudget(single, options), "50000 steps (max_steps)", single);
  options.max_steps = 1'000'000;
  Outcome fits = RenderWithBudget(single, options);
  ASSERT_TRUE(fits.out.ok()) << fits.out.status().ToString();
  EXPECT_GE(fits.steps, 100'000);
}

// Operations whose result is far larger than their operands are refused before they allocate:
// the peak stays near what the render held before them.
TEST(JinjaBudgetTest, HugeResultsAreRefusedBeforeAllocating) {
  const char* sources[] = {
      "{{ 'x' * 10**12 }}",
      "{{ [1] * 10**12 }}",
      // A list repeating one string shares it; the text joining it does not.
      "{{ (['x' * 100000] * 1000) | join }}",
      "{{ (['x' * 100000] * 1000) | join(', ') }}",
      "{{ ', '.join(['x' * 100000] * 1000) }}",
      "{{ ('x' * 100000) | replace('x', 'y' * 100000) }}",
      "{{ ('x' * 100000).replace('x', 'y' * 100000) }}",
      "{{ 'x' | center(10**12) }}",
      "{{ 'x'.ljust(10**12) }}",
      "{{ 'x'.center(10**12, '-') }}",
      "{{ '1'.zfill(10**12) }}",
      "{{ '%*d' % (10**12, 1) }}",
      "{{ '%.*f' % (10**12, 1.5) }}",
      "{{ ('a\\n' * 1000) | indent(10**9) }}",
      "{{ [1, [2]] | tojson(indent=10**12) }}",
      "{{ [1] | batch(10**12, 0) | list }}",
      "{{ [1] | slice(10**12) | list }}",
      "{{ ['x' * 100000] * 1000 }}",
      "{{ (['x' * 100000] * 1000) | tojson }}",
      "{{ (['x' * 100000] * 1000) | string | length }}",
      "{{ ('x' * 100000) ~ (['x' * 100000] * 1000) }}",
  };
  const jinja::InterpreterOptions options = SmallBudget();
  for (const char* source : sources) {
    Outcome o = RenderWithBudget(source, options);
    ExpectRefused(o, "(max_", source);
    EXPECT_LE(o.peak_bytes, 2 * options.max_bytes) << source;
  }
}

// Repeating an empty string or list is empty at once, whatever the count (a fuzz finding: the
// loop of 10^12 empty appends ran for hours within every budget, allocating nothing).
TEST(JinjaBudgetTest, RepeatingNothingIsImmediate) {
  const std::pair<const char*, const char*> cases[] = {
      {"[{{ '' * 10**12 }}]", "[]"},
      {"{{ ([] * 10**12) | length }}", "0"},
      {"{{ (() * 10**15) | length }}", "0"},
      {"{{ ('' | safe) * 10**12 }}.", "."},
  };
  for (const auto& [source, expected] : cases) {
    Outcome o = RenderWithBudget(source, SmallBudget());
    ASSERT_TRUE(o.out.ok()) << source << ": " << o.out.status().ToString();
    EXPECT_EQ(*o.out, expected) << source;
  }
}

// Output buffers count too: 100 nested macro calls each holding a 20 MB string in its output
// would hold 2 GB at once.
TEST(JinjaBudgetTest, NestedOutputBuffersShareTheByteLimit) {
  const std::string source =
      "{% macro f(n) %}{{ 'x' * 2000000 }}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}"
      "{{ f(100) | length }}";
  jinja::InterpreterOptions options = SmallBudget();
  options.max_steps = jinja::kDefaultMaxSteps;
  Outcome o = RenderWithBudget(source, options);
  ExpectRefused(o, "(max_bytes)", source);
  EXPECT_LE(o.peak_bytes, 2 * options.max_bytes);
}

// Values a template nests deeper than the limit are refused where they are built, so no repr,
// comparison, tojson or destruction recurses past it (200000 levels overflowed the stack).
TEST(JinjaBudgetTest, DeepTemplateBuiltValuesAreRefused) {
  const std::vector<std::string> sources = {
      // Deepening a namespace attribute: its values must stay below max_depth / 2.
      "{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% for j in range(200) %}"
      "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}{{ ns.x | tojson }}",
      "{% set ns = namespace(x=1) %}{% for i in range(100000) %}"
      "{% set ns.x = namespace(y=ns.x) %}{% endfor %}{{ ns.x }}",
      // A namespace inside itself would make repr recurse forever.
      "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
      "{% set ns = namespace() %}{% set ns.l = [1, {'a': ns}] %}{{ ns }}",
  };
  for (const std::string& source : sources) {
    ExpectRefused(RenderWithBudget(source, jinja::InterpreterOptions()), "(max_depth / 2)", source);
  }
  // Without a namespace: a recursive macro wrapping its argument three times a call. A small
  // limit keeps the recursion short (sanitizer builds stop macro recursion early).
  const std::string macro =
      "{% macro f(x, n) %}{% if n %}{{ f([[[x]]], n - 1) }}{% else %}{{ x == x }}{% endif %}"
      "{% endmacro %}{{ f(1, 50) }}";
  jinja::InterpreterOptions options;
  options.max_depth = 30;
  Outcome o = RenderWithBudget(macro, options);
  ExpectRefused(o, "nested deeper than 30 levels (max_depth)", macro);
  // x is 3k deep after k calls: at 30, the innermost [x] is one level too many.
  EXPECT_TRUE(Contains(o.out.status().message(), PositionOf(macro, "[x]")))
      << o.out.status().message();
}

// Nesting up to the limit is fine, as are namespaces holding ordinary values.
TEST(JinjaBudgetTest, NestingUpToTheLimitRenders) {
  const std::string source =
      "{% macro f(x, n) %}{% if n %}{{ f([[x]], n - 1) }}{% else %}{{ x | tojson | length }}"
      "{% endif %}{% endmacro %}{{ f(1, 15) }}|"
      "{% set ns = namespace(m=messages, n=0) %}{% set ns.n = ns.m | length %}{{ ns.n }}";
  ojson context = {{"messages", ojson::parse(R"([{"role": "user", "content": [[[["x"]]]]}])")}};
  jinja::InterpreterOptions options;
  options.max_depth = 30;
  Outcome o = RenderWithBudget(source, options, context);
  ASSERT_TRUE(o.out.ok()) << o.out.status().ToString();
  // [[...[1]...]] 30 deep is 30 '[' + '1' + 30 ']'; the messages are 6 deep, below 30 / 2.
  EXPECT_EQ(*o.out, "61|1");
  EXPECT_EQ(o.live_bytes, 0u);
}

std::string BigBody(size_t bytes) {
  std::string body;
  while (body.size() < bytes) body += "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ";
  body.resize(bytes);
  return body;
}

// Every shared template renders a 1000-message conversation of 1 KB messages at the default
// limits exactly as with no practical limit, using a small part of each budget.
TEST(JinjaBudgetTest, BigConversationsFitTheDefaultsWithRoomToSpare) {
  const std::string dir = testing::SharedDir() + "/templates";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "shared templates missing: " << dir;
  const std::string body = BigBody(1000);
  ojson context = ojson::parse(R"({"add_generation_prompt": true, "bos_token": "<s>",
    "eos_token": "</s>", "tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Weather of a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})");
  ojson messages = ojson::array();
  for (int i = 0; i < 1001; ++i) {
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", body}});
  }
  context["messages"] = messages;
  jinja::InterpreterOptions unlimited;
  unlimited.now_unix_seconds = 0;
  unlimited.max_steps = int64_t{1} << 40;
  unlimited.max_bytes = size_t{1} << 40;
  unlimited.max_output_bytes = size_t{1} << 40;
  jinja::InterpreterOptions defaults;
  defaults.now_unix_seconds = 0;
  int rendered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path());
    std::stringstream source;
    source << in.rdbuf();
    Outcome reference = RenderWithBudget(source.str(), unlimited, context);
    // Some templates need other inputs (e.g. `functions`); they fail the same way either way.
    if (!reference.out.ok()) continue;
    Outcome o = RenderWithBudget(source.str(), defaults, context);
    const std::string name = entry.path().filename().string();
    ASSERT_TRUE(o.out.ok()) << name << ": " << o.out.status().ToString();
    EXPECT_EQ(*o.out, *reference.out) << name;
    EXPECT_GT(o.out->size(), 1000u * body.size()) << name;
    EXPECT_LT(o.steps, jinja::kDefaultMaxSteps / 10) << name;
    EXPECT_LT(o.peak_bytes, jinja::kDefaultMaxBytes / 10) << name;
    EXPECT_EQ(o.live_bytes, 0u) << name;
    EXPECT_EQ(o.frames_left, 0) << name;
    ++rendered;
  }
  EXPECT_GE(rendered, 10);
}

// Temporaries give their bytes back: a loop that builds and drops a 1 MB string 100 times
// allocates 100 MB in all but holds 1 MB at a time, well inside a 4 MB limit.
TEST(JinjaBudgetTest, FreedValuesGiveTheirBytesBack) {
  const std::string source =
      "{% for i in range(100) %}{% set s = 'x' * 1000000 %}{% endfor %}{{ 'done' }}";
  Outcome o = RenderWithBudget(source, SmallBudget());
  ASSERT_TRUE(o.out.ok()) << o.out.status().ToString();
  EXPECT_EQ(*o.out, "done");
  EXPECT_GE(o.peak_bytes, 1000000u);
  EXPECT_LT(o.peak_bytes, 3000000u);
  EXPECT_EQ(o.live_bytes, 0u);
}

// Builtins that loop over large values without evaluating template expressions stop too.
TEST(JinjaBudgetTest, QuadraticBuiltinsRunOutOfSteps) {
  const char* sources[] = {
      "{{ (range(100000) | list) | unique | list | length }}",
      "{% set big = 'x' * 1000000 %}{% for i in range(100000) %}{{ big | wordcount }}"
      "{% endfor %}",
      "{% set big = 'ab ' * 300000 %}{% for i in range(100000) %}{{ big.upper() | length }}"
      "{% endfor %}",
      "{{ ('<a>' * 300000) | striptags }}",
  };
  jinja::InterpreterOptions options;
  options.max_steps = 200'000;
  for (const char* source : sources)
    ExpectRefused(RenderWithBudget(source, options), "steps", source);
}

// A model whose template always runs over still loads (the scheduler then serves its text and
// token requests); only rendering a conversation fails, naming the template file.
TEST(JinjaBudgetTest, ATemplateOverBudgetStillLoads) {
  StatusOr<chat::ChatTemplate> tmpl =
      chat::ChatTemplate::FromString("{{ 'x' * 10**12 }}", {}, "big.jinja");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  chat::ChatInputs inputs;
  inputs.messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  StatusOr<std::string> out = tmpl->Render(inputs);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(out.status().message(), "big.jinja: line 1, column "))
      << out.status().message();
}

// `astr chat-template` on a messages file nested 50000 deep gives a clear error.
TEST(JinjaBudgetTest, ChatTemplateCliRefusesDeeplyNestedMessages) {
  const std::string dir = testing::TempDir("jinja_budget_cli");
  const std::string messages = dir + "/messages.json";
  const std::string tmpl = dir + "/t.jinja";
  {
    std::ofstream out(messages);
    out << R"([{"role": "user", "content": )" << std::string(50000, '[') << std::string(50000, ']')
        << "}]";
    std::ofstream t(tmpl);
    t << "{{ messages | tojson }}";
  }
  testing::CommandResult r =
      testing::RunCommand(testing::BinDir() + "/astr chat-template --template " + tmpl +
                          " --messages " + messages + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "JSON nested deeper than 128 levels")) << r.out;
}

}  // namespace
}  // namespace astr
