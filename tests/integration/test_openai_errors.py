"""Malformed requests to the OpenAI-compatible HTTP API, sent as raw bytes: each gets a 4xx (the
exact one the API promises), an OpenAI error body (`ErrorResponse` of the published schema) whose
`param` names the field, and never a 5xx; between any two of them a valid request is served.

Completions run on the module's stories260K cluster (--max-n 4); chat cases on the default model,
which has a chat template (skipped when it is not present). Limits come from the gRPC
GetModelInfo (vocab, context, max n, stop strings) or the model file's documented facts."""

import json
import re
import tempfile
import threading

import openai
import pytest

import harness
import openai_http as oh
from harness import STORIES_CONTEXT, STORIES_VOCAB
from openai_schemas import validate

MAX_N = 4  # the module cluster's --max-n
MODEL = "<model>"  # replaced by the served model name
SMOL = harness.default_model()
# common/http's documented request-head limit (http_server.h); the body limit is set by a flag.
MAX_HEADER_BYTES = 16 << 10


def completion(**fields):
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4}
    body.update(fields)
    return body


def without(body, key):
    body = dict(body)
    del body[key]
    return body


# (case, body: bytes / a JSON value with MODEL placeholders, status, param or None)
COMPLETION_CASES = [
    ("bad_json", b'{"model": "<model>", "prompt": ', 400, None),
    ("trailing_garbage", b'{"model": "<model>", "prompt": "hi"} x', 400, None),
    ("json_array", b"[1, 2]", 400, None),
    ("json_string", b'"hello"', 400, None),
    ("json_null", b"null", 400, None),
    ("empty_body", b"", 400, None),
    ("invalid_utf8", b'{"model": "<model>", "prompt": "a\xff\xfeb", "max_tokens": 4}', 400, None),
    ("deeply_nested", b'{"model": "<model>", "prompt": ' + b"[" * 50000 + b"]" * 50000 + b"}", 400, None),
    ("missing_prompt", without(completion(), "prompt"), 400, "prompt"),
    ("prompt_number", completion(prompt=5), 400, "prompt"),
    ("prompt_object", completion(prompt={"text": "hi"}), 400, "prompt"),
    ("prompt_empty_list", completion(prompt=[]), 400, "prompt"),
    ("prompt_mixed_list", completion(prompt=[1, "a"]), 400, "prompt"),
    ("prompt_token_out_of_vocab", completion(prompt=[1, STORIES_VOCAB]), 400, "prompt"),
    ("prompt_token_negative", completion(prompt=[1, -5]), 400, "prompt"),
    ("prompt_longer_than_context", completion(prompt=[1] + [300] * STORIES_CONTEXT), 400, "prompt"),
    ("model_number", completion(model=5), 400, "model"),
    ("temperature_negative", completion(temperature=-1), 400, "temperature"),
    ("temperature_string", completion(temperature="hot"), 400, "temperature"),
    ("top_p_zero", completion(top_p=0), 400, "top_p"),
    ("top_p_two", completion(top_p=2), 400, "top_p"),
    ("n_zero", completion(n=0), 400, "n"),
    ("n_1000", completion(n=1000), 400, "n"),
    ("n_string", completion(n="2"), 400, "n"),
    ("max_tokens_zero", completion(max_tokens=0), 400, "max_tokens"),
    ("max_tokens_negative", completion(max_tokens=-3), 400, "max_tokens"),
    ("max_tokens_fraction", completion(max_tokens=1.5), 400, "max_tokens"),
    ("max_tokens_huge", completion(max_tokens=10**9), 400, "max_tokens"),
    ("max_tokens_beyond_context", completion(max_tokens=STORIES_CONTEXT), 400, "max_tokens"),
    ("max_tokens_overflow", completion(max_tokens=2**64), 400, "max_tokens"),
    ("logprobs_21", completion(logprobs=21), 400, "logprobs"),
    ("logprobs_negative", completion(logprobs=-1), 400, "logprobs"),
    ("logit_bias_bad_key", completion(logit_bias={"abc": 1}), 400, "logit_bias"),
    ("logit_bias_out_of_range", completion(logit_bias={"5": 101}), 400, "logit_bias"),
    ("logit_bias_id_out_of_vocab", completion(logit_bias={str(STORIES_VOCAB): 1}), 400, "logit_bias"),
    ("logit_bias_not_object", completion(logit_bias=[1, 2]), 400, "logit_bias"),
    ("presence_penalty_3", completion(presence_penalty=3), 400, "presence_penalty"),
    ("frequency_penalty_minus_3", completion(frequency_penalty=-3), 400, "frequency_penalty"),
    ("repetition_penalty_zero", completion(repetition_penalty=0), 400, "repetition_penalty"),
    ("min_p_two", completion(min_p=2), 400, "min_p"),
    ("stop_number", completion(stop=5), 400, "stop"),
    ("stop_list_of_numbers", completion(stop=[1, 2]), 400, "stop"),
    ("stop_empty_string", completion(stop=[""]), 400, "stop"),
    ("stop_token_ids_out_of_vocab", completion(stop_token_ids=[STORIES_VOCAB]), 400, "stop_token_ids"),
    ("min_tokens_above_max", completion(min_tokens=10, max_tokens=5), 400, "min_tokens"),
    ("seed_string", completion(seed="x"), 400, "seed"),
    ("stream_string", completion(stream="yes"), 400, "stream"),
    ("echo_number", completion(echo=3), 400, "echo"),
    ("stream_options_not_object", completion(stream=True, stream_options=5), 400, "stream_options"),
]

