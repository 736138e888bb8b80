// Unit tests of the Jinja2 engine (common/jinja) and the chat-template loader
// (common/chat/chat_template.h). Expected outputs follow jinja2's semantics as configured by
// transformers (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks); they were worked out by
// hand. tests/python/test_chat_templates.py compares the CLI with Python jinja2 itself.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/chat/chat_template.h"
#include "common/chat/jinja/interpreter.h"
#include "common/chat/jinja/template.h"
#include "common/model/gguf.h"
#include "tests/support/test_util.h"

namespace astr {
namespace {

using ojson = nlohmann::ordered_json;
using jinja::Frame;

const char* const kContext = R"({
  "s": "Hello World", "n": 5, "f": 2.5, "lst": [3, 1, 2], "words": ["b", "A", "c", "a"],
  "d": {"b": 2, "a": 1}, "people": [{"name": "Ann", "age": 30}, {"name": "bob", "age": 25}],
  "none": null, "t": true, "empty": [], "nested": {"x": {"y": [10, 20]}}, "u": "héllo 東京"
})";

StatusOr<std::string> Render(const std::string& source, const ojson& context,
                             const jinja::RenderOptions& options = {},
                             jinja::Options parse_options = {}) {
  ASTR_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source, parse_options));
  return t.Render(context, options);
}

struct Case {
  const char* source;
  const char* expected;
};

void ExpectRenders(const std::vector<Case>& cases) {
  const ojson context = ojson::parse(kContext);
  for (const Case& c : cases) {
    StatusOr<std::string> out = Render(c.source, context);
    ASSERT_TRUE(out.ok()) << c.source << "\n" << out.status().ToString();
    EXPECT_EQ(*out, c.expected) << c.source;
  }
}

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// trim_blocks, lstrip_blocks, `-` / `+` markers, comments, raw, newlines.
TEST(JinjaRenderTest, WhitespaceControl) {
  ExpectRenders({
      {"a\n{% if true %}\nb\n{% endif %}\nc", "a\nb\nc"},
      {"  {% if true %}x{% endif %}  \ny", "x  \ny"},
      {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
      {"{{ 'x' }}  \n  {{ 'y' }}", "x  \n  y"},
      {"  {%+ if true %}x{% endif %}", "  x"},
      {"{% if true +%}\nx{% endif %}", "\nx"},
      {"a {# comment #} b", "a  b"},
      {"  {# c #}\nx", "x"},
      {"{% raw %}{{ x }}{% endraw %}", "{{ x }}"},
      {"line\n", "line"},
      {"a\r\nb\rc", "a\nb\nc"},
      {" x {{- ' y ' -}} z ", " x y z "},
      {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}", "  1\n  2\n"},
  });
}

// if / elif / else and the inline if-expression.
TEST(JinjaRenderTest, Conditionals) {
  ExpectRenders({
      {"{% if n > 10 %}big{% elif n > 3 %}mid{% else %}small{% endif %}", "mid"},
      {"{% if none %}a{% elif empty %}b{% else %}c{% endif %}", "c"},
      {"{% if s and not none %}yes{% endif %}", "yes"},
      {"{{ 'a' if t else 'b' }}{{ 'c' if none else 'd' }}{{ 'e' if false }}", "ad"},
  });
}

// loop variables, else, filtering, unpacking, break / continue, nesting.
TEST(JinjaRenderTest, ForLoops) {
  ExpectRenders({
      {"{% for x in lst %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ "
       "loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
       "10TrueFalse332;21FalseFalse321;32FalseTrue310;"},
      {"{% for x in lst %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", "-1|3-2|1-|"},
      {"{% for x in lst %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba"},
      {"{% for x in empty %}x{% else %}none{% endfor %}", "none"},
      {"{% for x in lst if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}", "3/2 2/2 "},
      {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "b=2;a=1;"},
      {"{% for k in d %}{{ k }}{% endfor %}", "ba"},
      {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break "
       "%}{% endif %}{{ x }}{% endfor %}",
       "0134"},
      {"{% for c in 'héllo' %}{{ c }}.{% endfor %}", "h.é.l.l.o."},
      {"{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ "
       "loop.index }}|{% endfor %}",
       "1x1 1y2 1|2x1 2y2 2|"},
      {"{% for x in lst %}{{ loop.changed(x > 2) }}{% endfor %}", "TrueTrueFalse"},
  });
}

// set, block set, tuple unpacking, namespace(), with, loop scoping.
TEST(JinjaRenderTest, AssignmentAndScope) {
  ExpectRenders({
      {"{% set x = 1 %}{% for i in lst %}{% set x = i %}{% endfor %}{{ x }}", "1"},
      {"{% set ns = namespace(x=1) %}{% for i in lst %}{% set ns.x = ns.x + i %}{% endfor %}{{ "
       "ns.x }}",
       "7"},
      {"{% set a, b = 'xy' %}{{ b }}{{ a }}", "yx"},
      {"{% set t2 = 1, 2 %}{{ t2 }}", "(1, 2)"},
      {"{% set x %}a{{ n }}b{% endset %}{{ x }}|{{ x | length }}", "a5b|3"},
      {"{% set x | upper %}abc{% endset %}{{ x }}", "ABC"},
      {"{% if true %}{% set y = 2 %}{% endif %}{{ y }}", "2"},
      {"{% with a = 1 %}{{ a }}{% endwith %}[{{ a }}]", "1[]"},
  });
}

// defaults, keyword arguments, varargs / kwargs, recursion, caller, late binding.
TEST(JinjaRenderTest, RenderFreesEveryFrame) {
  // A macro kept in the scope it closes over is a reference cycle (frame -> macro -> frame); so is
  // one stored in a namespace of the outer scope. Both must be freed when the render ends, on
  // success and on error.
  const int64_t before = Frame::live_count();
  const char* kSources[] = {
      "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) }}",
      "{% for i in range(3) %}{% macro inner() %}{{ i }}{% endmacro %}{{ inner() }}{% endfor %}",
      "{% set ns = namespace(f=none) %}{% for i in range(2) %}{% macro g() %}{{ i }}{% endmacro %}"
      "{% set ns.f = g %}{% endfor %}{{ ns.f() }}",
      "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",  // fails: recursion limit
  };
  for (const char* source : kSources) {
    (void)Render(source, ojson::object());
    EXPECT_EQ(Frame::live_count(), before) << source;
  }
  auto out = Render(kSources[2], ojson::object());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "1");
  EXPECT_FALSE(Render(kSources[3], ojson::object()).ok());
}

