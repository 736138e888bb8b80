"""Each invalid field gets INVALID_ARGUMENT with a message naming it, and the server goes on
serving valid requests in between (the module's cluster: stories260K, --max-n 4)."""

import re

import grpc
import pytest

import harness
from harness import STORIES_CONTEXT, STORIES_VOCAB, pb, request

PROMPT = [1, 403, 407, 261, 378]
MAX_N = 4  # the module cluster's --max-n


def bare(**fields):
    """A request with one input and the given sampling fields (no defaults added)."""
    req = pb.GenerateRequest()
    req.token_ids.ids.extend(PROMPT)
    req.sampling.max_tokens = 4
    for k, v in fields.items():
        if k == "logit_bias":
            for tid, b in v.items():
                req.sampling.logit_bias[tid] = b
        elif k in ("stop", "stop_token_ids"):
            getattr(req.sampling, k).extend(v)
        else:
            setattr(req.sampling, k, v)
    return req


def with_input(**kw):
    req = pb.GenerateRequest()
    req.sampling.max_tokens = 4
    if "token_ids" in kw:
        req.token_ids.ids.extend(kw["token_ids"])
    if "text" in kw:
        req.text = kw["text"]
    if "chat" in kw:
        req.chat.CopyFrom(kw["chat"])
    return req


def with_n(n):
    req = bare()
    req.n = n
    return req


# (case id, request, words of which the message must contain at least one)
CASES = [
    ("temperature_negative", lambda: bare(temperature=-1.0), ["temperature"]),
    ("temperature_nan", lambda: bare(temperature=float("nan")), ["temperature"]),
    ("top_p_zero", lambda: bare(top_p=0.0), ["top_p"]),
    ("top_p_above_one", lambda: bare(top_p=1.5), ["top_p"]),
    ("top_k_negative", lambda: bare(top_k=-1), ["top_k"]),
    ("min_p_two", lambda: bare(min_p=2.0), ["min_p"]),
    ("min_p_negative", lambda: bare(min_p=-0.1), ["min_p"]),
    ("repetition_penalty_zero", lambda: bare(repetition_penalty=0.0), ["repetition_penalty"]),
    ("frequency_penalty_three", lambda: bare(frequency_penalty=3.0), ["frequency_penalty"]),
    ("presence_penalty_minus_three", lambda: bare(presence_penalty=-3.0), ["presence_penalty"]),
    ("penalty_window_negative", lambda: bare(penalty_window=-1), ["penalty_window"]),
    ("logit_bias_above_100", lambda: bare(logit_bias={5: 101.0}), ["logit_bias"]),
    ("logit_bias_below_minus_100", lambda: bare(logit_bias={5: -100.5}), ["logit_bias"]),
    ("logit_bias_id_out_of_vocab", lambda: bare(logit_bias={STORIES_VOCAB: 1.0}), ["logit_bias"]),
    ("top_logprobs_21", lambda: bare(top_logprobs=21), ["top_logprobs"]),
    ("top_logprobs_negative", lambda: bare(top_logprobs=-1), ["top_logprobs"]),
    ("logprobs_mode_unknown", lambda: bare(logprobs_mode=7), ["logprobs_mode"]),
    ("min_tokens_above_max_tokens", lambda: bare(min_tokens=10, max_tokens=5), ["min_tokens"]),
    ("min_tokens_negative", lambda: bare(min_tokens=-1), ["min_tokens"]),
    ("max_tokens_zero", lambda: bare(max_tokens=0), ["max_tokens"]),
    ("max_tokens_negative", lambda: bare(max_tokens=-3), ["max_tokens"]),
    ("stop_empty_string", lambda: bare(stop=[""]), ["stop"]),
    ("stop_token_id_out_of_vocab", lambda: bare(stop_token_ids=[STORIES_VOCAB]), ["stop_token_ids"]),
    ("stop_token_id_negative", lambda: bare(stop_token_ids=[-1]), ["stop_token_ids"]),
    ("n_too_large", lambda: with_n(MAX_N + 1), ["n"]),
    ("n_negative", lambda: with_n(-1), ["n"]),
    ("no_input", lambda: with_input(), ["input", "prompt"]),
    ("empty_token_ids", lambda: with_input(token_ids=[]), ["token_ids", "input", "prompt"]),
    ("empty_text", lambda: with_input(text=""), ["text", "input", "prompt"]),
    ("token_id_vocab_size", lambda: with_input(token_ids=[1, STORIES_VOCAB]), ["token_ids"]),
    ("token_id_negative", lambda: with_input(token_ids=[1, -5]), ["token_ids"]),
    (
        "prompt_longer_than_context",
        lambda: with_input(token_ids=[1] + [300] * STORIES_CONTEXT),
        ["prompt", "token_ids", "context"],
    ),
    # (A chat without messages on a model with a template: test_default_model.py.)
    ("chat_without_messages", lambda: with_input(chat=pb.ChatInput()), ["messages", "chat"]),
    (
        "chat_without_template",  # stories260K has no chat template
        lambda: with_input(chat=pb.ChatInput(messages=[pb.ChatMessage(role="user", content="hi")])),
        ["chat", "template"],
    ),
]