CHAT_MESSAGES = [{"role": "user", "content": "Hi"}]


def chat_body(**fields):
    body = {"model": MODEL, "messages": CHAT_MESSAGES, "max_tokens": 2}
    body.update(fields)
    return body


CHAT_CASES = [
    ("missing_messages", without(chat_body(), "messages"), 400, "messages"),
    ("messages_string", chat_body(messages="hi"), 400, "messages"),
    ("messages_empty", chat_body(messages=[]), 400, "messages"),
    ("message_not_object", chat_body(messages=["hi"]), 400, "messages[0]"),
    ("bad_role", chat_body(messages=[{"role": "wizard", "content": "hi"}]), 400, "messages[0].role"),
    ("missing_role", chat_body(messages=[{"content": "hi"}]), 400, "messages[0].role"),
    ("content_number", chat_body(messages=[{"role": "user", "content": 5}]), 400, "messages[0].content"),
    ("content_part_unknown_type",
     chat_body(messages=[{"role": "user", "content": [{"type": "hologram", "hologram": "x"}]}]), 400,
     "messages[0].content"),
    ("content_part_without_text", chat_body(messages=[{"role": "user", "content": [{"type": "text"}]}]), 400,
     "messages[0].content"),
    ("second_message_bad", chat_body(messages=CHAT_MESSAGES + [{"role": "user", "content": {"a": 1}}]), 400,
     "messages[1].content"),
    ("top_logprobs_21", chat_body(logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    ("logprobs_string", chat_body(logprobs="yes"), 400, "logprobs"),
    ("max_completion_tokens_zero", chat_body(max_completion_tokens=0), 400, "max_completion_tokens"),
    ("tools_not_list", chat_body(tools="x"), 400, "tools"),
    ("chat_template_kwargs_not_object", chat_body(chat_template_kwargs=[1]), 400, "chat_template_kwargs"),
]


def fill(body, model):
    if isinstance(body, bytes):
        return body.replace(b"<model>", model.encode())
    return json.loads(json.dumps(body).replace(json.dumps(MODEL)[1:-1], model))


def names_field(param, want):
    return param == want or param.startswith(want + ".") or param.startswith(want + "[")


def check_error(r, status, param, case):
    assert r.status == status, f"{case}: want {status}, got {r}"
    assert r.content_type.startswith("application/json"), f"{case}: {r.headers}"
    body = r.json()
    validate(body, "ErrorResponse")
    err = body["error"]
    if status == 400:
        assert err["type"] == "invalid_request_error", f"{case}: {err}"
    if param is not None:
        assert err["param"] is not None and names_field(err["param"], param), \
            f"{case}: param {err['param']!r}, want {param!r} ({err['message']!r})"
        assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(param.split('[')[0])}(?![A-Za-z0-9_])",
                         err["message"]), f"{case}: message {err['message']!r} names no {param!r}"
    return err


