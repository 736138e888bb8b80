"""The OpenAI-compatible HTTP API through the official `openai` client (sync and asyncio) and raw
HTTP: completions on stories260K (the module cluster), chat on the default model (SmolLM2, when
present). Every response and stream chunk validates against OpenAI's published schemas
(/work/shared/openai/openapi.yaml); greedy outputs equal the gRPC API's on the same cluster, and
sampling fields reach the sampler as they do through gRPC (same seed, same tokens)."""

import asyncio
import json
import math

import pytest

import harness
import openai_http as oh
from harness import STORIES, request, unary
from openai_schemas import validate

ONCE = "Once upon a time"
ONCE_IDS = [1, 403, 407, 261, 378]  # models/README.md
# llama.cpp's greedy continuation of ONCE (models/README.md).
GOLDEN_IDS = [432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337]
PROMPTS = [ONCE, "Tom and Sue went to the", "The little dog"]
FINISH_HTTP = {harness.FINISH["length"]: "length", harness.FINISH["stop"]: "stop",
               harness.FINISH["eos"]: "stop"}

SMOL = harness.default_model()
needs_smol = pytest.mark.skipif(SMOL is None, reason="default model not present (scripts/default_model.sh)")


@pytest.fixture(scope="module")
def model(cluster):
    return oh.served_model(cluster)


@pytest.fixture(scope="module")
def client(cluster):
    c = oh.openai_client(cluster)
    yield c
    c.close()


@pytest.fixture(scope="module")
def smol(log_dir):
    if SMOL is None:
        pytest.skip("default model not present")
    yield from harness.openai_cluster(log_dir, SMOL, worker_flags={"num_pages": 256, "page_size": 16},
                                      scheduler_flags={"max_n": 4})


def raw_json(raw_response):
    """The JSON body of a `with_raw_response` call, as the server sent it."""
    return json.loads(raw_response.content)


def completion(client, **kw):
    body = raw_json(client.completions.with_raw_response.create(**kw))
    validate(body, "CreateCompletionResponse")
    return body


def chat(client, **kw):
    body = raw_json(client.chat.completions.with_raw_response.create(**kw))
    validate(body, "CreateChatCompletionResponse")
    return body


def chunks_of(stream, schema):
    out = []
    for chunk in stream:
        d = chunk.to_dict(mode="json")
        validate(d, schema)
        out.append(d)
    return out


def grpc_greedy(c, **kw):
    return unary(c.stub, request(return_prompt_ids=True, **kw))


def assert_same_as_grpc(choice, sample, ids_key="token_ids"):
    assert choice[ids_key] == sample.token_ids or (
        # The service may leave a final EOS id out of token_ids (the gRPC contract lists it).
        sample.finish_reason == harness.FINISH["eos"] and choice[ids_key] == sample.token_ids[:-1]
    ), f"HTTP ids {choice[ids_key]} != gRPC ids {sample.token_ids}"
    text = choice["text"] if "text" in choice else choice["message"]["content"]
    assert text == sample.text
    assert choice["finish_reason"] == FINISH_HTTP[sample.finish_reason]


# ---------------------------------------------------------------------------------------------
# Models, health, tokenize


def test_models_list(cluster, client, model):
    r = oh.get(cluster.scheduler.http_address, "/v1/models")
    assert r.status == 200 and r.content_type.startswith("application/json"), r
    validate(r.json(), "ListModelsResponse")
    ids = [m.id for m in client.models.list()]
    assert ids and model in ids
    assert cluster.scheduler.model_info().model_name in ids


def test_health(cluster):
    r = oh.get(cluster.scheduler.http_address, "/health")
    assert r.status == 200, r


@pytest.mark.parametrize("text", [ONCE, "naïve café 🙂", "  spaces  "])
@pytest.mark.parametrize("add_special", [None, True, False])
def test_tokenize_equals_grpc(cluster, text, add_special):
    body = {"prompt": text}
    want_req = harness.pb.TokenizeRequest(text=text)
    if add_special is not None:
        body["add_special_tokens"] = add_special
        want_req.add_special_tokens = add_special
    want = cluster.stub.Tokenize(want_req, timeout=harness.RPC_TIMEOUT_S)
    r = oh.post(cluster.scheduler.http_address, "/tokenize", body)
    assert r.status == 200, r
    got = r.json()
    assert got["tokens"] == list(want.token_ids)
    assert got["count"] == len(want.token_ids)
    assert got["max_model_len"] == cluster.scheduler.model_info().max_context_tokens


