"""The sampling mask (return_sampling_mask; docs/rl.md "The sampling mask") through the services on
stories260K: gRPC unary and stream, the Python SDK and the OpenAI HTTP API (the official client and
raw SSE). The mask is there when asked and only then, holds the drawn token, equals the top-k ids
the logprobs show, is the smallest top-p prefix of the processed distribution, says "nothing
removed" with the vocabulary's size alone, and keeps to a constraint; greedy requests and bad
types are refused naming the field. Expected sets come from the returned logprobs, never from the
server's own masks."""

import json
import math

import grpc
import pytest

import astr
import harness
import openai_http as oh
from harness import pb, request
from openai_schemas import validate

PROMPT = [1, 403, 407, 261, 378]  # "Once upon a time"
STORIES_VOCAB = 512
STORIES_EOS = 2


def masks(message):
    """[(count, [ids])] of a Completion or stream message."""
    return [(m.count, list(m.token_ids)) for m in message.sampling_masks]


def stream_masks(stub, req):
    """Sample index -> (token ids, masks) of a GenerateStream, concatenated in order; each message
    has a mask per token when the request asks for them, none otherwise."""
    out = {}
    for m in stub.GenerateStream(req, timeout=harness.RPC_TIMEOUT_S):
        ids, ms = out.setdefault(m.index, ([], []))
        want = len(m.token_ids) if req.sampling.return_sampling_mask else 0
        assert len(m.sampling_masks) == want, m
        ids += list(m.token_ids)
        ms += masks(m)
    return out


def check_holds_token(token_ids, ms):
    assert len(ms) == len(token_ids) > 0
    for pos, (tid, (count, ids)) in enumerate(zip(token_ids, ms)):
        if count == STORIES_VOCAB and not ids:
            continue
        assert count == len(ids), f"position {pos}: count {count}, {len(ids)} ids"
        assert ids == sorted(set(ids)), f"position {pos}: ids not ascending: {ids}"
        assert tid in ids, f"position {pos}: drew {tid}, outside its mask {ids}"


def test_mask_only_when_asked_and_the_draw_is_unchanged(cluster):
    asked = request(token_ids=PROMPT, n=2, temperature=1.0, top_k=5, seed=11, max_tokens=12,
                    return_sampling_mask=True)
    plain = request(token_ids=PROMPT, n=2, temperature=1.0, top_k=5, seed=11, max_tokens=12)
    with_mask = cluster.stub.Generate(asked, timeout=harness.RPC_TIMEOUT_S)
    without = cluster.stub.Generate(plain, timeout=harness.RPC_TIMEOUT_S)
    for a, b in zip(with_mask.completions, without.completions):
        assert list(a.token_ids) == list(b.token_ids), "asking for the mask changed the draw"
        assert len(b.sampling_masks) == 0
        check_holds_token(list(a.token_ids), masks(a))
        assert all(count == 5 and len(ids) == 5 for count, ids in masks(a))
    streamed = stream_masks(cluster.stub, plain)
    assert sorted(streamed) == [0, 1]
    for index, (ids, ms) in streamed.items():
        assert ids and ms == [], f"sample {index}: masks nobody asked for"


def test_stream_masks_equal_unary(cluster):
    req = request(token_ids=PROMPT, n=2, temperature=0.8, top_p=0.9, seed=5, max_tokens=16,
                  return_sampling_mask=True)
    unary = cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    streamed = stream_masks(cluster.stub, req)
    assert sorted(streamed) == [0, 1]
    for c in unary.completions:
        ids, ms = streamed[c.index]
        assert ids == list(c.token_ids)
        assert ms == masks(c)
        check_holds_token(ids, ms)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_top_k_mask_is_the_top_k_of_the_logprobs(cluster, k):
    """No penalties, raw logprobs: the top-k candidates are the k highest logits, which are the
    first k top_logprobs (logprob desc, ties by id asc, as top-k breaks them)."""
    req = request(token_ids=PROMPT, temperature=1.0, top_k=k, top_p=1.0, min_p=0.0, seed=3,
                  max_tokens=16, top_logprobs=max(k, 5), return_sampling_mask=True)
    c = cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S).completions[0]
    for pos, (top, (count, ids)) in enumerate(zip(c.top_logprobs, masks(c))):
        want = sorted(e.token_id for e in top.entries[:k])
        assert (count, ids) == (k, want), f"position {pos}"
    check_holds_token(list(c.token_ids), masks(c))