def assert_serves(c, model):
    assert c.scheduler.proc.proc.poll() is None, c.scheduler.proc.log_tail()
    r = oh.post(c.scheduler.http_address, "/v1/completions",
                {"model": model, "prompt": [1, 403, 407, 261, 378], "max_tokens": 4, "temperature": 0,
                 "return_token_ids": True})
    assert r.status == 200, r
    ref = harness.unary(c.stub, harness.request(token_ids=[1, 403, 407, 261, 378], max_tokens=4)).one()
    assert r.json()["choices"][0]["token_ids"] == ref.token_ids


@pytest.fixture(scope="module")
def model(cluster):
    return oh.served_model(cluster)


@pytest.mark.parametrize("case,body,status,param", COMPLETION_CASES, ids=[c[0] for c in COMPLETION_CASES])
def test_bad_completion(cluster, model, case, body, status, param):
    r = oh.post(cluster.scheduler.http_address, "/v1/completions", fill(body, model))
    check_error(r, status, param, case)
    assert_serves(cluster, model)


# Bad values per field, for requests the fixed cases above do not spell out: each is put, alone,
# into a body whose other fields are valid and drawn at random (so the error must come from the
# bad field whatever else the body holds); every 400 must name that field in `param`.
BAD_VALUES = {
    "temperature": [-0.5, "0.7", [1], 1e39],
    "top_p": [0, -1, 1.01, "x", {}],
    "top_k": [-2, 1.5, "k"],
    "min_p": [-0.1, 1.5, "m"],
    "repetition_penalty": [0, -1, "r"],
    "presence_penalty": [2.5, -2.01, "p"],
    "frequency_penalty": [3, -9, [0]],
    "max_tokens": [0, -1, 2.5, "8", STORIES_CONTEXT + 1],
    "min_tokens": [-1, 1.5, "2"],
    "n": [0, MAX_N + 1, "1", 1.5],
    "logprobs": [-1, 21, "2", 1.5],
    "seed": ["s", 1.5, [1]],
    "stop": [7, [1], [""], {"a": 1}],
    "stop_token_ids": [[STORIES_VOCAB], [-1], "1", [1.5]],
    "logit_bias": [{"x": 1}, {"1": 101}, {"1": -101}, {str(STORIES_VOCAB + 3): 0}, [1]],
    "echo": ["true", 2],
    "ignore_eos": ["no", 3],
    "skip_special_tokens": [0.5, "yes"],
    "include_stop_str_in_output": ["y", 7],
}
VALID_EXTRAS = {
    "temperature": [0, 0.5, 1.2], "top_p": [0.5, 1], "top_k": [0, 5], "min_p": [0, 0.1],
    "repetition_penalty": [1, 1.2], "presence_penalty": [0, 0.5], "frequency_penalty": [0, -0.5],
    "seed": [1, 99], "stop": ["zz", ["a b", "q"]], "n": [1, 2], "logprobs": [0, 3],
    "logit_bias": [{"5": 1.5}], "ignore_eos": [False, True], "echo": [False, True],
}


def generated_cases(count, seed):
    import random

    rng = random.Random(seed)
    fields = sorted(BAD_VALUES)
    cases = []
    for i in range(count):
        bad_field = fields[i % len(fields)]
        bad = rng.choice(BAD_VALUES[bad_field])
        body = completion(max_tokens=rng.choice([1, 3, 8]))
        for extra in rng.sample(sorted(VALID_EXTRAS), rng.randint(0, 5)):
            if extra != bad_field:
                body[extra] = rng.choice(VALID_EXTRAS[extra])
        if bad_field == "min_tokens":
            body["max_tokens"] = 8
        body[bad_field] = bad
        cases.append((f"{bad_field}={bad!r}", body, bad_field))
    return cases


def test_generated_bad_fields_name_their_param(cluster, model):
    for case, body, field in generated_cases(120, seed=37):
        r = oh.post(cluster.scheduler.http_address, "/v1/completions", fill(body, model))
        check_error(r, 400, field, f"{case} in {body}")
    assert_serves(cluster, model)


def test_bad_completion_streamed_is_refused_before_the_stream(cluster, model):
    # A streaming request that is invalid gets the plain error, not an event stream.
    r = oh.post(cluster.scheduler.http_address, "/v1/completions", completion(model=model, stream=True,
                                                                              temperature=-1))
    check_error(r, 400, "temperature", "stream_temperature")
    assert_serves(cluster, model)


