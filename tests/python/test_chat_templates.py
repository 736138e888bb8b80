"""`astr chat-template` vs Python jinja2 configured exactly as transformers renders chat templates.

Every template in $ASTR_SHARED_DIR/templates/*.jinja and the chat_template of every tokenizer_config.json
under $ASTR_SHARED_DIR/tokenizers/hf is rendered for a set of conversations (single user, system + user,
multi-turn, with and without add_generation_prompt, tools with OpenAI-shaped tool calls whose arguments are
objects or JSON strings, tool replies, non-ASCII text, reasoning, extra variables, empty and malformed
conversations). The reference is jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
with the loopcontrols extension, transformers' {% generation %} extension, transformers' `tojson` filter and
its raise_exception / strftime_now globals, and the same variables apply_chat_template passes. astr's stdout
must equal the reference byte for byte; where the reference raises, astr must fail (exit 1) and its stderr
must contain the same exception message.

Differences from transformers that are deliberate and mirrored here: `tools` is passed only when the
conversation has tools (transformers passes tools=None, documents=None), and a --template run without
--model defines bos_token / eos_token as "".
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("ASTR_BIN_DIR") or REPO / "build" / "bin")
ASTR = BIN_DIR / "astr"
SHARED = Path(os.environ.get("ASTR_SHARED_DIR") or REPO.parent / "shared")
TEMPLATES_DIR = SHARED / "templates"
# Templates of models astr runs that the shared folder lacks, as their instruction-tuned checkpoints
# ship them: Gemma 3's (a system turn folded into the first user turn, content parts with images,
# roles that must alternate) and Phi-4-mini's (tools in the system turn).
LOCAL_TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
HF_DIR = SHARED / "tokenizers" / "hf"

NOW = 1721995200  # 2024-07-26 12:00:00 UTC: strftime_now's clock on both sides (astr runs with TZ=UTC)
RUN_ENV = {**os.environ, "TZ": "UTC", "ASTR_CHAT_TEMPLATE_NOW": str(NOW)}


# ---------------------------------------------------------------------------------------------
# The reference: jinja2 set up the way transformers' chat_template_utils sets it up.
# ---------------------------------------------------------------------------------------------
class _GenerationBlock(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body (the tracking of
    assistant-token offsets is irrelevant to the text)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    # transformers: datetime.now().strftime(fmt), a naive local time; here local time is UTC.
    now = datetime.datetime.fromtimestamp(NOW, tz=datetime.timezone.utc).replace(tzinfo=None)
    return now.strftime(fmt)


def _reference_env() -> jinja2.Environment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


ENV = _reference_env()


def reference_render(source: str, context: dict) -> tuple[bool, str]:
    """(True, text) or (False, exception message)."""
    try:
        return True, ENV.from_string(source).render(**context)
    except Exception as e:  # noqa: BLE001 - any template exception is an expected outcome
        return False, str(e)


# ---------------------------------------------------------------------------------------------
# Templates: standalone .jinja files and the chat templates of Hugging Face tokenizer configs.
# ---------------------------------------------------------------------------------------------
def _token_text(value):
    if isinstance(value, dict):
        return value.get("content")
    return value


def hf_special_tokens(folder: Path) -> dict:
    """The special tokens apply_chat_template passes: each one tokenizer_config.json sets (a string or an
    AddedToken object; null leaves it out), else the one special_tokens_map.json sets."""
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    special_map_path = folder / "special_tokens_map.json"
    special_map = json.loads(special_map_path.read_text(encoding="utf-8")) if special_map_path.exists() else {}
    tokens = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        if key in config:
            value = _token_text(config[key])
        else:
            value = _token_text(special_map.get(key))
        if value is not None:
            tokens[key] = value
    extra = config.get("additional_special_tokens", special_map.get("additional_special_tokens"))
    if extra:
        tokens["additional_special_tokens"] = [_token_text(t) for t in extra]
    return tokens


class TemplateUnderTest:
    def __init__(self, name: str, source: str, model_args: list[str], tokens: dict):
        self.name = name
        self.source = source
        self.model_args = model_args  # --model / --template arguments for astr
        self.tokens = tokens  # variables the reference gets for the special tokens


def collect_templates() -> list[TemplateUnderTest]:
    found = []
    for path in sorted(TEMPLATES_DIR.glob("*.jinja")) + sorted(LOCAL_TEMPLATES_DIR.glob("*.jinja")):
        found.append(TemplateUnderTest(
            f"file:{path.stem}", path.read_text(encoding="utf-8"), ["--template", str(path)],
            {"bos_token": "", "eos_token": ""}))
    for config in sorted(HF_DIR.rglob("tokenizer_config.json")):
        data = json.loads(config.read_text(encoding="utf-8"))
        template = data.get("chat_template")
        if not isinstance(template, str):
            continue
        rel = config.parent.relative_to(HF_DIR)
        found.append(TemplateUnderTest(f"hf:{rel}", template, ["--model", str(config.parent)],
                                       hf_special_tokens(config.parent)))
    return found


TEMPLATES = collect_templates() if TEMPLATES_DIR.is_dir() else []

# Variables a template cannot render without: supplied by every conversation given to that template.
TEMPLATE_EXTRAS = {
    "file:fireworks-ai-llama-3-firefunction-v2": {
        "functions": "[{\"name\": \"get_weather\", \"description\": \"Get the current weather in a city.\"}]",
        "datetime": "2024-07-26",
    },
}
# Standalone templates come without a model: the conversations name bos / eos tokens themselves (except
# the case that checks the empty defaults).
STANDALONE_TOKENS = {"bos_token": "<|begin|>", "eos_token": "<|end|>"}

# ---------------------------------------------------------------------------------------------
# Conversations.
# ---------------------------------------------------------------------------------------------
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\" or 東京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["city"],
        },
    }},
    {"type": "function", "function": {
        "name": "search_web",
        "description": "Search the web",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for"},
                "max_results": {"type": "integer", "description": "How many results", "default": 5,
                                "minimum": 1, "maximum": 20},
                "lang": {"type": ["string", "null"], "description": "Language code"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter tags"},
                "safe": {"type": "boolean", "description": "Safe search"},
                "ratio": {"type": "number", "description": "Score threshold"},
            },
            "required": ["query", "tags"],
        },
    }},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Hello! How are you?"}
ASSISTANT = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
USER2 = {"role": "user", "content": "What's the weather like in Paris?"}
WEATHER_ARGS = {"city": "Paris", "unit": "celsius"}
TOOL_REPLY = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
              "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"}
FINAL = {"role": "assistant", "content": "It is sunny and 21.5 °C in Paris."}


def tool_call_message(arguments, content=None, calls=None):
    calls = calls or [("call12345", "get_weather", arguments)]
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        for call_id, name, args in calls]}


UNICODE_TEXT = "Grüße! 你好，世界 🙂🚀 \"double\" 'single' back\\slash \\n literal\nnew line\ttab — naïve café"
NUMBERS_ARGS = {"city": "東京", "days": 3, "threshold": 0.1, "tiny": 1e-07, "big": 1e+20, "ratio": 2.0,
                "neg": -0.5, "flag": True, "none": None, "list": [1, 2.5, "x", {"k": []}],
                "nested": {"a": {"b": "c\"d\\e"}}, "empty": {}}

# name -> (messages, tools, add_generation_prompt, extra variables)
CASES = {
    "user": ([USER], None, False, {}),
    "user_gen": ([USER], None, True, {}),
    "system_user_gen": ([SYSTEM, USER], None, True, {}),
    "multi_turn": ([USER, ASSISTANT, USER2], None, False, {}),
    "multi_turn_gen": ([USER, ASSISTANT, USER2], None, True, {}),
    "system_multi_turn_gen": ([SYSTEM, USER, ASSISTANT, USER2], None, True, {}),
    "assistant_last": ([USER, ASSISTANT], None, False, {}),
    "system_only_gen": ([SYSTEM], None, True, {}),
    "user_user_gen": ([USER, USER2], None, True, {}),
    "empty_gen": ([], None, True, {}),
    "tools_gen": ([SYSTEM, USER2], TOOLS, True, {}),
    "tool_call_dict_args": ([USER2, tool_call_message(WEATHER_ARGS), TOOL_REPLY], TOOLS, True, {}),
    "tool_call_str_args": ([USER2, tool_call_message(json.dumps(WEATHER_ARGS), content=""), TOOL_REPLY],
                           TOOLS, True, {}),
    "tool_call_round_trip": ([SYSTEM, USER2, tool_call_message(WEATHER_ARGS), TOOL_REPLY, FINAL,
                              {"role": "user", "content": "Thanks!"}], TOOLS, True, {}),
    "tool_call_str_round_trip": ([USER2, tool_call_message(json.dumps(WEATHER_ARGS)), TOOL_REPLY, FINAL],
                                 TOOLS, False, {}),
    "two_tool_calls": ([USER2, tool_call_message(None, calls=[
        ("call12345", "get_weather", WEATHER_ARGS),
        ("call67890", "search_web", {"query": "Paris weather", "tags": ["news"]})]),
        TOOL_REPLY, {"role": "tool", "tool_call_id": "call67890", "name": "search_web",
                     "content": "No results."}], TOOLS, True, {}),
    "tool_args_numbers": ([USER2, tool_call_message(NUMBERS_ARGS), TOOL_REPLY], TOOLS, True, {}),
    "tool_reply_object": ([USER2, tool_call_message(WEATHER_ARGS),
                           {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                            "content": {"temperature": 21.5, "tags": ["sunny", "dry"]}}], TOOLS, True, {}),
    "unicode": ([{"role": "system", "content": UNICODE_TEXT}, {"role": "user", "content": UNICODE_TEXT},
                 {"role": "assistant", "content": "¡Sí! ✓ «ok» 😀"}, {"role": "user", "content": "  trim me  \n"}],
                None, True, {}),
    "content_parts": ([{"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                                     {"type": "image"}]}], None, True, {}),
    "tool_call_with_content": ([USER2, tool_call_message(WEATHER_ARGS, content="Let me check."), TOOL_REPLY],
                               TOOLS, True, {}),
    "tool_call_no_content_key": ([USER2, {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": WEATHER_ARGS}}]}, TOOL_REPLY],
        TOOLS, True, {}),
    "system_mid": ([USER, {"role": "system", "content": "Answer briefly."}, USER2], None, True, {}),
    "reasoning": ([USER, {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHi there!"},
                   USER2], None, True, {}),
    "no_thinking": ([USER], None, True, {"enable_thinking": False}),
    "documents": ([USER2], None, True, {"documents": [
        {"title": "Paris weather", "text": "Sunny, 21 °C ✓"}, {"title": "Note", "text": "Take \"sunglasses\"."}]}),
    "date_tools_in_system": ([SYSTEM, USER2], TOOLS, True,
                             {"date_string": "05 Mar 2025", "tools_in_user_message": False}),
    "builtin_tools": ([SYSTEM, USER2, tool_call_message(None, calls=[
        ("call12345", "brave_search", {"query": "Paris weather"})]),
        {"role": "tool", "tool_call_id": "call12345", "content": "Sunny."}], TOOLS, True,
        {"builtin_tools": ["brave_search", "wolfram_alpha"]}),
}

# Cases checked for standalone templates without bos / eos variables (astr's defaults are "").
PLAIN_TOKEN_CASES = {"user_gen"}


def build_run(tut: TemplateUnderTest, case: str):
    """(astr args, messages file content, reference context)."""
    messages, tools, agp, extra = CASES[case]
    extra = {**TEMPLATE_EXTRAS.get(tut.name, {}), **extra}
    if tut.name.startswith("file:") and case not in PLAIN_TOKEN_CASES:
        extra = {**STANDALONE_TOKENS, **extra}
    context = {**tut.tokens, **extra, "messages": messages, "add_generation_prompt": agp}
    if tools is not None:
        context["tools"] = tools
    if tools is None and not extra and case != "user":
        doc = messages  # the plain array form of the messages file
    else:
        doc = {"messages": messages, **({"tools": tools} if tools is not None else {}), **extra}
    if case == "user":  # add_generation_prompt given in the file rather than as a flag
        doc = {"messages": messages, "add_generation_prompt": agp, **extra}
    args = list(tut.model_args)
    if agp and case != "user":
        args.append("--add-generation-prompt")
    return args, doc, context


def run_astr(args: list[str], env=None):
    return subprocess.run([str(ASTR), "chat-template", *args], capture_output=True, env=env or RUN_ENV)


def require_astr():
    if not ASTR.exists():
        pytest.skip(f"astr binary not built: {ASTR}")


PARAMS = [pytest.param(t, c, id=f"{t.name}-{c}") for t in TEMPLATES for c in CASES]


@pytest.mark.parametrize("tut,case", PARAMS)
def test_matches_jinja2(tut: TemplateUnderTest, case: str, tmp_path: Path):
    require_astr()
    args, doc, context = build_run(tut, case)
    messages_file = tmp_path / "messages.json"
    messages_file.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    ok, expected = reference_render(tut.source, context)
    result = run_astr([*args, "--messages", str(messages_file)])
    stderr = result.stderr.decode("utf-8", errors="replace")
    if ok:
        assert result.returncode == 0, f"astr failed where jinja2 rendered:\n{stderr}"
        assert result.stdout.decode("utf-8") == expected
    else:
        assert result.returncode == 1, (
            f"jinja2 raised {expected!r} but astr exited {result.returncode}:\n"
            f"{result.stdout.decode('utf-8', errors='replace')}")
        assert expected in stderr, f"jinja2 raised {expected!r}; astr said:\n{stderr}"


def require_shared(path: Path):
    """Skips (reports skipped, never passes) when the shared test data is missing."""
    if not path.exists():
        pytest.skip(f"shared test data missing: {path}")


def test_every_template_renders_some_conversation():
    """Guards against a suite that passes only because everything fails on both sides."""
    require_shared(TEMPLATES_DIR)
    assert len(TEMPLATES) >= 20, f"expected the shared templates, found {len(TEMPLATES)}"
    for tut in TEMPLATES:
        rendered = 0
        for case in CASES:
            _, _, context = build_run(tut, case)
            rendered += reference_render(tut.source, context)[0]
        assert rendered >= 5, f"{tut.name}: only {rendered} of {len(CASES)} conversations render"


# ---------------------------------------------------------------------------------------------
# Model sources and CLI behaviour.
# ---------------------------------------------------------------------------------------------
def write_messages(tmp_path: Path, doc) -> str:
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("folder", ["configs/qwen3", "configs/llama-3.2-1b-3b-instruct",
                                    "tinyllama-1.1b-chat-v1.0"])
def test_tokenizer_config_file_path(folder: str, tmp_path: Path):
    """--model may name tokenizer_config.json itself; tokens then still come from the folder."""
    require_astr()
    config = HF_DIR / folder / "tokenizer_config.json"
    if not config.exists():
        pytest.skip(f"missing {config}")
    template = json.loads(config.read_text(encoding="utf-8"))["chat_template"]
    context = {**hf_special_tokens(config.parent), "messages": [SYSTEM, USER], "add_generation_prompt": True}
    ok, expected = reference_render(template, context)
    assert ok, expected
    result = run_astr(["--model", str(config), "--messages", write_messages(tmp_path, [SYSTEM, USER]),
                       "--add-generation-prompt"])
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode("utf-8") == expected


def test_template_flag_overrides_model_template(tmp_path: Path):
    """--template with --model: the model supplies only the special tokens."""
    require_shared(HF_DIR / "tinyllama-1.1b-chat-v1.0")
    require_astr()
    folder = HF_DIR / "tinyllama-1.1b-chat-v1.0"
    template = tmp_path / "t.jinja"
    template.write_text("{{ bos_token }}|{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}",
                        encoding="utf-8")
    result = run_astr(["--model", str(folder), "--template", str(template),
                       "--messages", write_messages(tmp_path, [USER])])
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == "<s>|Hello! How are you?</s>"


def test_gguf_chat_template(tmp_path: Path):
    """A .gguf model: tokenizer.chat_template plus bos / eos strings looked up by token id."""
    require_astr()
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    template = ("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")
    writer.add_chat_template(template)
    writer.add_string("tokenizer.chat_template.tool_use", "TOOLS:{{ tools|tojson }}")
    writer.add_token_list(["<unk>", "<|first|>", "<|last|>", "hello"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    msgs = write_messages(tmp_path, [SYSTEM, USER])
    result = run_astr(["--model", str(path), "--messages", msgs, "--add-generation-prompt"])
    assert result.returncode == 0, result.stderr.decode()
    expected = reference_render(template, {"bos_token": "<|first|>", "eos_token": "<|last|>",
                                           "messages": [SYSTEM, USER], "add_generation_prompt": True})[1]
    assert result.stdout.decode() == expected
    # With tools, transformers picks the "tool_use" template; --template-name picks explicitly.
    tools_msgs = write_messages(tmp_path, {"messages": [USER], "tools": TOOLS[:1]})
    result = run_astr(["--model", str(path), "--messages", tools_msgs])
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == "TOOLS:" + json.dumps(TOOLS[:1], ensure_ascii=False)
    result = run_astr(["--model", str(path), "--messages", tools_msgs, "--template-name", "default"])
    assert result.stdout.decode().startswith("<|first|><user>")


@pytest.mark.parametrize("case", ["multi_turn_gen", "unicode", "system_multi_turn_gen"])
def test_real_gguf_chat_template(case: str, tmp_path: Path):
    """The Phi-3 vocabulary GGUF carries a chat template; bos / eos are looked up by token id."""
    require_astr()
    gguf = pytest.importorskip("gguf")
    path = SHARED / "tokenizers" / "gguf" / "ggml-vocab-phi-3.gguf"
    if not path.exists():
        pytest.skip(f"missing {path}")
    reader = gguf.GGUFReader(str(path))

    def field(key):
        f = reader.fields[key]
        return f.parts[f.data[0]]

    template = bytes(field("tokenizer.chat_template")).decode("utf-8")
    tokens_field = reader.fields["tokenizer.ggml.tokens"]
    vocab = [bytes(tokens_field.parts[i]).decode("utf-8") for i in tokens_field.data]
    tokens = {"bos_token": vocab[int(field("tokenizer.ggml.bos_token_id")[0])],
              "eos_token": vocab[int(field("tokenizer.ggml.eos_token_id")[0])],
              "unk_token": vocab[int(field("tokenizer.ggml.unknown_token_id")[0])],
              "pad_token": vocab[int(field("tokenizer.ggml.padding_token_id")[0])]}
    messages, _, agp, _ = CASES[case]
    ok, expected = reference_render(template, {**tokens, "messages": messages, "add_generation_prompt": agp})
    assert ok, expected
    result = run_astr(["--model", str(path), "--messages", write_messages(tmp_path, messages)]
                      + (["--add-generation-prompt"] if agp else []))
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode("utf-8") == expected


def test_named_templates_in_tokenizer_config(tmp_path: Path):
    """chat_template as a list of {name, template}: "default" unless a name is asked for; an unknown
    name is an error that lists the available ones."""
    require_astr()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"content": "<B>", "lstrip": False, "__type": "AddedToken"},
        "eos_token": None,
        "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ eos_token is defined }}"},
                          {"name": "rag", "template": "R{{ messages|length }}"}],
    }), encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<E>", "unk_token": "<U>"}),
                                                    encoding="utf-8")
    msgs = write_messages(tmp_path, [USER])
    result = run_astr(["--model", str(folder), "--messages", msgs])
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == "D<B>False"  # a null eos_token in the config stays undefined
    result = run_astr(["--model", str(folder), "--messages", msgs, "--template-name", "rag"])
    assert result.stdout.decode() == "R1"
    result = run_astr(["--model", str(folder), "--messages", msgs, "--template-name", "nope"])
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "nope" in stderr and "default, rag" in stderr


@pytest.mark.parametrize("folder", ["mistral-7b-v0.1", "gpt2"])
def test_model_without_template(folder: str, tmp_path: Path):
    require_shared(HF_DIR / folder)
    require_astr()
    result = run_astr(["--model", str(HF_DIR / folder), "--messages", write_messages(tmp_path, [USER])])
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "NOT_FOUND" in stderr and "has no chat template" in stderr


def test_usage_errors(tmp_path: Path):
    require_astr()
    msgs = write_messages(tmp_path, [USER])
    assert run_astr(["--messages", msgs]).returncode == 2  # neither --model nor --template
    assert run_astr(["--model", str(HF_DIR / "gpt2")]).returncode == 2  # no --messages
    assert run_astr(["--bogus-flag"]).returncode == 2
    assert run_astr(["--help"]).returncode == 0


def test_bad_inputs_are_reported(tmp_path: Path):
    require_astr()
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "user", "content": "x"},\n oops]', encoding="utf-8")
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0].content }}", encoding="utf-8")
    result = run_astr(["--template", str(template), "--messages", str(bad)])
    assert result.returncode == 1
    assert str(bad) in result.stderr.decode() and "line 2" in result.stderr.decode()
    wrong = write_messages(tmp_path, {"conversation": []})
    result = run_astr(["--template", str(template), "--messages", wrong])
    assert result.returncode == 1 and "\"messages\"" in result.stderr.decode()
    broken = tmp_path / "broken.jinja"
    broken.write_text("ok\n{% for m in messages %}{{ m.content }}", encoding="utf-8")
    result = run_astr(["--template", str(broken), "--messages", write_messages(tmp_path, [USER])])
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "broken.jinja" in stderr and "line 2" in stderr and "endfor" in stderr


def test_strftime_now_uses_fixed_clock(tmp_path: Path):
    require_astr()
    template = tmp_path / "t.jinja"
    template.write_text("{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %Y %A') }}", encoding="utf-8")
    result = run_astr(["--template", str(template), "--messages", write_messages(tmp_path, [])])
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == _strftime_now("%Y-%m-%d %H:%M:%S %d %b %Y %A")
    assert result.stdout.decode() == "2024-07-26 12:00:00 26 Jul 2024 Friday"


# ---------------------------------------------------------------------------------------------
# Language features, one small template each, against the same reference environment.
# ---------------------------------------------------------------------------------------------
FEATURE_CONTEXT = {
    "s": "Hello World", "u": "héllo wörld 東京 ß", "n": 5, "f": 2.5, "neg": -3, "big": 12345678901,
    "lst": [3, 1, 2], "words": ["b", "A", "c", "a", "B"], "d": {"b": 2, "a": 1, "C": 3},
    "people": [{"name": "Ann", "age": 30, "city": "Paris"}, {"name": "bob", "age": 25},
               {"name": "Cid", "age": 30, "city": "Rome"}],
    "none": None, "t": True, "empty": [], "nested": {"x": {"y": [10, 20]}, "items": "key named items"},
    "text": "  line one\nline two\n\n\tline four  ", "floats": [0.1, 1e-05, 1e16, 123456789.0, -0.0, 2.0, 1.5e300],
    "html": "<a href='x'>&\"</a>", "mixed": [1, "a", None, True, 2.5, {"k": [1, {"z": None}]}],
}

FEATURE_TEMPLATES = [
    # output of values (Python str / repr)
    "{{ lst }}|{{ d }}|{{ none }}|{{ t }}|{{ f }}|{{ mixed }}|{{ (1, 'a') }}|{{ (1,) }}|{{ () }}",
    "{% for x in floats %}{{ x }} {% endfor %}{{ 1/3 }} {{ 10/2 }} {{ 2**0.5 }} {{ 1e100 }}",
    "{{ 'it\\'s' }}|{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\tnl\\n\\\\'] }}|{{ ['é', '\\x01', '\\u2028'] }}",
    "{{ undefined_var }}|{{ d.missing }}|{{ lst[10] }}|{{ none.x }}|{{ s.nope }}",
    # whitespace control
    "a  {%- if t %}  b  {% endif -%}  c\n  {# comment #}  \nd {{- ' e ' -}} f",
    "<ul>\n  {% for x in lst %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n",
    "{% if t %}\n  yes\n{% else %}\n  no\n{% endif %}\nend\n\n",
    "{%+ if t %}  kept{% endif %}\n    {%+ if t %}x{% endif +%}\nnext",
    "line\n    {{ 'var keeps indent' }}\n    {# lstripped comment #}\n  tail\r\nwin\rmac",
    "{% raw %}{{ not evaluated }}{% endraw %}|{%- raw -%}  {% x %}  {%- endraw %}|",
    "  {%- for x in lst -%}\n  [{{ x }}]\n  {%- endfor %}  ",
    # control flow
    "{% for x in lst %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
    "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}-{{ loop.nextitem }}"
    "{{ loop.cycle('a', 'b') }};{% endfor %}",
    "{% for x in empty %}{{ x }}{% else %}empty{% endfor %}|{% for x in lst if x > 1 %}{{ x }}"
    "{{ loop.length }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}"
    "|{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }}{% endfor %}",
    "{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}{% break %}"
    "{% endif %}{{ x }}{% endfor %}",
    "{% for x in lst %}{% for y in 'ab' %}{{ loop.index }}{{ y }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% if n > 10 %}big{% elif n > 3 %}mid{% elif n > 1 %}small{% else %}tiny{% endif %}",
    "{% set x = 1 %}{% for i in lst %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(total=0, items=[]) %}{% for i in lst %}{% set ns.total = ns.total + i %}"
    "{% set ns.items = ns.items + [i * 2] %}{% endfor %}{{ ns.total }} {{ ns.items }} {{ ns }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}",
    "{% set block %}  inner {{ n }}  {% endset %}[{{ block }}]{% set up | upper | trim %} x {% endset %}[{{ up }}]",
    "{% filter upper %}shout {{ s }}{% endfilter %}",
    "{% with a = 3, b = n %}{{ a + b }}{% endwith %}{{ a }}",
    "{% macro greet(name, greeting='Hi', punct='!') %}{{ greeting }} {{ name }}{{ punct }}{% endmacro %}"
    "{{ greet('Ann') }}|{{ greet('Bob', 'Yo') }}|{{ greet(name='Cid', punct='?') }}|{{ greet() }}",
    "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
    "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside {{ n }}{% endcall %}",
    "{% macro m() %}{{ outer }}{% endmacro %}{% set outer = 'late' %}{{ m() }}",
    "{% generation %}gen {{ n }}{% endgeneration %}",
    "{{ 'yes' if t else 'no' }}|{{ 'yes' if none else 'no' }}|{{ 'x' if false }}|{{ n if n > 3 }}",
    # operators
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }}",
    "{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -n }} {{ +n }} {{ 2 ** 3 ** 2 }} {{ not t }} {{ t and n }} {{ none or 'd' }}",
    "{{ 'a' ~ 1 ~ none ~ t ~ undefined_var ~ [1] }}|{{ 'ab' * 3 }}|{{ [1, 2] * 2 }}|{{ lst + [4] }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1, 2] < [1, 3] }} {{ 'abc' < 'abd' }}",
    "{{ 1 in lst }} {{ 9 not in lst }} {{ 'ell' in s }} {{ 'a' in d }} {{ 'z' in d }} {{ n is not none }}",
    "{{ s[0] }}{{ s[-1] }}{{ s[1:4] }}{{ s[::-1] }}{{ s[::2] }}{{ lst[1:] }}{{ lst[:-1] }}{{ lst[::-1] }}{{ u[1:3] }}",
    "{{ d['a'] }}{{ d.b }}{{ nested.x.y[1] }}{{ nested['x']['y'][-1] }}{{ people[0].name }}{{ lst.0 }}",
    "{{ {'a': 1, 'b': [1, 2]} }} {{ [1, [2, (3,)]] }} {{ {'k': none, 1: true} }}",
    "{{ \"double\" 'single' \"concat\" }} {{ 'esc: \\n\\t\\\\ \\x41 \\u00e9 \\101' }}",
    "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1.5e3 }} {{ 2E-3 }} {{ True }} {{ False }} {{ None }}",
    # string methods
    "{{ text.strip() }}|{{ text.lstrip() }}|{{ text.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.split() }}"
    "|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(None, 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}",
    "{{ s.startswith('He') }}{{ s.endswith(('x', 'ld')) }}{{ s.upper() }}{{ s.lower() }}{{ 'hello world'.title() }}"
    "{{ 'hELLO'.capitalize() }}{{ s.replace('o', '0') }}{{ s.replace('o', '0', 1) }}{{ s.swapcase() }}",
    "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('l') }} {{ s.index('W') }} {{ u.find('東') }}",
    "{{ '-'.join(['a', 'b']) }} {{ 'x'.center(5) }}| {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }} {{ '42'.zfill(5) }}",
    "{{ '{} and {}'.format('a', 'b') }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='Z') }} "
    "{{ '{:>6}|{:<4}|{:^5}|{:.2f}|{:05d}|{:,}'.format('r', 'l', 'c', 3.14159, 42, 1234567) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ 'Ab'.islower() }} "
    "{{ 'AB'.isupper() }} {{ '  '.isspace() }} {{ 'k=v'.partition('=') }} {{ u.upper() }} {{ u.title() }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.txt'.removesuffix('.txt') }} {{ '%s is %d years, %.1f%%' % ('Ann', 30, 99.5) }}",
    # dict / list methods
    "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} "
    "{{ d.items() | list }} {{ lst.index(2) }} {{ lst.count(3) }} {{ nested['items'] }} {{ nested.items is defined }}",
    "{{ d.items() }} {{ d.keys() }} {{ d.values() }}",
    # filters
    "{{ s | length }} {{ u | length }} {{ lst | count }} {{ d | length }} {{ undefined_var | length }}",
    "{{ text | trim }}|{{ 'xxyxx' | trim('x') }}|{{ s | upper }}|{{ s | lower }}|{{ 'hello big-world (x)' | title }}"
    "|{{ 'hELLO wORLD' | capitalize }}|{{ s | replace('l', 'L') }}|{{ s | replace('l', 'L', 2) }}",
    "{{ undefined_var | default('dv') }} {{ none | default('dv') }} {{ '' | default('dv', true) }} {{ 0 | d('z', boolean=true) }}",
    "{{ lst | join }} {{ lst | join(', ') }} {{ people | join('/', attribute='name') }} {{ s | join('.') }}",
    "{{ lst | first }} {{ lst | last }} {{ s | first }} {{ s | last }} {{ empty | first }} {{ d | first }}",
    "{{ people | map(attribute='name') | list }} {{ people | map(attribute='city', default='?') | list }} "
    "{{ words | map('upper') | list }} {{ lst | map('string') | join('+') }}",
    "{{ lst | select('odd') | list }} {{ lst | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }} "
    "{{ lst | select('greaterthan', 1) | list }} {{ lst | select('in', [1, 3]) | list }}",
    "{{ people | selectattr('age', 'equalto', 30) | map(attribute='name') | list }} "
    "{{ people | rejectattr('city') | map(attribute='name') | list }} {{ people | selectattr('city', 'defined') | list | length }}",
    "{{ lst | list }} {{ s | list }} {{ d | list }} {{ lst | string }} {{ 42 | string }} {{ none | string }}",
    "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '0x1A' | int(0, 16) }} {{ 3.9 | int }} "
    "{{ '3.5' | float }} {{ 'x' | float }} {{ 2 | float }} {{ ' 1_000 ' | int }}",
    "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 3.14159 | round(2, 'floor') }} "
    "{{ 3.1 | round(method='ceil') }} {{ 7 | round }} {{ -2.5 | round }} {{ neg | abs }} {{ -2.5 | abs }}",
    "{{ lst | tojson }} {{ d | tojson }} {{ mixed | tojson }} {{ u | tojson }} {{ floats | tojson }} {{ none | tojson }}",
    "{{ d | tojson(indent=2) }}\n{{ mixed | tojson(indent=4) }}\n{{ empty | tojson(indent=2) }} {{ {} | tojson(indent=2) }}",
    "{{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} {{ u | tojson(ensure_ascii=true) }} "
    "{{ d | tojson(indent='\\t') }} {{ {'k': '🙂'} | tojson(true) }} {{ html | tojson }}",
    "{{ d | items | list }} {{ d | dictsort }} {{ d | dictsort(true) }} {{ d | dictsort(by='value', reverse=true) }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}|{{ '' | indent(first=true) }}",
    "{{ html | safe }} {{ html | e }} {{ html | escape }} {{ ('<b>' | safe) + '<i>' }} {{ '<i>' + ('<b>' | safe) }} "
    "{{ ('<b>' | safe) ~ '<i>' }} {{ (('a' | safe) + 'b') | length }}",
    "{{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ words | sort }} "
    "{{ words | sort(case_sensitive=true) }} {{ words | sort(reverse=true) }} {{ people | sort(attribute='age') | map(attribute='name') | join }}",
    "{{ lst | reverse | list }} {{ s | reverse }} {{ lst | sort | reverse | join }} {{ lst | max }} {{ lst | min }} "
    "{{ words | max }} {{ words | min(case_sensitive=true) }} {{ lst | sum }} {{ people | sum(attribute='age') }}",
    "{{ range(7) | batch(3) | list }} {{ range(7) | batch(3, 'x') | list }} {{ range(7) | slice(3) | list }}",
    "{{ people | groupby('age') | list }} {% for g in people | groupby('age') %}{{ g.grouper }}:{{ g.list | length }} {% endfor %}",
    "{{ 'a b  c' | wordcount }} {{ 'long text here' | truncate(9, true) }} {{ 'x' * 300 | truncate | length }} "
    "{{ '<p>Hi <b>there</b></p>' | striptags }} {{ 'x' | center(7) }}| {{ 1234567 | filesizeformat }} {{ '%s-%s' | format(1, 2) }}",
    "{{ range(5) | list }} {{ range(2, 8, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b=2) }} {{ namespace(x=1).x }}",
    "{{ lst | map('int') | list }} {{ [1.5, 2.5] | map('round') | list }} {{ people | map(attribute='name') | map('lower') | list }}",
    "{{ lst | select('even') | first }} {{ people | selectattr('name', 'equalto', 'bob') | first }} {{ people | map(attribute='age') | unique | list }}",
    # tests
    "{{ n is defined }}{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ s is string }}{{ n is number }}"
    "{{ f is number }}{{ t is number }}{{ n is integer }}{{ t is integer }}{{ f is float }}{{ d is mapping }}",
    "{{ lst is iterable }}{{ s is iterable }}{{ n is iterable }}{{ undefined_var is iterable }}{{ lst is sequence }}"
    "{{ d is sequence }}{{ t is boolean }}{{ t is true }}{{ false is false }}{{ 1 is true }}{{ none is boolean }}",
    "{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ n is eq 5 }}{{ n is ne 5 }}"
    "{{ n is equalto 5 }}{{ 2 is in lst }}{{ 'b' is lower }}{{ 'B' is upper }}{{ none is sameas none }}{{ n is gt 2 }}"
    "{{ n is ge 5 }}{{ n is lt 5 }}{{ n is le 5 }}{{ n is lessthan 9 }}{{ d.items is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}",
    "{{ nested.x.y is defined }}{{ nested.x.z is defined }}{{ nested.nope is defined }}{{ people[5] is defined }}",
    # errors
    "{{ undefined_var.attr }}",
    "{{ d.missing.attr }}",
    "{{ lst[10].x }}",
    "{{ none.attr.x }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ none + 'a' }}",
    "{{ 'a' + none }}",
    "{{ lst + 'a' }}",
    "{{ undefined_var + 1 }}",
    "{{ 1 / 0 }}",
    "{{ 5 // 0 }}",
    "{{ 5 % 0 }}",
    "{{ 'a' < 1 }}",
    "{{ 1 in 5 }}",
    "{{ 1 in 'abc' }}",
    "{{ none | length }}",
    "{% for x in none %}{% endfor %}",
    "{% for x in 5 %}{% endfor %}",
    "{{ raise_exception('custom failure: ' ~ n) }}",
    "{% set x = [1] %}{{ x.append(2) }}",
    "{% set x = {} %}{{ x.update({'a': 1}) }}",
    "{{ 'abc'.nope() }}",
    "{{ n() }}",
    "{{ undefined_fn() }}",
    "{% for a, b in [1, 2] %}{% endfor %}",
    "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
    "{% set n.x = 1 %}",
    "{{ lst | map(attribute='x') | tojson }}",
    "{{ lst | map('upper') | list }}",
    "{{ d | items | tojson }}",
    "{{ d.items() | tojson }}",
    "{{ {} | first }}{{ (empty | first).x }}",
    "{{ loop.index }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}{{ m().x }}",
    "{{ (1, 2) + [3] }}",
    "{{ {'a': 1} + {'b': 2} }}",
    "{{ 'ab' * 'c' }}",
    "{{ -'a' }}",
    "{{ [[1], [2]] | unique | list }}",
    "{{ {[1]: 2} }}",
    "{{ ['b', 1] | sort }}",
    "{{ range(200000) | length }}",
    "{{ '%d' % 'x' }}",
    "{{ '%s %s' % ('a',) }}",
    "{{ 'a' | indent(none) }}",
    "{{ 5 | indent }}",
    "{{ 'abc'[1.5] }}|{{ lst['x'] }}|{{ d[0] }}|{{ 'abc'[10] }}|{{ none[0] }}",
    "{{ d[[1]] }}",
    # lexer corners
    "{{ '}}' }}{{ \"%}\" }}{{ '{#' }}{{ {'a': {'b': 1}} }}{{ {'a': {'b': {}}}['a'] }}{% set x = '{% raw %}' %}{{ x }}",
    "a {#- c -#} b {#+ c +#} c\n  {#- c #}\n  d\n  {# c -#}\n  e",
    "x  \t{%- if t -%}\t y \t{%- endif -%}  \n\n z",
    "\u3000{% if t %}ideographic{% endif %}\u00a0\n\u00a0 {% if t %}nbsp{% endif %}",
    "{{ 'line \\\ncont' }}|{{ 'multi\nline' }}|{{ \"a\\\"b\" }}",
    "{% for x in lst %}\n{{ x }}\n{% endfor %}\n",
    "{%- for x in lst %}\n  {{- x }}\n{%- endfor %}",
    "  {% if t %}\n    indented\n  {% endif %}\n  {{ n }}\n  {% if t -%}\n    after minus\n  {%- endif %}",
    "{% if t %}a{% endif %}   \n{% if t %}b{% endif %}\t\n   {% if t %}c{% endif %}",
    "{% raw -%}\n  raw body  \n{%- endraw %}\n  {% raw %}keep{% endraw %}",
    "end with newlines\n\n",
    "{# only a comment #}",
    "{{- '  lead' }}   {{- '  mid  ' -}}   {{ 'tail' -}}   ",
    "{% for x in lst %}{{ loop.changed(x > 1) }}{% endfor %}|{% set j = joiner('; ') %}{% for x in lst %}{{ j() }}{{ x }}{% endfor %}",
    "{% for x in 'abc' %}{{ loop.cycle(*['1', '2']) }}{% endfor %}|{% for x in d|dictsort %}{{ x[0] }}{% endfor %}",
    "{% for x in lst %}{{ x }}{% else %}never{% endfor %}{% for x in [] if x %}{% else %}else{% endfor %}",
    "{% set x %}{% for i in range(3) %}{{ i }}{% endfor %}{% endset %}{{ x | length }}{{ x ~ x }}",
    "{{ [1, 2, 3][1:] }}{{ 'abc'[5:] }}{{ 'abc'[-5:] }}{{ 'abcdef'[-2:1:-1] }}{{ [1,2,3][::0] if false else 'ok' }}",
    "{{ n * 1.5 }} {{ n / 3 }} {{ 1e-7 * 3 }} {{ 0.1 + 0.2 }} {{ 100000000000000000.0 }} {{ 1234567890123456789 }} {{ -0.0 }}",
    "{{ 3 | float | string }} {{ 1e15 | int }} {{ 2.5 | string }} {{ (0.1 * 3) | round(15) }} {{ 1.0 == 1 }}",
    "{{ ['x', 'y'] | tojson(indent=0) }} {{ [1.0, 1e-7, -1e22, 3.0e-3] | tojson }} {{ ['\\u', '\u00e9\x7f\x1f'] | tojson }}",
    "{{ ('<i>' | e) + ('<b>' | safe) }} {{ '<b>' | safe | upper }} {{ ('a<' | safe).replace('<', '>') }} {{ '&' | e | e }}",
    "{{ lst | map('string') | map('length') | sum }} {{ words | map('lower') | unique | sort | join }} {{ people | map(attribute='name') | first }}",
    "{% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}-{{ caller() if caller is defined else 'nc' }}{% endmacro %}{{ outer() }}",
    "{% macro m(x, y=x * 2) %}{{ x }},{{ y }}{% endmacro %}{{ m(2) }}|{{ m(2, 3) }}|{{ m(y=1, x=4) }}",
    "{% set d2 = {'z': 1, 'a': 2} %}{{ d2 | tojson }} {{ d2 | dictsort | tojson }} {{ d2.items() | list | tojson }}",
    "{{ namespace(a=1) }}{% set ns = namespace() %}{% set ns.b = [1] %}{{ ns.b }}{{ ns.missing }}{{ ns.missing is defined }}",
    "{{ 1 if t }} {{ none is none and none is not defined }} {{ (n > 3) and 'big' or 'small' }} {{ t and not none }}",
    "{{ lst | length > 2 }} {{ - n ** 2 }} {{ (-n) ** 2 }} {{ not n == 5 }} {{ n | string ~ 'x' }} {{ 2 * -3 }}",
    "{{ 'abc' is sequence }}{{ none is iterable }}{{ (1, 2) is sequence }}{{ d.items() is iterable }}{{ lst|map('abs') is iterable }}",
    "{{ 'a' in undefined_var }}{{ undefined_var is none }}{{ undefined_var == undefined_var2 }}{{ undefined_var | list }}",
    "{{ d.keys() | sort }}",
    "{{ messages | length }}{{ add_generation_prompt }}{{ bos_token | length }}",
]



@pytest.mark.parametrize("index", range(len(FEATURE_TEMPLATES)))
def test_language_feature_matches_jinja2(index: int, tmp_path: Path):
    require_astr()
    source = FEATURE_TEMPLATES[index]
    template = tmp_path / "feature.jinja"
    template.write_text(source, encoding="utf-8")
    ok, expected = reference_render(source, {**FEATURE_CONTEXT, "messages": [], "add_generation_prompt": False,
                                             "bos_token": "", "eos_token": ""})
    result = run_astr(["--template", str(template),
                       "--messages", write_messages(tmp_path, {"messages": [], **FEATURE_CONTEXT})])
    stderr = result.stderr.decode("utf-8", errors="replace")
    if ok:
        assert result.returncode == 0, f"{source!r}: astr failed where jinja2 rendered {expected!r}:\n{stderr}"
        assert result.stdout.decode("utf-8") == expected, source
    else:
        assert result.returncode == 1, f"{source!r}: jinja2 raised {expected!r}, astr printed {result.stdout!r}"
        assert expected in stderr, f"{source!r}: jinja2 raised {expected!r}; astr said:\n{stderr}"