TEST(JinjaRenderTest, Macros) {
  ExpectRenders({
      {"{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('A') }}{{ m('A', 'C') }}{{ "
       "m(b='D', a='E') }}",
       "ABACED"},
      {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", "[]"},
      {"{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
       "(1, 2){'k': 3}"},
      {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% "
       "endmacro %}{{ fact(5) }}",
       "120"},
      {"{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}",
       "<body>"},
      {"{% macro m() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ m() }}", "L"},
  });
}

// str / dict methods called from templates.
TEST(JinjaRenderTest, PythonMethods) {
  ExpectRenders({
      {"{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}",
       "x|a|x|x"},
      {"{{ 'a,b,c'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'a,b,c'.split(',', 1) }}",
       "['a', 'b', 'c']|['a', 'b', 'c']|['a', 'b,c']"},
      {"{{ s.startswith('He') }}{{ s.endswith('x') }}{{ s.upper() }}{{ s.lower() }}",
       "TrueFalseHELLO WORLDhello world"},
      {"{{ 'hello world'.title() }}|{{ s.replace('o', '0') }}|{{ '{} is {}'.format('x', 1) }}",
       "Hello World|Hell0 W0rld|x is 1"},
      {"{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'dflt') }}", "1Nonedflt"},
      {"{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}",
       "['b', 'a'][2, 1][('b', 2), ('a', 1)]"},
  });
}

// jinja2's built-in filters and transformers' tojson.
TEST(JinjaRenderTest, Filters) {
  ExpectRenders({
      {"{{ s | length }}{{ lst | count }}{{ u | length }}", "1138"},
      {"{{ '  a  ' | trim }}|{{ s | upper }}|{{ s | lower }}|{{ 'hello big-world' | title }}|{{ "
       "'hELLO' | capitalize }}",
       "a|HELLO WORLD|hello world|Hello Big-World|Hello"},
      {"{{ x | default('dv') }}{{ none | default('dv') }}{{ '' | d('e', true) }}", "dvNonee"},
      {"{{ lst | join(', ') }}|{{ people | join(';', attribute='name') }}", "3, 1, 2|Ann;bob"},
      {"{{ lst | first }}{{ lst | last }}{{ empty | first }}", "32"},
      {"{{ people | map(attribute='name') | list }}|{{ words | map('upper') | join }}",
       "['Ann', 'bob']|BACA"},
      {"{{ lst | select('odd') | list }}{{ lst | reject('odd') | list }}", "[3, 1][2]"},
      {"{{ people | selectattr('age', 'gt', 26) | map(attribute='name') | list }}{{ people | "
       "rejectattr('age', 'gt', 26) | map(attribute='name') | first }}",
       "['Ann']bob"},
      {"{{ lst | list }}{{ 'ab' | list }}{{ 42 | string }}{{ '7' | int + 1 }}{{ '2.5' | float }}",
       "[3, 1, 2]['a', 'b']4282.5"},
      {"{{ d | tojson }}|{{ lst | tojson(indent=2) }}",
       "{\"b\": 2, \"a\": 1}|[\n  3,\n  1,\n  2\n]"},
      {"{{ d | items | list }}|{{ d | dictsort }}", "[('b', 2), ('a', 1)]|[('a', 1), ('b', 2)]"},
      {"{{ s | replace('l', 'L') }}|{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}",
       "HeLLo WorLd|a\n  b|  a\n  b"},
      {"{{ '<b>' | safe }}{{ '<b>' | e }}{{ '<b>' | escape }}", "<b>&lt;b&gt;&lt;b&gt;"},
      {"{{ 2.567 | round(2) }}{{ 2.5 | round }}{{ -3 | abs }}", "2.572.03"},
      {"{{ words | unique | list }}{{ words | sort }}{{ lst | sort(reverse=true) }}{{ lst | "
       "reverse | list }}",
       "['b', 'A', 'c']['A', 'a', 'b', 'c'][3, 2, 1][2, 1, 3]"},
      {"{{ [1, 2, 3, 4, 5] | batch(2) | list }}{{ lst | sum }}{{ lst | max }}{{ lst | min }}",
       "[[1, 2], [3, 4], [5]]631"},
  });
}

// `is` tests.
TEST(JinjaRenderTest, Tests) {
  ExpectRenders({
      {"{{ n is defined }}{{ x is defined }}{{ x is undefined }}{{ none is none }}",
       "TrueFalseTrueTrue"},
      {"{{ s is string }}{{ n is number }}{{ n is integer }}{{ f is float }}{{ d is mapping }}{{ "
       "lst is iterable }}{{ lst is sequence }}{{ t is boolean }}",
       "TrueTrueTrueTrueTrueTrueTrueTrue"},
      {"{{ t is true }}{{ t is false }}{{ 1 is true }}", "TrueFalseFalse"},
      {"{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ n is eq 5 }}{{ n is ne 5 }}{{ n is "
       "equalto 5 }}{{ 1 is in lst }}{{ none is sameas none }}",
       "TrueFalseTrueTrueFalseTrueTrueTrue"},
      {"{{ nested.x.y is defined }}{{ nested.x.z is defined }}", "TrueFalse"},
  });
}

// arithmetic, concatenation, comparison chains, membership, slicing, lookups.
TEST(JinjaRenderTest, Operators) {
  ExpectRenders({
      {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 }} {{ 1 + 2 * 3 "
       "}}",
       "3 -4 1 2 3.5 8 7"},
      {"{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}", "a1NoneTrue|abab|[1, 2]"},
      {"{{ 1 < 2 < 3 }}{{ 2 > 3 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 2 in lst }}{{ 5 not in lst }}{{ "
       "'ell' in s }}",
       "TrueFalseTrueTrueTrueTrueTrue"},
      {"{{ n is not none }}{{ none is not none }}{{ t and n }}{{ none or 'x' }}{{ not t }}",
       "TrueFalse5xFalse"},
      {"{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ lst[1:] }}{{ lst[::2] }}{{ u[1] }}{{ "
       "u[-2:] }}",
       "HdeldlroW olleH[1, 2][3, 2]é東京"},
      {"{{ d.a }}{{ d['b'] }}{{ nested.x.y[1] }}{{ people[1].name }}{{ lst.0 }}", "1220bob3"},
  });
}

// literal syntax, string escapes, float repr, the generation block.
TEST(JinjaRenderTest, Literals) {
  ExpectRenders({
      {"{{ [1, 'a', none, true] }}{{ {'k': 1} }}{{ (1,) }}{{ True }}{{ None }}",
       "[1, 'a', None, True]{'k': 1}(1,)TrueNone"},
      {"{{ 'tab\\there' }}|{{ \"q\\\"q\" }}|{{ 'it\\'s' }}|{{ '\\u00e9\\x41' }}",
       "tab\there|q\"q|it's|éA"},
      {"{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1.0 }}|{{ 1e-5 }}|{{ 123.456 }}",
       "0.30000000000000004|1e+16|1.0|1e-05|123.456"},
      {"{{ ['it\\'s'] }}", "[\"it's\"]"},
      {"{% generation %}g{{ n }}{% endgeneration %}", "g5"},
  });
}

// printing undefined values and missing attributes / items.
TEST(JinjaRenderTest, Undefined) {
  ExpectRenders({
      {"{{ x }}|{{ x | length }}|{{ d.missing }}|{{ lst[9] }}|{{ none.y }}", "|0|||"},
  });
}

// Errors name the Python exception text jinja2 raises.
TEST(JinjaRenderTest, RenderErrorsCarryPythonMessages) {
  const ojson context = ojson::parse(kContext);
  const std::vector<Case> cases = {
      {"{{ x.y }}", "'x' is undefined"},
      {"{{ d.missing.y }}", "'dict object' has no attribute 'missing'"},
      {"{{ lst[9].y }}", "list object has no element 9"},
      {"{{ x + 1 }}", "'x' is undefined"},
      {"{{ none.y.z }}", "'None' has no attribute 'y'"},
      {"{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str"},
      {"{{ raise_exception('boom') }}", "boom"},
      {"{% set l = [1] %}{{ l.append(2) }}",
       "access to attribute 'append' of 'list' object is unsafe."},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
       "macro 'm' takes not more than 1 argument(s)"},
      {"{{ lst | map(attribute='x') | tojson }}",
       "Object of type generator is not JSON serializable"},
  };
  for (const Case& c : cases) {
    StatusOr<std::string> out = Render(c.source, context);
    ASSERT_FALSE(out.ok()) << c.source << " rendered " << *out;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(out.status().message(), c.expected))
        << c.source << ": " << out.status().message();
  }
}

