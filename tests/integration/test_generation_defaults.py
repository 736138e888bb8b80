"""Served sampling defaults (--generation-config): a request that leaves a sampling field unset gets
the model's recommended value, a request that sets it keeps its own, on gRPC and the OpenAI API;
--generation-config none serves astr's own defaults; a bad file stops the scheduler at start with
an error naming the file and key."""

import json
import os
import tempfile

import pytest

import harness
from harness import STORIES, request, unary

PROMPT = [1, 403, 407, 261, 378]  # "Once upon a time"
# The file a model author would ship: a strong repetition penalty (so that it visibly changes
# greedy output), greedy decoding and a length cap.
GEN_CONFIG = {"temperature": 0.0, "repetition_penalty": 2.0, "max_new_tokens": 32}


def unset(req, *fields):
    for f in fields:
        req.sampling.ClearField(f)
    return req


@pytest.fixture(scope="module")
def served(log_dir):
    path = os.path.join(tempfile.mkdtemp(dir=log_dir), "generation_config.json")
    with open(path, "w") as f:
        json.dump(GEN_CONFIG, f)
    yield from harness.openai_cluster(log_dir, STORIES, scheduler_flags={"generation_config": path})


@pytest.fixture(scope="module")
def plain(log_dir):
    c = harness.make_cluster(tempfile.mkdtemp(dir=log_dir), scheduler_flags={"generation_config": "none"})
    yield c
    c.close()


def test_unset_fields_take_the_served_defaults(served):
    got = unary(served.stub, unset(request(token_ids=PROMPT), "temperature")).one()
    explicit = unary(served.stub, request(token_ids=PROMPT, temperature=0.0, repetition_penalty=2.0,
                                          max_tokens=32)).one()
    plain_greedy = unary(served.stub, request(token_ids=PROMPT, repetition_penalty=1.0, max_tokens=32)).one()
    assert len(got.token_ids) == 32 and got.finish_reason == harness.FINISH["length"]
    assert got.key() == explicit.key()
    # The penalty is really applied: the same request with the penalty set to 1 differs.
    assert plain_greedy.token_ids != got.token_ids


def test_request_values_win(served):
    want = harness.offline_run(STORIES, prompt_ids=PROMPT, max_tokens=20)
    got = unary(served.stub, request(token_ids=PROMPT, repetition_penalty=1.0, max_tokens=20)).one()
    assert harness.offline_mismatch(got, want) is None
    # A sampled request that sets only its temperature keeps the served penalty.
    explicit = unary(served.stub, request(token_ids=PROMPT, temperature=1.0, seed=7, max_tokens=24,
                                          repetition_penalty=2.0)).one()
    defaulted = unary(served.stub, request(token_ids=PROMPT, temperature=1.0, seed=7, max_tokens=24)).one()
    assert explicit.key() == defaulted.key()


def test_openai_requests_get_the_defaults(served):
    c = served.client
    r = c.completions.create(model=served.model, prompt="Once upon a time", max_tokens=32)
    explicit = c.completions.create(model=served.model, prompt="Once upon a time", max_tokens=32,
                                    temperature=0, extra_body={"repetition_penalty": 2.0})
    assert r.choices[0].text == explicit.choices[0].text
    assert r.usage.completion_tokens == explicit.usage.completion_tokens
    unpenalized = c.completions.create(model=served.model, prompt="Once upon a time", max_tokens=32,
                                       temperature=0, extra_body={"repetition_penalty": 1.0})
    assert unpenalized.choices[0].text != r.choices[0].text


def test_none_serves_astr_defaults(plain):
    # temperature 1 when unset: equal to an explicit temperature 1 with the same seed.
    got = unary(plain.stub, unset(request(token_ids=PROMPT, seed=11, max_tokens=16), "temperature")).one()
    want = unary(plain.stub, request(token_ids=PROMPT, seed=11, max_tokens=16, temperature=1.0)).one()
    assert got.key() == want.key()


def test_bad_file_refused_at_start(log_dir):
    path = os.path.join(tempfile.mkdtemp(dir=log_dir), "bad.json")
    with open(path, "w") as f:
        json.dump({"top_p": 0}, f)
    c = harness.Cluster(tempfile.mkdtemp(dir=log_dir))
    try:
        c.start_worker(STORIES)
        with pytest.raises(RuntimeError) as e:
            c.start_scheduler(generation_config=path)
        msg = str(e.value)
        assert "--generation-config" in msg and path in msg and "top_p" in msg, msg
    finally:
        c.close()


def test_model_info_and_astr_info_show_the_served_defaults(served, plain):
    info = served.scheduler.model_info()
    d = info.default_sampling
    assert d.HasField("temperature") and d.temperature == 0.0
    assert d.HasField("repetition_penalty") and d.repetition_penalty == pytest.approx(2.0)
    assert d.HasField("max_tokens") and d.max_tokens == 32
    assert not d.HasField("top_p") and not d.HasField("top_k")
    assert info.default_sampling_source.endswith("generation_config.json")
    r = harness.run_cli("info", "--server", served.scheduler.address)
    assert r.returncode == 0, r.stderr
    assert "served defaults: temperature=0 repetition_penalty=2 max_tokens=32 (from " in r.stdout, r.stdout
    none = plain.scheduler.model_info()
    assert not none.default_sampling.HasField("temperature") and none.default_sampling_source == ""
    r = harness.run_cli("info", "--server", plain.scheduler.address)
    assert "served defaults: none" in r.stdout, r.stdout
