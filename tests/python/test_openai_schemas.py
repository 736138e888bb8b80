"""The OpenAPI-schema validator of the HTTP tests (tests/integration/openai_schemas.py) is not
vacuous: hand-written responses shaped like OpenAI's documented examples pass, and each one broken
in a single way fails, naming the place. Needs no server."""

import copy
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

import openai_schemas  # noqa: E402
from openai_schemas import SchemaError, validate  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(openai_schemas.SPEC_PATH),
                                reason=f"{openai_schemas.SPEC_PATH} missing")

TOKEN_LOGPROB = {"token": " Hi", "logprob": -0.25, "bytes": [32, 72, 105],
                 "top_logprobs": [{"token": " Hi", "logprob": -0.25, "bytes": [32, 72, 105]},
                                  {"token": " Ho", "logprob": -1.75, "bytes": None}]}

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "stories260K",
    "choices": [{
        "index": 0,
        "message": {"role": "assistant", "content": "Hello there", "refusal": None},
        "logprobs": {"content": [TOKEN_LOGPROB], "refusal": None},
        "finish_reason": "length",
    }],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}

CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "stories260K",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "logprobs": None,
                 "finish_reason": None}],
}

USAGE_CHUNK = dict(CHUNK, choices=[], usage={"prompt_tokens": 5, "completion_tokens": 2,
                                             "total_tokens": 7})

COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1700000000,
    "model": "stories260K",
    "choices": [{
        "index": 0,
        "text": ", there was",
        "logprobs": {"tokens": [",", " there"], "token_logprobs": [-0.1, -0.2],
                     "top_logprobs": [{",": -0.1, ".": -2.0}, {" there": -0.2}],
                     "text_offset": [16, 17]},
        "finish_reason": "stop",
    }],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}

MODELS = {"object": "list", "data": [{"id": "stories260K", "object": "model", "created": 1700000000,
                                      "owned_by": "astr"}]}

ERROR = {"error": {"message": "temperature must be in [0, 2], got -1", "type": "invalid_request_error",
                   "param": "temperature", "code": None}}


def broken(value, path, new=None, delete=False):
    """A deep copy of `value` with the item at `path` (a list of keys) replaced or deleted."""
    out = copy.deepcopy(value)
    target = out
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = new
    return out


# A completions stream chunk: finish_reason null until the last (the derived schema).
COMPLETION_CHUNK = broken(broken(COMPLETION, ["choices", 0, "finish_reason"], None), ["usage"], delete=True)

# The schemas (components/schemas/<name>) the cases are checked against.
CHAT_S, CHUNK_S = "CreateChatCompletionResponse", "CreateChatCompletionStreamResponse"
COMPLETION_S, COMPLETION_CHUNK_S = "CreateCompletionResponse", "CreateCompletionStreamResponse"
MODELS_S, ERROR_S = "ListModelsResponse", "ErrorResponse"

VALID = [
    ("chat", CHAT, CHAT_S),
    ("chat_no_logprobs", broken(CHAT, ["choices", 0, "logprobs"], None), CHAT_S),
    ("chunk", CHUNK, CHUNK_S),
    # finish_reason and usage are `nullable: true` in the spec (an OpenAPI 3.0 keyword): null passes.
    ("chunk_usage_null", dict(CHUNK, usage=None), CHUNK_S),
    ("chunk_final", broken(CHUNK, ["choices", 0, "finish_reason"], "stop"), CHUNK_S),
    ("chunk_usage_only", USAGE_CHUNK, CHUNK_S),
    ("chunk_logprobs",
     broken(CHUNK, ["choices", 0, "logprobs"], {"content": [TOKEN_LOGPROB], "refusal": None}),
     CHUNK_S),
    ("completion", COMPLETION, COMPLETION_S),
    ("completion_no_usage", broken(COMPLETION, ["usage"], delete=True), COMPLETION_S),
    ("completion_chunk", COMPLETION_CHUNK, COMPLETION_CHUNK_S),
    ("completion_chunk_last", COMPLETION, COMPLETION_CHUNK_S),
    ("completion_chunk_usage_null", dict(COMPLETION_CHUNK, usage=None), COMPLETION_CHUNK_S),
    ("completion_usage_only", dict(COMPLETION_CHUNK, choices=[], usage=COMPLETION["usage"]),
     COMPLETION_CHUNK_S),
    ("models", MODELS, MODELS_S),
    ("error", ERROR, ERROR_S),
    ("error_null_param", broken(ERROR, ["error", "param"], None), ERROR_S),
    # Fields the spec does not name are allowed (vLLM's token_ids, prompt_token_ids).
    ("chat_extra_fields", dict(broken(CHAT, ["choices", 0, "token_ids"], [5, 6]), prompt_token_ids=[1, 2]),
     CHAT_S),
]