TEST(JinjaRenderTest, TrimAndLstripCanBeTurnedOff) {
  jinja::Options plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  StatusOr<std::string> out =
      Render("{% if true %}\n  x\n  {% endif %}\n", ojson::object(), {}, plain);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "\n  x\n  ");
}

TEST(JinjaRenderTest, KeepsJsonKeyOrderInTojsonAndItems) {
  ojson context =
      ojson::parse(R"({"tool": {"z": 1, "a": {"y": [1.5, 1e-7, true, null]}, "m": "é\"\n"}})");
  StatusOr<std::string> out = Render(
      "{{ tool | tojson }}|{% for k, v in tool | items %}{{ k }}{% endfor %}|"
      "{{ tool | tojson(indent=2, separators=(',', ' = ')) }}|{{ tool.m | "
      "tojson(ensure_ascii=true) }}",
      context);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out,
            "{\"z\": 1, \"a\": {\"y\": [1.5, 1e-07, true, null]}, \"m\": \"é\\\"\\n\"}|zam|"
            "{\n  \"z\" = 1,\n  \"a\" = {\n    \"y\" = [\n      1.5,\n      1e-07,\n      true,\n"
            "      null\n    ]\n  },\n  \"m\" = \"é\\\"\\n\"\n}|\"\\u00e9\\\"\\n\"");
}