def test_detokenize_equals_grpc(cluster):
    ids = ONCE_IDS + GOLDEN_IDS
    want = cluster.stub.Detokenize(harness.pb.DetokenizeRequest(token_ids=ids), timeout=harness.RPC_TIMEOUT_S)
    r = oh.post(cluster.scheduler.http_address, "/detokenize", {"tokens": ids})
    assert r.status == 200, r
    assert r.json()["prompt"] == want.text


# ---------------------------------------------------------------------------------------------
# Completions (stories260K)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_greedy_equals_grpc(cluster, client, model, prompt):
    body = completion(client, model=model, prompt=prompt, max_tokens=16, temperature=0,
                      extra_body={"return_token_ids": True})
    ref = grpc_greedy(cluster, text=prompt, max_tokens=16)
    want = ref.one()
    assert body["object"] == "text_completion" and body["model"] == model
    assert len(body["choices"]) == 1 and body["choices"][0]["index"] == 0
    assert_same_as_grpc(body["choices"][0], want)
    assert body["prompt_token_ids"] == ref.prompt_ids
    u = body["usage"]
    assert u["prompt_tokens"] == len(ref.prompt_ids)
    assert u["completion_tokens"] == len(body["choices"][0]["token_ids"]) == ref.usage.completion_tokens
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    if prompt == ONCE:
        assert body["choices"][0]["token_ids"] == GOLDEN_IDS


def test_completion_equals_offline_engine(client, model):
    want = harness.offline_run(STORIES, prompt=ONCE, max_tokens=24)
    body = completion(client, model=model, prompt=ONCE, max_tokens=24, temperature=0,
                      extra_body={"return_token_ids": True})
    c = body["choices"][0]
    assert c["text"] == want["text"] and c["token_ids"] == want["token_ids"][:len(c["token_ids"])]
    assert body["prompt_token_ids"] == want["prompt_ids"]


def test_model_id_and_name_both_accepted(cluster, client, model):
    name = cluster.scheduler.model_info().model_name
    a = completion(client, model=model, prompt=ONCE, max_tokens=4, temperature=0)
    b = completion(client, model=name, prompt=ONCE, max_tokens=4, temperature=0)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]