def names(details, word):
    """Whether the message names `word` as a whole identifier ("n" must not match "token")."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", details) is not None


def assert_serves(cluster):
    got = harness.unary(cluster.stub, request(token_ids=PROMPT, max_tokens=4)).one()
    assert got.token_ids == [432, 383, 286, 261]  # llama.cpp's greedy golden (models/README.md)


@pytest.mark.parametrize("name,make,words", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("rpc", ["unary", "stream"])
def test_invalid_field(cluster, name, make, words, rpc):
    req = make()
    with pytest.raises(grpc.RpcError) as e:
        if rpc == "unary":
            cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
        else:
            list(cluster.stub.GenerateStream(req, timeout=harness.RPC_TIMEOUT_S))
    err = e.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{name}: {err.code()} {err.details()}"
    details = err.details() or ""
    assert any(names(details, w) for w in words), f"{name}: message {details!r} names none of {words}"
    assert_serves(cluster)


def test_too_many_stop_strings(cluster):
    limit = cluster.scheduler.model_info().max_stop_strings
    assert limit > 0
    req = bare(stop=[f"s{i}" for i in range(limit + 1)])
    with pytest.raises(grpc.RpcError) as e:
        cluster.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert names(e.value.details(), "stop"), e.value.details()
    # Exactly at the limit is valid.
    harness.unary(cluster.stub, request(token_ids=PROMPT, max_tokens=4, stop=[f"s{i}" for i in range(limit)]))
    assert_serves(cluster)


def test_invalid_utf8_text_refused(cluster):
    # proto3 forbids invalid UTF-8 in string fields: grpc's own parser refuses the message before
    # astr sees it, so only "refused, and the server lives" is astr's to promise here.
    raw = pb.GenerateRequest(sampling=pb.SamplingParameters(max_tokens=4)).SerializeToString()
    bad = b"\x12\x03a\xff\xfe" + raw  # field 2 (text), length 3, invalid UTF-8
    call = cluster.scheduler.channel.unary_unary(
        "/astr.v1.Generate/Generate",
        request_serializer=lambda b: b,
        response_deserializer=pb.GenerateResponse.FromString,
    )
    with pytest.raises(grpc.RpcError) as e:
        call(bad, timeout=harness.RPC_TIMEOUT_S)
    assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL), e.value
    assert_serves(cluster)


def test_valid_edges_accepted(cluster):
    # The boundaries themselves are valid: top_p 1, min_p 1, top_k 0, n = max, 20 top logprobs,
    # logit bias +-100, penalties +-2, prompt + max_tokens = context.
    reqs = [
        request(token_ids=PROMPT, max_tokens=2, top_p=1.0, min_p=1.0, top_k=0),
        request(token_ids=PROMPT, max_tokens=2, n=MAX_N, temperature=1.0, seed=1),
        request(token_ids=PROMPT, max_tokens=2, top_logprobs=20),
        request(token_ids=PROMPT, max_tokens=2, logit_bias={5: 100.0, 6: -100.0}),
        request(token_ids=PROMPT, max_tokens=2, frequency_penalty=2.0, presence_penalty=-2.0),
        request(token_ids=[1] + [300] * (STORIES_CONTEXT - 2), max_tokens=1),
    ]
    for r in reqs:
        harness.unary(cluster.stub, r)