TEST(JinjaRenderTest, MarkupEscapesPlainStringsItIsAddedTo) {
  StatusOr<std::string> out =
      Render("{{ 'a<' | safe + '<b>' }}|{{ '<i>' + ('&' | safe) }}|{{ ('x' | safe) ~ '<' }}",
             ojson::object());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "a<&lt;b&gt;|&lt;i&gt;&|x<");
}

TEST(JinjaRenderTest, StrftimeNowUsesTheGivenClock) {
  setenv("TZ", "UTC", 1);
  tzset();
  jinja::RenderOptions options;
  options.now_unix_seconds = 1721995200;  // 2024-07-26 12:00:00 UTC, a Friday
  StatusOr<std::string> out = Render(
      "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%H:%M %A') }}", ojson::object(), options);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "26 Jul 2024 12:00 Friday");
}

TEST(JinjaParseTest, ErrorsNameLineAndColumn) {
  const std::vector<Case> cases = {
      {"line one\n{% if %}", "line 2, column 7: Expected an expression"},
      {"{% for x in y %}", "Jinja was looking for the following tags: 'endfor' or 'else'"},
      {"{% foo %}", "line 1, column 4: Encountered unknown tag 'foo'."},
      {"{{ 1 + }}", "line 1"},
      {"{{ x | nosuchfilter }}", "No filter named 'nosuchfilter'."},
      {"{{ 'unterminated }}", "line 1"},
      {"{% break %}", "'break' outside loop"},
      {"{# never closed", "Missing end of comment tag"},
      {"a\n\n{{ (1, 2]) }}", "line 3, column 9: unexpected ']', expected ')'"},
  };
  for (const Case& c : cases) {
    StatusOr<jinja::Template> t = jinja::Template::Parse(c.source);
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(t.status().message(), c.expected))
        << c.source << ": " << t.status().message();
  }
}