def test_top_p_mask_is_the_smallest_prefix_reaching_the_mass(cluster):
    """Processed logprobs are the distribution top-p cuts (temperature applied): the mask is the
    smallest prefix of them, most likely first, whose mass reaches top_p. Positions where a prefix
    mass lies within 1e-4 of top_p are skipped (float rounding may decide them)."""
    top_p = 0.6
    req = request(token_ids=PROMPT, temperature=0.7, top_k=0, top_p=top_p, min_p=0.0, seed=9,
                  max_tokens=24,
                  top_logprobs=20, logprobs_mode=pb.LOGPROBS_MODE_PROCESSED,
                  return_sampling_mask=True)
    c = cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S).completions[0]
    checked = 0
    for pos, (top, (count, ids)) in enumerate(zip(c.top_logprobs, masks(c))):
        probs = [(math.exp(e.logprob), e.token_id) for e in top.entries]
        cum, prefix, close = 0.0, [], False
        for p, tid in probs:
            cum += p
            prefix.append(tid)
            close = close or abs(cum - top_p) < 1e-4
            if cum >= top_p:
                break
        if cum < top_p or close:
            continue  # the prefix needs more than 20 alternatives, or is too close to call
        assert (count, ids) == (len(prefix), sorted(prefix)), f"position {pos}: cum {cum}"
        checked += 1
    assert checked >= len(c.token_ids) // 2, f"only {checked} positions decidable"


def test_nothing_removed_is_the_vocabulary_size_alone(cluster):
    """Without truncation a mask is {count: vocab_size, token_ids: []}. Under min_tokens the EOS
    id is masked: the mask is every id but EOS."""
    vocab = cluster.scheduler.model_info().vocab_size
    assert vocab == STORIES_VOCAB
    req = request(token_ids=PROMPT, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=4,
                  min_tokens=4, max_tokens=8, ignore_eos=False, return_sampling_mask=True)
    c = cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S).completions[0]
    ms = masks(c)
    assert len(ms) >= 4
    all_but_eos = [t for t in range(vocab) if t != STORIES_EOS]
    for pos in range(4):
        assert ms[pos] == (vocab - 1, all_but_eos), f"position {pos}"
    for pos in range(4, len(ms)):
        assert ms[pos] == (vocab, []), f"position {pos}"


def test_constraint_mask_keeps_to_the_constraint(cluster):
    """With a choice constraint every id of every mask continues the text drawn so far into a
    prefix of one of the choices (checked with Detokenize, not with the server's matcher)."""
    choices = ["yes", "no", "maybe"]
    req = request(token_ids=PROMPT, temperature=1.0, seed=2, max_tokens=8,
                  return_sampling_mask=True)
    req.sampling.constraint.CopyFrom(pb.Constraint(choice=pb.ChoiceList(choices=choices)))
    c = cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S).completions[0]
    assert c.text in choices
    ms = masks(c)
    check_holds_token(list(c.token_ids), ms)

    def text_of(ids):
        return cluster.stub.Detokenize(pb.DetokenizeRequest(token_ids=ids),
                                       timeout=harness.RPC_TIMEOUT_S).text

    for pos, (count, ids) in enumerate(ms):
        assert 0 < count < STORIES_VOCAB, f"position {pos}: the constraint removed nothing"
        before = list(c.token_ids[:pos])
        for tid in ids:
            if tid == STORIES_EOS:  # the constraint's end
                assert text_of(before) in choices, f"position {pos}: EOS allowed early"
                continue
            text = text_of(before + [tid])
            assert any(ch.startswith(text) for ch in choices), f"position {pos}: {tid} -> {text!r}"


