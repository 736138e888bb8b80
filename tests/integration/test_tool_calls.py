"""Tool calling through the OpenAI HTTP API with the official client, on the default model
(SmolLM2), whose template writes no tool calls, so the scheduler runs with
--tool-call-parser hermes. tool_choice "required" and a named function are enforced by a
constraint: the output is a call whatever the model would say. For tool_choice auto the output
is fixed with a choice constraint to a Hermes <tool_call> text, so the parser's result is known.
Non-streamed responses and streamed deltas (name first, then argument fragments) give the same
calls, and every body and chunk validates against OpenAI's schemas."""

import json

import jsonschema
import openai
import pytest

import harness
from openai_schemas import validate

SMOL = harness.default_model()
pytestmark = pytest.mark.skipif(SMOL is None, reason="default model not present (scripts/default_model.sh)")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 20},
                                      "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time in a zone",
        "parameters": {"type": "object",
                       "properties": {"zone": {"type": "string", "maxLength": 12}},
                       "required": ["zone"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def smol(log_dir):
    yield from harness.openai_cluster(log_dir, SMOL, worker_flags={"num_pages": 256, "page_size": 16},
                                      scheduler_flags={"tool_call_parser": "hermes"})


def unary(c, **kw):
    body = json.loads(c.client.chat.completions.with_raw_response.create(
        model=c.model, messages=MESSAGES, tools=TOOLS, **kw).content)
    validate(body, "CreateChatCompletionResponse")
    return body["choices"][0]


def streamed(c, **kw):
    """The choice's tool calls joined from the stream's deltas, its content and finish reason."""
    calls, content, finish = {}, "", None
    for chunk in c.client.chat.completions.create(model=c.model, messages=MESSAGES, tools=TOOLS,
                                                  stream=True, **kw):
        d = chunk.to_dict(mode="json")
        validate(d, "CreateChatCompletionStreamResponse")
        if not d["choices"]:
            continue
        ch = d["choices"][0]
        content += ch["delta"].get("content") or ""
        for t in ch["delta"].get("tool_calls") or []:
            if t["index"] not in calls:
                # The first delta of a call carries its id, type and whole name.
                assert t.get("id") and t.get("type") == "function" and t["function"].get("name"), t
                calls[t["index"]] = {"id": t["id"], "name": t["function"]["name"], "arguments": ""}
            else:
                assert "name" not in t["function"], t
            calls[t["index"]]["arguments"] += t["function"].get("arguments") or ""
        finish = ch["finish_reason"] or finish
    return [calls[i] for i in sorted(calls)], content, finish


def as_list(choice):
    calls = choice["message"].get("tool_calls") or []
    ids = [t["id"] for t in calls]
    assert len(set(ids)) == len(ids) and all(i.startswith("call_") for i in ids), ids
    return [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]} for t in calls]


def without_ids(calls):
    return [{"name": c["name"], "arguments": c["arguments"]} for c in calls]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_makes_valid_calls_streamed_or_not(smol, seed):
    kw = dict(tool_choice="required", temperature=1.0, seed=seed, max_tokens=200)
    choice = unary(smol, **kw)
    assert choice["finish_reason"] == "tool_calls", choice
    assert choice["message"]["content"] is None
    calls = as_list(choice)
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call["arguments"]), PARAMS[call["name"]])
    got, content, finish = streamed(smol, **kw)
    assert without_ids(got) == calls
    assert content == "" and finish == "tool_calls"


def test_named_function_is_called(smol):
    kw = dict(tool_choice={"type": "function", "function": {"name": "get_time"}},
              temperature=1.0, seed=4, max_tokens=60)
    choice = unary(smol, **kw)
    calls = as_list(choice)
    assert [c["name"] for c in calls] == ["get_time"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), PARAMS["get_time"])
    assert choice["finish_reason"] == "tool_calls"
    assert without_ids(streamed(smol, **kw)[0]) == calls


FIXED = ('I will check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
         '"unit": "c"}}\n</tool_call>')


def test_auto_parses_the_templates_format(smol):
    kw = dict(tool_choice="auto", max_tokens=80, temperature=0,
              extra_body={"structured_outputs": {"choice": [FIXED]}})
    choice = unary(smol, **kw)
    assert choice["message"]["content"] == "I will check."
    calls = as_list(choice)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"})]
    assert choice["finish_reason"] == "tool_calls"
    got, content, finish = streamed(smol, **kw)
    assert without_ids(got) == calls and content == "I will check." and finish == "tool_calls"


def test_auto_without_a_call_is_plain_content(smol):
    choice = unary(smol, tool_choice="auto", max_tokens=40, temperature=0,
                   extra_body={"structured_outputs": {"choice": ["It is sunny <b>today</b>."]}})
    assert choice["message"]["content"] == "It is sunny <b>today</b>."
    assert "tool_calls" not in choice["message"] or not choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "stop"


def test_none_renders_no_tools_and_parses_nothing(smol):
    choice = unary(smol, tool_choice="none", max_tokens=80, temperature=0,
                   extra_body={"structured_outputs": {"choice": [FIXED]}})
    assert choice["message"]["content"] == FIXED
    assert not choice["message"].get("tool_calls")


@pytest.mark.parametrize("kw,param", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
])
def test_bad_tool_choice_is_400(smol, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        smol.client.chat.completions.create(model=smol.model, messages=MESSAGES, tools=TOOLS,
                                            max_tokens=8, **kw)
    assert e.value.body["param"] == param, e.value.body


def test_required_without_tools_is_400(smol):
    with pytest.raises(openai.BadRequestError) as e:
        smol.client.chat.completions.create(model=smol.model, messages=MESSAGES,
                                            tool_choice="required", max_tokens=8)
    assert e.value.body["param"] == "tool_choice", e.value.body
    with pytest.raises(openai.BadRequestError) as e:
        smol.client.chat.completions.create(model=smol.model, messages=MESSAGES, max_tokens=8,
                                            tools=[{"type": "function", "function": {}}])
    assert e.value.body["param"] == "tools[0].function.name", e.value.body