TEST(JinjaRenderTest, RenderErrorsNameTheLine) {
  StatusOr<std::string> out =
      Render("a\n{% for m in [1] %}\n{{ m.x.y }}\n{% endfor %}", ojson::object());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(Contains(out.status().message(),
                       "line 3: UndefinedError: 'int object' has no "
                       "attribute 'x'"))
      << out.status().message();
}

TEST(JinjaRenderTest, RunawayTemplatesStopWithAnError) {
  StatusOr<std::string> deep =
      Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ojson::object());
  ASSERT_FALSE(deep.ok());
  EXPECT_TRUE(Contains(deep.status().message(), "maximum recursion depth exceeded"));
  jinja::RenderOptions small;
  small.max_steps = 10000;
  StatusOr<std::string> slow =
      Render("{% for a in range(1000) %}{% for b in range(1000) %}x{% endfor %}{% endfor %}",
             ojson::object(), small);
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), StatusCode::kResourceExhausted);
  StatusOr<std::string> big = Render("{{ 'x' * 100000 * 100000 }}", ojson::object());
  EXPECT_FALSE(big.ok());
}

TEST(JinjaParseTest, DeepNestingIsAnErrorNotACrash) {
  std::string parens(5000, '(');
  EXPECT_FALSE(jinja::Template::Parse("{{ " + parens + "1" + std::string(5000, ')') + " }}").ok());
  std::string ifs;
  for (int i = 0; i < 3000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(jinja::Template::Parse(ifs).ok());
  EXPECT_FALSE(jinja::Template::Parse("{{ " + std::string(3000, '[') + " }}").ok());
}

// Truncated and randomly mutated real templates must parse-or-fail and render-or-fail, never
// crash or hang.
TEST(JinjaFuzzTest, MutatedRealTemplatesNeverCrash) {
  const std::string dir = testing::SharedDir() + "/templates";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "shared templates missing: " << dir;
  const ojson context = ojson::parse(R"({
    "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                 {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
                   "function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "tool", "content": "R"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  jinja::RenderOptions options;
  options.max_steps = 200000;
  options.max_output_bytes = 1 << 20;
  const std::string pieces[] = {"{%",       "%}",     "{{",    "}}",   "{#",   "#}", "-",  "+",
                                "(",        ")",      "[",     "]",    "'",    "\"", "\\", "|",
                                ".",        "endfor", "endif", "else", "loop", "\n", " ",  "\xff",
                                "\xe4\xb8", "**",     "~",     "{",    "}",    "is", "not"};
  std::mt19937 rng(12345);
  int renders = 0, parse_failures = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string source = ReadFileText(entry.path().string());
    std::vector<std::string> variants;
    for (int i = 1; i <= 25; ++i) variants.push_back(source.substr(0, source.size() * i / 26));
    for (int i = 0; i < 60; ++i) {
      std::string m = source;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !m.empty(); ++e) {
        size_t pos = rng() % m.size();
        switch (rng() % 3) {
          case 0:
            m[pos] = static_cast<char>(rng() % 256);
            break;
          case 1:
            m.insert(pos, pieces[rng() % std::size(pieces)]);
            break;
          default:
            m.erase(pos, 1 + rng() % 12);
        }
      }
      variants.push_back(std::move(m));
    }
    for (const std::string& v : variants) {
      StatusOr<jinja::Template> t = jinja::Template::Parse(v);
      if (!t.ok()) {
        ++parse_failures;
        EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
        continue;
      }
      StatusOr<std::string> out = t->Render(context, options);
      ++renders;
      if (!out.ok()) {
        EXPECT_FALSE(out.status().message().empty());
      }
    }
  }
  EXPECT_GT(renders, 100);
  EXPECT_GT(parse_failures, 100);
}