def test_greedy_and_bad_requests_are_refused_naming_the_field(cluster):
    req = request(token_ids=PROMPT, temperature=0.0, max_tokens=4, return_sampling_mask=True)
    with pytest.raises(grpc.RpcError) as e:
        cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sampling.return_sampling_mask needs temperature" in e.value.details()


def test_sdk_generate_and_stream(cluster):
    with astr.Client(cluster.scheduler.address, timeout=harness.RPC_TIMEOUT_S) as client:
        reply = client.generate(PROMPT, temperature=0.9, top_k=3, seed=8, max_tokens=10,
                                return_sampling_mask=True)
        c = reply.completions[0]
        check_holds_token(list(c.token_ids), masks(c))
        for m in c.sampling_masks:
            assert list(astr.sampling_mask_ids(m, STORIES_VOCAB)) == list(m.token_ids)
            assert len(m.token_ids) == 3
        streamed = []
        for m in client.generate_stream(PROMPT, temperature=0.9, top_k=3, seed=8, max_tokens=10,
                                        return_sampling_mask=True):
            streamed += masks(m)
        assert streamed == masks(c)
        full = client.generate(PROMPT, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=8,
                               max_tokens=3, ignore_eos=True, return_sampling_mask=True)
        for m in full.completions[0].sampling_masks:
            assert (m.count, list(m.token_ids)) == (STORIES_VOCAB, [])
            assert list(astr.sampling_mask_ids(m, STORIES_VOCAB)) == list(range(STORIES_VOCAB))


# ---------------------------------------------------------------------------------------------
# OpenAI HTTP API


@pytest.fixture(scope="module")
def client(cluster):
    c = oh.openai_client(cluster)
    yield c
    c.close()


@pytest.fixture(scope="module")
def model(cluster):
    return oh.served_model(cluster)


def test_http_completion_masks_unary_and_streamed(cluster, client, model):
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 1.0,
            "seed": 6, "logprobs": 5, "top_k": 4, "return_sampling_mask": True,
            "return_token_ids": True}
    raw = client.completions.with_raw_response.create(
        model=model, prompt="Once upon a time", max_tokens=10, temperature=1.0, seed=6, logprobs=5,
        extra_body={"top_k": 4, "return_sampling_mask": True, "return_token_ids": True})
    u = json.loads(raw.content)
    validate(u, "CreateCompletionResponse")
    choice = u["choices"][0]
    lp = choice["logprobs"]
    assert len(lp["sampling_mask"]) == len(lp["tokens"]) == len(choice["token_ids"]) > 0
    ms = [(m["count"], m["token_ids"]) for m in lp["sampling_mask"]]
    check_holds_token(choice["token_ids"], ms)
    assert all(count == 4 for count, _ in ms)

    _, events = oh.stream_post(cluster.scheduler.http_address, "/v1/completions",
                               dict(body, stream=True))
    streamed, ids = [], []
    for e in events:
        validate(e, "CreateCompletionStreamResponse")
        for c in e["choices"]:
            ids += c.get("token_ids", [])
            if c["logprobs"] is not None:
                assert len(c["logprobs"]["sampling_mask"]) == len(c["logprobs"]["tokens"])
                streamed += [(m["count"], m["token_ids"]) for m in c["logprobs"]["sampling_mask"]]
    assert ids == choice["token_ids"]
    assert streamed == ms

    plain = client.completions.with_raw_response.create(
        model=model, prompt="Once upon a time", max_tokens=4, temperature=1.0, seed=6, logprobs=5)
    assert "sampling_mask" not in json.loads(plain.content)["choices"][0]["logprobs"]