# (case, value, schema, text the error must contain: the failing place)
INVALID = [
    ("chat_missing_choices", broken(CHAT, ["choices"], delete=True), CHAT_S, "choices"),
    ("chat_created_string", broken(CHAT, ["created"], "1700000000"), CHAT_S, "created"),
    ("chat_created_float", broken(CHAT, ["created"], 1.5), CHAT_S, "created"),
    ("chat_wrong_object", broken(CHAT, ["object"], "chat.completion.chunk"), CHAT_S,
     "object"),
    ("chat_bad_finish", broken(CHAT, ["choices", 0, "finish_reason"], "eos"), CHAT_S,
     "finish_reason"),
    ("chat_null_finish", broken(CHAT, ["choices", 0, "finish_reason"], None), CHAT_S,
     "finish_reason"),
    ("chat_missing_logprobs_key", broken(CHAT, ["choices", 0, "logprobs"], delete=True),
     CHAT_S, "logprobs"),
    ("chat_message_role", broken(CHAT, ["choices", 0, "message", "role"], "user"), CHAT_S,
     "role"),
    ("chat_message_no_refusal", broken(CHAT, ["choices", 0, "message", "refusal"], delete=True),
     CHAT_S, "refusal"),
    ("chat_logprob_no_bytes", broken(CHAT, ["choices", 0, "logprobs", "content", 0, "bytes"], delete=True),
     CHAT_S, "bytes"),
    ("chat_top_logprob_string", broken(CHAT, ["choices", 0, "logprobs", "content", 0, "top_logprobs", 0,
                                              "logprob"], "-0.25"), CHAT_S, "logprob"),
    ("chat_usage_no_total", broken(CHAT, ["usage", "total_tokens"], delete=True), CHAT_S,
     "total_tokens"),
    ("chat_index_string", broken(CHAT, ["choices", 0, "index"], "0"), CHAT_S, "index"),
    ("chunk_bad_finish", broken(CHUNK, ["choices", 0, "finish_reason"], "eos"),
     CHUNK_S, "finish_reason"),
    ("chunk_missing_delta", broken(CHUNK, ["choices", 0, "delta"], delete=True),
     CHUNK_S, "delta"),
    ("chunk_content_number", broken(CHUNK, ["choices", 0, "delta", "content"], 5),
     CHUNK_S, "content"),
    ("chunk_wrong_object", broken(CHUNK, ["object"], "chat.completion"), CHUNK_S,
     "object"),
    ("chunk_usage_string", dict(CHUNK, usage="7"), CHUNK_S, "usage"),
    ("completion_text_number", broken(COMPLETION, ["choices", 0, "text"], 5), COMPLETION_S, "text"),
    ("completion_missing_id", broken(COMPLETION, ["id"], delete=True), COMPLETION_S, "id"),
    ("completion_token_logprobs_strings", broken(COMPLETION, ["choices", 0, "logprobs", "token_logprobs"],
                                                 ["a"]), COMPLETION_S, "token_logprobs"),
    ("completion_top_logprobs_list",
     broken(COMPLETION, ["choices", 0, "logprobs", "top_logprobs"], [[",", -0.1]]),
     COMPLETION_S, "top_logprobs"),
    ("completion_null_finish", COMPLETION_CHUNK, COMPLETION_S, "finish_reason"),
    ("completion_chunk_bad_finish", broken(COMPLETION_CHUNK, ["choices", 0, "finish_reason"], "eos"),
     COMPLETION_CHUNK_S, "finish_reason"),
    ("completion_chunk_text_number", broken(COMPLETION_CHUNK, ["choices", 0, "text"], 1),
     COMPLETION_CHUNK_S, "text"),
    ("models_no_owner", broken(MODELS, ["data", 0, "owned_by"], delete=True), MODELS_S, "owned_by"),
    ("models_object", broken(MODELS, ["object"], "models"), MODELS_S, "object"),
    ("error_missing_param", broken(ERROR, ["error", "param"], delete=True), ERROR_S, "param"),
    ("error_message_number", broken(ERROR, ["error", "message"], 400), ERROR_S, "message"),
    ("error_flat", ERROR["error"], ERROR_S, "error"),
    ("not_an_object", [CHAT], CHAT_S, "object"),
]


@pytest.mark.parametrize("case,value,schema", VALID, ids=[c[0] for c in VALID])
def test_valid_values_pass(case, value, schema):
    validate(value, schema)


@pytest.mark.parametrize("case,value,schema,where", INVALID, ids=[c[0] for c in INVALID])
def test_broken_values_fail_naming_the_place(case, value, schema, where):
    with pytest.raises(SchemaError) as e:
        validate(value, schema)
    assert where in str(e.value), str(e.value)
    assert openai_schemas.errors(value, schema)


def test_unknown_schema_name():
    with pytest.raises(KeyError):
        validate({}, "NoSuchSchema")


def test_no_openapi_only_keyword_is_left():
    # A leftover `nullable` or `discriminator` would be ignored by JSON Schema, silently.
    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                if k != "properties":
                    assert k != "nullable" and k != "discriminator" and not k.startswith("x-"), path + [k]
                walk(v, path + [k])
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, path + [i])

    walk(openai_schemas.document()["components"]["schemas"], [])


def test_every_reference_resolves():
    schemas = openai_schemas.document()["components"]["schemas"]
    refs = set()

    def walk(x):
        if isinstance(x, dict):
            r = x.get("$ref")
            if isinstance(r, str):
                refs.add(r)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(schemas)
    assert refs
    prefix = "#/components/schemas/"
    missing = [r for r in refs if not r.startswith(prefix) or r[len(prefix):] not in schemas]
    assert not missing, missing


def test_cached_document_is_keyed_by_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTR_BIN_DIR", str(tmp_path / "bin"))
    spec = tmp_path / "openapi.yaml"
    spec.write_text("openapi: 3.1.0\ncomponents:\n  schemas:\n    A:\n      type: integer\n"
                    "      nullable: true\n")
    doc = openai_schemas.document(str(spec))
    assert doc["components"]["schemas"]["A"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert list((tmp_path / ".cache").glob("openai-openapi-*.pickle"))
    time.sleep(0.01)
    spec.write_text("openapi: 3.1.0\ncomponents:\n  schemas:\n    A:\n      type: string\n")
    os.utime(spec, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert openai_schemas.document(str(spec))["components"]["schemas"]["A"] == {"type": "string"}