def test_too_many_stop_strings(cluster, model):
    limit = cluster.scheduler.model_info().max_stop_strings
    assert limit > 0
    r = oh.post(cluster.scheduler.http_address, "/v1/completions",
                completion(model=model, stop=[f"s{i}" for i in range(limit + 1)]))
    check_error(r, 400, "stop", "stop_too_many")
    ok = oh.post(cluster.scheduler.http_address, "/v1/completions",
                 completion(model=model, stop=[f"s{i}" for i in range(limit)]))
    assert ok.status == 200, ok


def test_unknown_model(cluster, model):
    for path, body in [("/v1/completions", completion(model="no-such-model")),
                       ("/v1/chat/completions", chat_body(model="no-such-model"))]:
        r = oh.post(cluster.scheduler.http_address, path, body)
        err = check_error(r, 404, None, f"unknown model on {path}")
        assert err["code"] == "model_not_found", err
        assert "no-such-model" in err["message"], err
    assert_serves(cluster, model)


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/v1/completions", 405),
    ("PUT", "/v1/chat/completions", 405),
    ("DELETE", "/v1/models", 405),
    ("POST", "/v1/models", 405),
    ("POST", "/v1/no-such-route", 404),
    ("GET", "/nope", 404),
    ("GET", "/v1", 404),
])
def test_wrong_route_or_method(cluster, model, method, path, status):
    body = completion(model=model) if method in ("POST", "PUT") else None
    r = oh.call(cluster.scheduler.http_address, method, path, body)
    check_error(r, status, None, f"{method} {path}")
    assert_serves(cluster, model)


def test_body_too_large(make_cluster):
    c = make_cluster(scheduler_flags={"http_max_body_mb": 1})
    model = oh.served_model(c)
    prompt = "a" * ((1 << 20) + 1024)
    r = oh.post(c.scheduler.http_address, "/v1/completions", completion(model=model, prompt=prompt))
    check_error(r, 413, None, "body_too_large")
    assert_serves(c, model)
    # Just under the limit is parsed (and refused for what it says, not for its size).
    r = oh.post(c.scheduler.http_address, "/v1/completions",
                completion(model=model, prompt="a" * ((1 << 20) - 1024), max_tokens=0))
    check_error(r, 400, "max_tokens", "body_under_limit")
    assert_serves(c, model)


def test_header_too_large(cluster, model):
    r = oh.post(cluster.scheduler.http_address, "/v1/completions", completion(model=model),
                headers={"X-Padding": "p" * (MAX_HEADER_BYTES + 1024)})
    assert 400 <= r.status < 500, r
    if r.body:
        check_error(r, r.status, None, "header_too_large")
    assert_serves(cluster, model)


def test_no_5xx_for_a_burst_of_garbage(cluster, model):
    # Bytes that are not HTTP at all, on many connections at once: no crash, no 5xx.
    def one(i):
        try:
            return oh.exchange(cluster.scheduler.http_address, b"\x16\x03\x01\x02\x00garbage %d\r\n\r\n" % i,
                               timeout=30)
        except AssertionError:
            return None  # closed without an answer: acceptable for non-HTTP bytes

    threads, results = [], [None] * 16
    for i in range(16):
        t = threading.Thread(target=lambda i=i: results.__setitem__(i, one(i)))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(60)
    for r in results:
        assert r is None or 400 <= r.status < 500, r
    assert_serves(cluster, model)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"])
def test_numbers_past_the_double_range_are_400(cluster, model, path):
    # A fuzz finding: JSON's grammar allows 1e999, which the parser refuses with an exception of
    # its own (out_of_range, not parse_error); it escaped the body parser and ended the scheduler.
    for number in ("1e999", "-4e400", "1" + "0" * 400 + "e9999"):
        body = '{"model": %s, "prompt": "x", "messages": [], "tokens": [1]}' % number
        r = oh.post(cluster.scheduler.http_address, path, body)
        err = check_error(r, 400, None, f"{path} {number[:12]}")
        assert "not valid JSON" in err["message"], err
    assert_serves(cluster, model)