def test_token_id_prompts(cluster, client, model):
    by_text = completion(client, model=model, prompt=ONCE, max_tokens=12, temperature=0,
                         extra_body={"return_token_ids": True})
    by_ids = completion(client, model=model, prompt=ONCE_IDS, max_tokens=12, temperature=0,
                        extra_body={"return_token_ids": True})
    assert by_ids["choices"][0]["token_ids"] == by_text["choices"][0]["token_ids"]
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"]
    assert by_ids["usage"]["prompt_tokens"] == len(ONCE_IDS)
    prompts = harness.story_prompts(3, 5, 3, 9)
    many = completion(client, model=model, prompt=prompts, max_tokens=8, temperature=0,
                      extra_body={"return_token_ids": True})
    assert [c["index"] for c in many["choices"]] == [0, 1, 2]
    for p, c in zip(prompts, many["choices"]):
        assert_same_as_grpc(c, grpc_greedy(cluster, token_ids=p, max_tokens=8).one())
    assert many["usage"]["prompt_tokens"] == sum(len(p) for p in prompts)
    assert many["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in many["choices"])


def test_list_of_prompts_is_prompt_major(cluster, client, model):
    n = 2
    body = completion(client, model=model, prompt=PROMPTS, n=n, max_tokens=10, temperature=0,
                      extra_body={"return_token_ids": True})
    assert [c["index"] for c in body["choices"]] == list(range(len(PROMPTS) * n))
    for i, prompt in enumerate(PROMPTS):
        want = grpc_greedy(cluster, text=prompt, max_tokens=10).one()
        for j in range(n):
            assert_same_as_grpc(body["choices"][i * n + j], want)


def test_n_samples_and_seed(cluster, client, model):
    kw = dict(model=model, prompt=ONCE, n=4, max_tokens=24, temperature=1.0)
    a = completion(client, seed=1234, **kw)
    b = completion(client, seed=1234, **kw)
    other = completion(client, seed=4321, **kw)
    texts = [c["text"] for c in a["choices"]]
    assert [c["index"] for c in a["choices"]] == [0, 1, 2, 3]
    assert texts == [c["text"] for c in b["choices"]], "same seed, different samples"
    assert len(set(texts)) > 1, f"4 samples at temperature 1 all equal: {texts}"
    assert texts != [c["text"] for c in other["choices"]], "different seeds, same samples"
    # The same request through gRPC (same seed) samples the same tokens.
    ref = unary(cluster.stub, request(text=ONCE, n=4, max_tokens=24, temperature=1.0, seed=1234))
    assert texts == [ref.samples[i].text for i in range(4)]
    assert a["usage"]["completion_tokens"] == ref.usage.completion_tokens


# Sampling fields through HTTP and through gRPC (greedy, or the same seed) give the same tokens:
# each reaches the sampler with its meaning. (HTTP body fields, SamplingParameters fields.)
PASSTHROUGH = [
    ("logit_bias", {"logit_bias": {"300": 100}}, {"logit_bias": {300: 100.0}}),
    ("presence_penalty", {"presence_penalty": 1.5}, {"presence_penalty": 1.5}),
    ("frequency_penalty", {"frequency_penalty": 1.2}, {"frequency_penalty": 1.2}),
    ("repetition_penalty", {"repetition_penalty": 1.4}, {"repetition_penalty": 1.4}),
    ("top_p", {"temperature": 0.9, "top_p": 0.5, "seed": 11}, {"temperature": 0.9, "top_p": 0.5, "seed": 11}),
    ("top_k", {"temperature": 1.0, "top_k": 3, "seed": 12}, {"temperature": 1.0, "top_k": 3, "seed": 12}),
    ("min_p", {"temperature": 1.0, "min_p": 0.3, "seed": 13}, {"temperature": 1.0, "min_p": 0.3, "seed": 13}),
    ("stop_token_ids", {"stop_token_ids": [261]}, {"stop_token_ids": [261]}),
    ("min_tokens_ignore_eos", {"min_tokens": 20, "ignore_eos": True}, {"min_tokens": 20, "ignore_eos": True}),
    ("stop_string", {"stop": ["girl"]}, {"stop": ["girl"]}),
    ("stop_single_string", {"stop": "Lily"}, {"stop": ["Lily"]}),
    ("include_stop_str", {"stop": ["girl"], "include_stop_str_in_output": True},
     {"stop": ["girl"], "include_stop_str_in_output": True}),
]


@pytest.mark.parametrize("name,http_fields,grpc_fields", PASSTHROUGH, ids=[p[0] for p in PASSTHROUGH])
def test_sampling_fields_equal_grpc(cluster, model, name, http_fields, grpc_fields):
    body = {"model": model, "prompt": ONCE, "max_tokens": 24, "temperature": 0, "return_token_ids": True}
    body.update(http_fields)
    r = oh.post(cluster.scheduler.http_address, "/v1/completions", body)
    assert r.status == 200, r
    got = r.json()
    validate(got, "CreateCompletionResponse")
    want = grpc_greedy(cluster, text=ONCE, max_tokens=24, **grpc_fields).one()
    assert_same_as_grpc(got["choices"][0], want)
    if name.startswith("stop"):
        assert got["choices"][0]["finish_reason"] == "stop"
    if name == "stop_string":
        assert "girl" not in got["choices"][0]["text"]
    if name == "include_stop_str":
        assert got["choices"][0]["text"].endswith("girl")


def test_completion_logprobs(cluster, client, model):
    k = 3
    body = completion(client, model=model, prompt=ONCE, max_tokens=8, temperature=0, logprobs=k,
                      extra_body={"return_token_ids": True})
    c = body["choices"][0]
    lp = c["logprobs"]
    n = len(c["token_ids"])
    assert n == 8
    assert [len(lp[key]) for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")] == [n] * 4
    assert "".join(lp["tokens"]) == c["text"]
    for i in range(1, n):
        assert lp["text_offset"][i] - lp["text_offset"][i - 1] == len(lp["tokens"][i - 1])
    ref = grpc_greedy(cluster, text=ONCE, max_tokens=8, return_logprobs=True, top_logprobs=k).one()
    assert lp["token_logprobs"] == pytest.approx(ref.logprobs, abs=1e-5)
    for pos, (tok, chosen, top, ref_top) in enumerate(zip(lp["tokens"], lp["token_logprobs"],
                                                         lp["top_logprobs"], ref.top_logprobs)):
        assert k <= len(top) <= k + 1, f"position {pos}: {top}"
        assert tok in top and top[tok] == pytest.approx(chosen, abs=1e-5), f"position {pos}"
        assert max(top.values()) == pytest.approx(chosen, abs=1e-5)  # greedy
        assert sorted(top.values(), reverse=True)[:k] == pytest.approx([e[1] for e in ref_top], abs=1e-5)


def test_echo(client, model):
    plain = completion(client, model=model, prompt=ONCE, max_tokens=8, temperature=0)
    echoed = completion(client, model=model, prompt=ONCE, max_tokens=8, temperature=0, echo=True)
    assert echoed["choices"][0]["text"] == ONCE + plain["choices"][0]["text"]
    assert echoed["usage"] == plain["usage"]


def test_completion_stream_equals_unary(client, model):
    kw = dict(model=model, prompt=ONCE, max_tokens=16, temperature=0)
    whole = completion(client, extra_body={"return_token_ids": True}, **kw)
    chunks = chunks_of(client.completions.create(stream=True, stream_options={"include_usage": True},
                                                 extra_body={"return_token_ids": True}, **kw),
                       "CreateCompletionStreamResponse")
    assert chunks
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"] == whole["usage"], final
    body = chunks[:-1]
    assert all(ch["choices"] for ch in body) and all("usage" not in ch or ch["usage"] is None for ch in body)
    assert len({ch["id"] for ch in chunks}) == 1
    text = "".join(ch["choices"][0]["text"] for ch in body)
    ids = [t for ch in body for t in ch["choices"][0].get("token_ids") or []]
    assert text == whole["choices"][0]["text"]
    assert ids == whole["choices"][0]["token_ids"]
    assert final["usage"]["completion_tokens"] == len(ids)
    finishes = [ch["choices"][0]["finish_reason"] for ch in body]
    assert finishes[-1] == "length" and all(f is None for f in finishes[:-1]), finishes


def test_completion_stream_n_and_logprobs(client, model):
    chunks = chunks_of(client.completions.create(model=model, prompt=PROMPTS[:2], n=2, max_tokens=6,
                                                 temperature=1.0, seed=5, logprobs=2, stream=True),
                       "CreateCompletionStreamResponse")
    whole = completion(client, model=model, prompt=PROMPTS[:2], n=2, max_tokens=6, temperature=1.0, seed=5,
                       logprobs=2)
    texts, tokens, finish = {}, {}, {}
    for ch in chunks:
        for c in ch["choices"]:
            assert c["index"] not in finish, f"choice {c['index']} after its finish_reason"
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
            tokens.setdefault(c["index"], []).extend((c.get("logprobs") or {}).get("tokens") or [])
            if c["finish_reason"]:
                finish[c["index"]] = c["finish_reason"]
    assert sorted(texts) == [0, 1, 2, 3] and sorted(finish) == [0, 1, 2, 3]
    for c in whole["choices"]:
        assert texts[c["index"]] == c["text"]
        assert tokens[c["index"]] == c["logprobs"]["tokens"]


def test_raw_sse_framing(cluster, model):
    r = oh.post(cluster.scheduler.http_address, "/v1/completions",
                {"model": model, "prompt": ONCE, "max_tokens": 8, "temperature": 0, "stream": True})
    assert r.status == 200, r
    assert r.content_type.split(";")[0].strip() == "text/event-stream", r.headers
    sse = oh.parse_sse(r.text())
    assert not sse.problems, sse.problems
    assert sse.data[-1] == "[DONE]" and sse.data.count("[DONE]") == 1
    assert r.text().endswith("data: [DONE]\n\n")
    values = [json.loads(d) for d in sse.data[:-1]]
    oh.validated(values, "CreateCompletionStreamResponse")
    whole = oh.post(cluster.scheduler.http_address, "/v1/completions",
                    {"model": model, "prompt": ONCE, "max_tokens": 8, "temperature": 0}).json()
    assert "".join(c["text"] for v in values for c in v["choices"]) == whole["choices"][0]["text"]


def test_async_client_concurrent(cluster, model):
    prompts = harness.story_prompts(8, 77, 3, 20)

    async def one(client, i, p):
        kw = dict(model=model, prompt=p, max_tokens=12, temperature=0, extra_body={"return_token_ids": True})
        if i % 2:
            stream = await client.completions.create(stream=True, **kw)
            ids, text = [], ""
            async for chunk in stream:
                d = chunk.to_dict(mode="json")
                validate(d, "CreateCompletionStreamResponse")
                for c in d["choices"]:
                    ids += c.get("token_ids") or []
                    text += c["text"]
            return ids, text
        raw = await client.completions.with_raw_response.create(**kw)
        d = raw_json(raw)
        validate(d, "CreateCompletionResponse")
        return d["choices"][0]["token_ids"], d["choices"][0]["text"]

    async def main():
        client = oh.async_openai_client(cluster)
        try:
            return await asyncio.gather(*(one(client, i, p) for i, p in enumerate(prompts)))
        finally:
            await client.close()

    results = asyncio.run(main())
    for p, (ids, text) in zip(prompts, results):
        want = grpc_greedy(cluster, token_ids=p, max_tokens=12).one()
        assert text == want.text
        assert ids == want.token_ids or (want.finish_reason == harness.FINISH["eos"]
                                         and ids == want.token_ids[:-1])


def test_pings_while_queued_are_comments_clients_ignore(make_cluster):
    # One request runs at a time; a stream queued behind a long one sends nothing for a while, so
    # it gets `: ping` comments (--sse-ping-s); the openai client must still read it whole.
    c = make_cluster(scheduler_flags={"max_running": 1, "sse_ping_s": 0.05})
    model = oh.served_model(c)
    long_body = {"model": model, "prompt": [1, 403, 407], "max_tokens": 2000, "ignore_eos": True}
    short = {"model": model, "prompt": ONCE, "max_tokens": 8, "temperature": 0, "stream": True}
    want = grpc_greedy(c, text=ONCE, max_tokens=8).one().text

    async def main():
        holders = [await oh.AsyncStream.open(c.scheduler.http_address, "POST", "/v1/completions", long_body)
                   for _ in range(2)]
        await asyncio.to_thread(harness.wait_until, lambda: c.stats().waiting_requests >= 1, 20)
        raw = await oh.AsyncStream.open(c.scheduler.http_address, "POST", "/v1/completions", short)
        client = oh.async_openai_client(c)
        try:
            stream = await client.completions.create(**{k: v for k, v in short.items() if k != "stream"},
                                                     stream=True)
            text = ""
            async for chunk in stream:
                d = chunk.to_dict(mode="json")
                validate(d, "CreateCompletionStreamResponse")
                text += "".join(ch["text"] for ch in d["choices"])
            assert await raw.read_head() == 200
            body = (await raw.read_all()).decode()
        finally:
            await client.close()
            for h in holders:
                h.close()
            raw.close()
        return text, body

    text, body = asyncio.run(main())
    assert text == want
    sse = oh.parse_sse(body)
    assert sse.comments >= 1, "no ': ping' while queued behind two long requests"
    values = oh.validated(oh.sse_json(sse), "CreateCompletionStreamResponse")
    assert "".join(ch["text"] for v in values for ch in v["choices"]) == want
    assert all(line == ": ping" for line in body.split("\n") if line.startswith(":")), body[:300]


def test_accepted_extras(cluster, client, model):
    # Fields a client may send that change nothing about greedy tokens.
    plain = completion(client, model=model, prompt=ONCE, max_tokens=6, temperature=0)
    extra = completion(client, model=model, prompt=ONCE, max_tokens=6, temperature=0, user="tester-1",
                       extra_body={"priority": 1, "request_id": "openai-test-extras",
                                   "skip_special_tokens": True})
    assert extra["choices"][0]["text"] == plain["choices"][0]["text"]


# ---------------------------------------------------------------------------------------------
# Chat (the default model: stories260K has no chat template)

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


@needs_smol
def test_chat_greedy_equals_grpc(smol):
    body = chat(smol.client, model=smol.model, messages=MESSAGES, max_tokens=12, temperature=0,
                extra_body={"return_token_ids": True})
    ref = grpc_greedy(smol, chat=[("user", "What is 2+2?")], max_tokens=12)
    c = body["choices"][0]
    assert body["object"] == "chat.completion" and c["message"]["role"] == "assistant"
    assert_same_as_grpc(c, ref.one())
    assert body["prompt_token_ids"] == ref.prompt_ids
    assert body["usage"]["prompt_tokens"] == len(ref.prompt_ids)
    assert body["usage"]["completion_tokens"] == ref.usage.completion_tokens


@needs_smol
def test_chat_equals_offline_engine(smol):
    want = harness.offline_run(SMOL, chat="Name a color.", max_tokens=12)
    body = chat(smol.client, model=smol.model, messages=[{"role": "user", "content": "Name a color."}],
                max_tokens=12, temperature=0, extra_body={"return_token_ids": True})
    assert body["choices"][0]["message"]["content"] == want["text"]
    assert body["prompt_token_ids"] == want["prompt_ids"]


@needs_smol
def test_chat_content_parts_and_max_completion_tokens(smol):
    a = chat(smol.client, model=smol.model, messages=MESSAGES, max_tokens=8, temperature=0,
             extra_body={"return_token_ids": True})
    one_part = [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]
    b = chat(smol.client, model=smol.model, messages=one_part, max_completion_tokens=8, temperature=0,
             extra_body={"return_token_ids": True})
    assert b["prompt_token_ids"] == a["prompt_token_ids"]
    assert b["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"]
    assert b["usage"]["completion_tokens"] <= 8
    # Several text parts are one message: their texts joined (with nothing between them, or a
    # newline as vLLM does; OpenAI does not say which).
    parts = [{"role": "user",
              "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2+2?"}]}]
    c = chat(smol.client, model=smol.model, messages=parts, max_tokens=2, temperature=0,
             extra_body={"return_token_ids": True})
    joined = [grpc_greedy(smol, chat=[("user", "What is" + sep + "2+2?")], max_tokens=1).prompt_ids
              for sep in ("", "\n")]
    assert c["prompt_token_ids"] in joined