def test_http_mask_equals_grpc(cluster, model):
    """The same seeded request through both fronts: the same tokens and the same masks."""
    r = oh.post(cluster.scheduler.http_address, "/v1/completions",
                {"model": model, "prompt": [PROMPT], "max_tokens": 8, "temperature": 0.8,
                 "top_p": 0.8, "seed": 21, "logprobs": 0, "return_sampling_mask": True,
                 "return_token_ids": True})
    assert r.status == 200, r
    choice = r.json()["choices"][0]
    req = request(token_ids=PROMPT, temperature=0.8, top_p=0.8, seed=21, max_tokens=8,
                  return_sampling_mask=True)
    c = cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S).completions[0]
    assert choice["token_ids"] == list(c.token_ids)
    assert [(m["count"], m["token_ids"]) for m in choice["logprobs"]["sampling_mask"]] == masks(c)


@pytest.mark.parametrize("extra, message", [
    ({"logprobs": 1, "return_sampling_mask": "yes"}, "return_sampling_mask"),
    ({"logprobs": 1, "return_sampling_mask": 1}, "return_sampling_mask"),
    ({"return_sampling_mask": True}, "requires logprobs"),
    ({"logprobs": 1, "temperature": 0, "return_sampling_mask": True}, "needs temperature"),
])
def test_http_errors_name_the_field(cluster, model, extra, message):
    body = dict({"model": model, "prompt": "Once", "max_tokens": 2, "temperature": 1.0}, **extra)
    r = oh.post(cluster.scheduler.http_address, "/v1/completions", body)
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["param"] == "return_sampling_mask", err
    assert message in err["message"], err


SMOL = harness.default_model()


@pytest.fixture(scope="module")
def smol(log_dir):
    if SMOL is None:
        pytest.skip("default model not present (scripts/default_model.sh)")
    yield from harness.openai_cluster(log_dir, SMOL, worker_flags={"num_pages": 128, "page_size": 16})


def test_http_chat_masks_in_each_content_entry(smol):
    """Chat (the default model, which has a chat template): each logprobs.content entry carries the
    mask of its token, here top_k 5: five ids holding the drawn one (return_token_ids gives the
    drawn ids). Streamed chunks carry the same masks for the same seed."""
    body = {"model": smol.model, "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": 8, "temperature": 1.0, "top_p": 1.0, "min_p": 0.0,
            "repetition_penalty": 1.0, "seed": 12, "logprobs": True, "top_logprobs": 5,
            "top_k": 5, "return_sampling_mask": True, "return_token_ids": True}
    raw = smol.client.chat.completions.with_raw_response.create(
        **{k: body[k] for k in ("model", "messages", "max_tokens", "temperature", "top_p", "seed",
                                "logprobs", "top_logprobs")},
        extra_body={k: body[k] for k in ("min_p", "repetition_penalty", "top_k",
                                         "return_sampling_mask", "return_token_ids")})
    u = json.loads(raw.content)
    validate(u, "CreateChatCompletionResponse")
    choice = u["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == len(choice["token_ids"]) > 0
    ms = [(e["sampling_mask"]["count"], e["sampling_mask"]["token_ids"]) for e in content]
    check_holds_token(choice["token_ids"], ms)
    vocab = smol.scheduler.model_info().vocab_size
    for pos, (count, ids) in enumerate(ms):
        assert count == 5 and len(ids) == 5 and count < vocab, f"position {pos}"

    _, events = oh.stream_post(smol.scheduler.http_address, "/v1/chat/completions",
                               dict(body, stream=True))
    oh.validated(events, "CreateChatCompletionStreamResponse")
    streamed = []
    for e in events:
        for c in e["choices"]:
            if c.get("logprobs"):
                streamed += [(x["sampling_mask"]["count"], x["sampling_mask"]["token_ids"])
                             for x in c["logprobs"]["content"]]
    assert streamed == ms