def test_openai_client_raises_bad_request(cluster, model):
    client = oh.openai_client(cluster)
    try:
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=model, prompt="Once", max_tokens=4, temperature=-1)
        assert e.value.status_code == 400
        assert "temperature" in str(e.value), str(e.value)
        validate(e.value.response.json(), "ErrorResponse")
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=model, prompt="Once", max_tokens=4, top_p=2)
        assert "top_p" in str(e.value)
        with pytest.raises(openai.NotFoundError) as e:
            client.completions.create(model="no-such-model", prompt="Once", max_tokens=4)
        assert e.value.status_code == 404
        # stories260K has no chat template: a chat request is the client's mistake, not a 5xx.
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model, messages=CHAT_MESSAGES, max_tokens=4)
        assert e.value.status_code == 400
    finally:
        client.close()
    assert_serves(cluster, model)


# ---------------------------------------------------------------------------------------------
# Chat (needs a chat template)


@pytest.fixture(scope="module")
def smol(log_dir):
    if SMOL is None:
        pytest.skip("default model not present (scripts/default_model.sh)")
    c = harness.make_cluster(tempfile.mkdtemp(dir=log_dir), model=SMOL,
                             worker_flags={"num_pages": 128, "page_size": 16})
    c.model = oh.served_model(c)
    yield c
    c.close()


def assert_chat_serves(c):
    assert c.scheduler.proc.proc.poll() is None, c.scheduler.proc.log_tail()
    r = oh.post(c.scheduler.http_address, "/v1/chat/completions",
                {"model": c.model, "messages": CHAT_MESSAGES, "max_tokens": 2, "temperature": 0})
    assert r.status == 200, r
    validate(r.json(), "CreateChatCompletionResponse")


@pytest.mark.parametrize("case,body,status,param", CHAT_CASES, ids=[c[0] for c in CHAT_CASES])
def test_bad_chat(smol, case, body, status, param):
    r = oh.post(smol.scheduler.http_address, "/v1/chat/completions", fill(body, smol.model))
    check_error(r, status, param, case)
    assert_chat_serves(smol)


def test_openai_client_chat_bad_request(smol):
    client = oh.openai_client(smol)
    try:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=smol.model, messages=[{"role": "wizard", "content": "hi"}],
                                           max_tokens=2)
        assert "messages[0].role" in str(e.value), str(e.value)
    finally:
        client.close()
    assert_chat_serves(smol)


# ---------------------------------------------------------------------------------------------
# Admission: a full queue is 429 (or 503) with Retry-After, never an error body of another shape


def test_full_queue_is_429_with_retry_after(make_cluster):
    # One running sequence and one waiting request at most: a burst must see refusals.
    c = make_cluster(scheduler_flags={"max_queued_requests": 1, "max_running": 1})
    model = oh.served_model(c)
    burst = 24
    start = threading.Barrier(burst)
    results = [None] * burst

    def run(i):
        start.wait(timeout=30)
        results[i] = oh.post(c.scheduler.http_address, "/v1/completions",
                             completion(model=model, prompt=[1, 403, 407, 261 + i], max_tokens=32))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    refused = [r for r in results if r.status != 200]
    print(f"{len(refused)} of {burst} refused")
    assert refused, "a burst over the queue bound refused nothing"
    assert len(refused) < burst
    for r in refused:
        assert r.status in (429, 503), r
        assert "retry-after" in r.headers and int(r.headers["retry-after"]) >= 0, r.headers
        validate(r.json(), "ErrorResponse")
    for r in results:
        if r.status == 200:
            validate(r.json(), "CreateCompletionResponse")
    harness.wait_pages_free(c, timeout=20)
    assert_serves(c, model)


def test_health_and_requests_503_without_a_worker(make_cluster):
    c = make_cluster(scheduler_flags={"worker_down_after_ms": 300})
    model = oh.served_model(c)
    assert oh.get(c.scheduler.http_address, "/health").status == 200
    c.workers[0].proc.kill()
    harness.wait_until(lambda: oh.get(c.scheduler.http_address, "/health").status == 503, timeout=30,
                       interval=0.1)
    r = oh.post(c.scheduler.http_address, "/v1/completions", completion(model=model))
    assert r.status == 503, r
    assert "retry-after" in r.headers, r.headers
    validate(r.json(), "ErrorResponse")