@needs_smol
def test_chat_system_message_and_continue_final(smol):
    system = [{"role": "system", "content": "You are terse."}, MESSAGES[0]]
    body = chat(smol.client, model=smol.model, messages=system, max_tokens=6, temperature=0,
                extra_body={"return_token_ids": True})
    ref = grpc_greedy(smol, chat=[("system", "You are terse."), ("user", "What is 2+2?")], max_tokens=6)
    assert body["prompt_token_ids"] == ref.prompt_ids
    assert_same_as_grpc(body["choices"][0], ref.one())
    # An assistant message continued rather than answered.
    partial = MESSAGES + [{"role": "assistant", "content": "The answer is"}]
    cont = chat(smol.client, model=smol.model, messages=partial, max_tokens=6, temperature=0,
                extra_body={"return_token_ids": True, "continue_final_message": True,
                            "add_generation_prompt": False})
    req = request(chat=[("user", "What is 2+2?"), ("assistant", "The answer is")], max_tokens=6,
                  return_prompt_ids=True)
    req.chat.continue_final_message = True
    want = unary(smol.stub, req)
    assert cont["prompt_token_ids"] == want.prompt_ids
    assert_same_as_grpc(cont["choices"][0], want.one())


@needs_smol
def test_chat_logprobs(smol):
    k = 2
    body = chat(smol.client, model=smol.model, messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True,
                top_logprobs=k, extra_body={"return_token_ids": True})
    c = body["choices"][0]
    content = c["logprobs"]["content"]
    assert len(content) == len(c["token_ids"]) == body["usage"]["completion_tokens"]
    ref = grpc_greedy(smol, chat=[("user", "What is 2+2?")], max_tokens=6, return_logprobs=True,
                      top_logprobs=k).one()
    assert [e["logprob"] for e in content] == pytest.approx(ref.logprobs[:len(content)], abs=1e-4)
    for pos, e in enumerate(content):
        assert len(e["top_logprobs"]) == k, f"position {pos}"
        assert e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"], abs=1e-5)  # greedy
        assert e["top_logprobs"][0]["token"] == e["token"]
        assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
        assert all(x["logprob"] <= 1e-6 and math.isfinite(x["logprob"]) for x in e["top_logprobs"])
        if e["bytes"] is not None:
            try:
                assert bytes(e["bytes"]).decode("utf-8") == e["token"], f"position {pos}: {e}"
            except UnicodeDecodeError:
                pass  # a token that is part of a multi-byte character
    assert "".join(e["token"] for e in content) == c["message"]["content"]