// ---- chat templates -------------------------------------------------------------------------

chat::ChatInputs Conversation(bool add_generation_prompt) {
  chat::ChatInputs in;
  in.messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  in.add_generation_prompt = add_generation_prompt;
  return in;
}

TEST(ChatTemplateTest, HuggingFaceFolder) {
  ASTR_REQUIRE_SHARED_FILE(config, "tokenizers/hf/tinyllama-1.1b-chat-v1.0/tokenizer_config.json");
  const std::string folder = std::filesystem::path(config).parent_path().string();
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::Load(folder);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t->tokens().bos, "<s>");
  EXPECT_EQ(*t->tokens().eos, "</s>");
  StatusOr<std::string> out = t->Render(Conversation(true));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "<|user|>\nHi</s>\n<|assistant|>\n");
  // The same through the tokenizer_config.json path.
  StatusOr<chat::ChatTemplate> by_file = chat::ChatTemplate::Load(config);
  ASSERT_TRUE(by_file.ok());
  EXPECT_EQ(*by_file->Render(Conversation(false)), "<|user|>\nHi</s>\n");
}

TEST(ChatTemplateTest, NullTokensStayUndefined) {
  ASTR_REQUIRE_SHARED_FILE(config, "tokenizers/hf/configs/qwen3/tokenizer_config.json");
  StatusOr<chat::ChatTemplateSource> src = chat::ReadChatTemplateSource(config);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_FALSE(src->tokens.bos.has_value());
  EXPECT_EQ(*src->tokens.eos, "<|im_end|>");
  EXPECT_EQ(*src->tokens.pad, "<|endoftext|>");
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::FromString(
      "{{ bos_token is defined }}{{ eos_token }}{{ tools is defined }}", src->tokens, "inline");
  ASSERT_TRUE(t.ok());
  chat::ChatInputs in = Conversation(false);
  EXPECT_EQ(*t->Render(in), "False<|im_end|>False");
  in.tools = ojson::array();
  in.extra["eos_token"] = "override";
  EXPECT_EQ(*t->Render(in), "FalseoverrideTrue");
}