@needs_smol
def test_chat_stream_equals_unary_with_usage(smol):
    kw = dict(model=smol.model, messages=MESSAGES, max_tokens=12, temperature=0)
    whole = chat(smol.client, **kw)
    stream = smol.client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
    chunks = chunks_of(stream, "CreateChatCompletionStreamResponse")
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"] == whole["usage"], final
    deltas = [ch["choices"][0] for ch in chunks[:-1]]
    assert deltas and deltas[0]["delta"].get("role") == "assistant"
    text = "".join(d["delta"].get("content") or "" for d in deltas)
    assert text == whole["choices"][0]["message"]["content"]
    assert deltas[-1]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert all(d["finish_reason"] is None for d in deltas[:-1])
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)


@needs_smol
def test_chat_raw_sse_and_n(smol):
    r, values = oh.stream_post(smol.scheduler.http_address, "/v1/chat/completions",
                               {"model": smol.model, "messages": MESSAGES, "max_tokens": 6, "n": 2,
                                "temperature": 1.0, "seed": 3, "stream": True,
                                "stream_options": {"include_usage": True}})
    oh.validated(values, "CreateChatCompletionStreamResponse")
    texts = {}
    for v in values[:-1]:
        for c in v["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + (c["delta"].get("content") or "")
    whole = chat(smol.client, model=smol.model, messages=MESSAGES, max_tokens=6, n=2, temperature=1.0, seed=3)
    assert texts == {c["index"]: c["message"]["content"] for c in whole["choices"]}
    assert values[-1]["choices"] == [] and values[-1]["usage"] == whole["usage"]


@needs_smol
def test_chat_async_stream(smol):
    async def main():
        client = oh.async_openai_client(smol)
        try:
            stream = await client.chat.completions.create(model=smol.model, messages=MESSAGES, max_tokens=8,
                                                          temperature=0, stream=True)
            text = ""
            async for chunk in stream:
                d = chunk.to_dict(mode="json")
                validate(d, "CreateChatCompletionStreamResponse")
                for c in d["choices"]:
                    text += c["delta"].get("content") or ""
            return text
        finally:
            await client.close()

    want = grpc_greedy(smol, chat=[("user", "What is 2+2?")], max_tokens=8).one()
    assert asyncio.run(main()) == want.text


@needs_smol
def test_chat_tokenize_messages(smol):
    r = oh.post(smol.scheduler.http_address, "/tokenize", {"messages": MESSAGES})
    assert r.status == 200, r
    ref = grpc_greedy(smol, chat=[("user", "What is 2+2?")], max_tokens=1)
    assert r.json()["tokens"] == ref.prompt_ids
    assert r.json()["count"] == len(ref.prompt_ids)