TEST(ChatTemplateTest, ModelWithoutTemplateIsNotFound) {
  ASTR_REQUIRE_SHARED_FILE(config, "tokenizers/hf/mistral-7b-v0.1/tokenizer_config.json");
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::Load(config);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(t.status().message(), "has no chat template")) << t.status().message();
}

TEST(ChatTemplateTest, NamedTemplatesAndSpecialTokensMap) {
  const std::string dir = testing::TempDir("chat_template_named");
  std::ofstream(dir + "/tokenizer_config.json") << R"({
    "bos_token": {"content": "<B>", "__type": "AddedToken"}, "eos_token": null,
    "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ unk_token }}"},
                      {"name": "tool_use", "template": "T{{ tools | length }}"},
                      {"name": "rag", "template": "R"}]})";
  std::ofstream(dir + "/special_tokens_map.json") << R"({"unk_token": "<U>", "eos_token": "<E>"})";
  chat::ChatInputs in = Conversation(false);
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t->Render(in), "D<B><U>");
  EXPECT_FALSE(t->tokens().eos.has_value());  // null in the config wins over the map
  in.tools = ojson::parse(R"([{"type": "function"}])");
  EXPECT_EQ(*t->Render(in), "T1");  // transformers picks tool_use when tools are given
  EXPECT_EQ(*chat::ChatTemplate::Load(dir, "rag")->Render(in), "R");
  StatusOr<chat::ChatTemplate> missing = chat::ChatTemplate::Load(dir, "chat");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "default, tool_use, rag"))
      << missing.status().message();
}

TEST(ChatTemplateTest, ToolUseWithoutDefaultNeedsTools) {
  chat::ChatTemplateSource src;
  src.origin = "inline";
  src.templates = {{"tool_use", "T"}, {"rag", "R"}};
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::FromSource(src);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  chat::ChatInputs in = Conversation(false);
  StatusOr<std::string> no_tools = t->Render(in);
  ASSERT_FALSE(no_tools.ok());
  EXPECT_EQ(no_tools.status().code(), StatusCode::kNotFound);
  in.tools = ojson::array();
  EXPECT_EQ(*t->Render(in), "T");
  src.templates = {{"rag", "R"}, {"other", "O"}};
  EXPECT_EQ(chat::ChatTemplate::FromSource(src).status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplateTest, GgufMetadata) {
  const std::string path = testing::TempDir("chat_template_gguf") + "/tiny.gguf";
  Status written = model::WriteGgufFile(
      path,
      {{"general.architecture", model::GgufValue::String("llama")},
       {"tokenizer.ggml.tokens",
        model::GgufValue::StringArray({"<unk>", "<|begin|>", "<|end|>", "hi"})},
       {"tokenizer.ggml.bos_token_id", model::GgufValue::U32(1)},
       {"tokenizer.ggml.eos_token_id", model::GgufValue::U32(2)},
       {"tokenizer.chat_template",
        model::GgufValue::String(
            "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}"
            "{% endfor %}")},
       {"tokenizer.chat_template.rag", model::GgufValue::String("rag:{{ messages | length }}")}},
      {});
  ASSERT_TRUE(written.ok()) << written.ToString();
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::Load(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t->Render(Conversation(false)), "<|begin|>Hi<|end|>");
  EXPECT_EQ(*chat::ChatTemplate::Load(path, "rag")->Render(Conversation(false)), "rag:1");
  EXPECT_FALSE(t->tokens().unk.has_value());
}

TEST(ChatTemplateTest, RenderErrorsNameTheTemplate) {
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::FromString(
      "{% if messages[0].role != 'system' %}{{ raise_exception('System message required') }}"
      "{% endif %}",
      {}, "my.jinja");
  ASSERT_TRUE(t.ok());
  StatusOr<std::string> out = t->Render(Conversation(false));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "my.jinja: line 1: System message required");
  chat::ChatInputs bad = Conversation(false);
  bad.extra["messages"] = 1;
  EXPECT_FALSE(t->Render(bad).ok());
}

}  // namespace
}  // namespace astr
