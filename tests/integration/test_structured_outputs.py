"""Structured outputs (docs/structured.md): JSON schema, json_object, regex, EBNF grammar and choice
constraints through the OpenAI HTTP API (the official client) and gRPC. Outputs are drawn with
temperature 1 over many seeds on the default model (SmolLM2, byte-level BPE) and checked with
Python's own parsers (json, jsonschema, re); stories260K (SentencePiece with byte fallback) covers
the other vocabulary encoding. Invalid constraints are 400 / INVALID_ARGUMENT naming the field
and the position, and the server keeps serving."""

import json
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import jsonschema
import openai
import pytest

import harness
import weights as W
from harness import STORIES, apb, pb, request, stream, unary

SMOL = harness.default_model()
needs_smol = pytest.mark.skipif(SMOL is None, reason="default model not present (scripts/default_model.sh)")

CORPUS = json.loads((Path(__file__).resolve().parents[2] / "tools" / "schema_corpus.json").read_text())
SEEDS = 20  # x 10 schemas = 200 cases
# Every schema of the corpus bounds its strings, arrays and numbers: its longest output is far
# below this many tokens, so every sample ends with the constraint (finish_reason "stop").
MAX_TOKENS = 400


@pytest.fixture(scope="module")
def smol(log_dir):
    if SMOL is None:
        pytest.skip("default model not present")
    yield from harness.openai_cluster(log_dir, SMOL, worker_flags={"num_pages": 512, "page_size": 16},
                                      scheduler_flags={"max_n": 4})


def chat(c, content, **kw):
    return c.client.chat.completions.create(
        model=c.model, messages=[{"role": "user", "content": content}], **kw)


@needs_smol
def test_json_schema_corpus_validates(smol):
    cases = [(s, seed) for s in CORPUS["schemas"] for seed in range(SEEDS)]

    def run(case):
        entry, seed = case
        # Half through OpenAI's response_format, half through vLLM's structured_outputs.
        if seed % 2 == 0:
            fmt = {"response_format": {"type": "json_schema",
                                       "json_schema": {"name": entry["name"], "schema": entry["schema"],
                                                       "strict": True}}}
        else:
            fmt = {"extra_body": {"structured_outputs": {"json": entry["schema"]}}}
        r = chat(smol, f"Write one {entry['name'].replace('_', ' ')} record as JSON.",
                 max_tokens=MAX_TOKENS, temperature=1.0, seed=1000 + seed, **fmt)
        return entry, seed, r.choices[0]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, cases))
    failures = []
    longest = 0
    for entry, seed, choice in results:
        text = choice.message.content
        longest = max(longest, len(text))
        if choice.finish_reason != "stop":
            failures.append(f"{entry['name']} seed {seed}: finish {choice.finish_reason}: {text!r}")
            continue
        try:
            jsonschema.validate(json.loads(text), entry["schema"])
        except (ValueError, jsonschema.ValidationError) as e:
            failures.append(f"{entry['name']} seed {seed}: {text!r}: {e}")
    print(f"{len(results)} outputs, longest {longest} characters")
    assert not failures, "\n".join(failures[:20])
    # Sampling at temperature 1 gives different documents, not one repeated.
    for entry in CORPUS["schemas"]:
        texts = {c.message.content for e, _, c in results if e is entry}
        assert len(texts) > 1, f"{entry['name']}: every seed gave {texts}"


@needs_smol
def test_property_order_follows_the_schema(smol):
    schema = {"type": "object", "properties": {"zeta": {"type": "integer", "minimum": 0, "maximum": 9},
                                               "alpha": {"type": "boolean"}},
              "required": ["zeta", "alpha"], "additionalProperties": False}
    r = chat(smol, "JSON please", max_tokens=40, temperature=0,
             response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": schema}})
    text = r.choices[0].message.content
    assert list(json.loads(text)) == ["zeta", "alpha"], text


@needs_smol
def test_json_object_streamed_equals_unary(smol):
    # Which seeds close their object within max_tokens depends on the machine's float rounding
    # (the CPU kernels differ between AVX-512 and AVX2 machines): take the first that does.
    for seed in range(1, 17):
        kw = dict(max_tokens=120, temperature=1.0, seed=seed,
                  response_format={"type": "json_object"})
        r = chat(smol, "Give me a JSON object about a cat.", **kw)
        text = r.choices[0].message.content
        if r.choices[0].finish_reason == "stop":
            break
    assert r.choices[0].finish_reason == "stop", f"no seed of 16 closed its object: {text}"
    assert isinstance(json.loads(text), dict)
    parts = [ch.choices[0].delta.content or "" for ch in
             chat(smol, "Give me a JSON object about a cat.", stream=True, **kw) if ch.choices]
    assert "".join(parts) == text


@needs_smol
@pytest.mark.parametrize("pattern", [r"\d{3}-\d{4}", r"(yes|no), because [a-z ]{1,30}\.", r"[A-Z][a-z]{2,8}"])
def test_regex_outputs_match(smol, pattern):
    for seed in range(8):
        r = smol.client.completions.create(model=smol.model, prompt="Answer:", max_tokens=60,
                                           temperature=1.0, seed=seed,
                                           extra_body={"structured_outputs": {"regex": pattern}})
        text = r.choices[0].text
        assert r.choices[0].finish_reason == "stop", text
        assert re.fullmatch(pattern, text), (pattern, text)


@needs_smol
def test_choice_and_grammar(smol):
    choices = ["positive", "negative", "neutral \"quoted\""]
    seen = set()
    for seed in range(12):
        r = chat(smol, "Sentiment of: I love it", max_tokens=20, temperature=1.0, seed=seed,
                 extra_body={"structured_outputs": {"choice": choices}})
        assert r.choices[0].message.content in choices
        seen.add(r.choices[0].message.content)
    assert len(seen) > 1, seen
    grammar = 'root ::= "(" num " " op " " num ")"\nnum ::= [1-9] [0-9]?\nop ::= "+" | "-" | "*"'
    for seed in range(6):
        r = chat(smol, "An arithmetic expression:", max_tokens=30, temperature=1.0, seed=seed,
                 extra_body={"structured_outputs": {"grammar": grammar}})
        assert re.fullmatch(r"\([1-9][0-9]? [+\-*] [1-9][0-9]?\)", r.choices[0].message.content)


@needs_smol
def test_n_samples_and_grpc(smol):
    c = pb.Constraint(choice=pb.ChoiceList(choices=["red", "green", "blue"]))
    req = request(chat=[("user", "A color?")], max_tokens=8, temperature=1.0, seed=3, n=4)
    req.sampling.constraint.CopyFrom(c)
    r = unary(smol.stub, req)
    assert sorted(r.samples) == [0, 1, 2, 3]
    for s in r.samples.values():
        assert s.text in ("red", "green", "blue")
    # Streamed: the same samples (seeded).
    s = stream(smol.stub, req)
    assert {i: x.text for i, x in s.samples.items()} == {i: x.text for i, x in r.samples.items()}


@needs_smol
def test_ignore_eos_ends_with_the_constraint(smol):
    # EOS does not end the sample, the constraint's end does (finish_reason STOP on the EOS id).
    req = request(text="Answer:", max_tokens=30, temperature=0.0, ignore_eos=True)
    req.sampling.constraint.CopyFrom(pb.Constraint(regex="(yes|no)"))
    s = unary(smol.stub, req).one()
    assert s.text in ("yes", "no")
    assert s.finish_reason == harness.FINISH["stop"]


@needs_smol
@pytest.mark.parametrize("fmt,param,needle", [
    ({"structured_outputs": {"grammar": 'root ::= "a" |'}}, "structured_outputs.grammar", "line 1, column"),
    ({"structured_outputs": {"regex": "(ab"}}, "structured_outputs.regex", ""),
    ({"structured_outputs": {"json": "{\"type\": \"objec"}}, "structured_outputs.json", "byte"),
    ({"structured_outputs": {"json": {"type": "object", "properties": {"a": {"type": "nope"}}}}},
     "structured_outputs.json", ""),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice", "at least one"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs", "exactly one"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "response_format.json_schema.name", "name"),
    ({"response_format": {"type": "yaml"}}, "response_format.type", "yaml"),
    ({"response_format": {"type": "json_object"}, "min_tokens": 3}, "min_tokens", "constraint"),
])
def test_invalid_constraints_are_400(smol, fmt, param, needle):
    with pytest.raises(openai.BadRequestError) as e:
        smol.client.completions.create(model=smol.model, prompt="x", max_tokens=8, extra_body=fmt)
    body = e.value.body
    assert body["param"] == param, body
    assert needle in body["message"], body
    assert body["message"].startswith(param.split(".")[0]), body
    # Still serving.
    r = smol.client.completions.create(model=smol.model, prompt="Hi", max_tokens=2, temperature=0)
    assert r.choices[0].finish_reason == "length"


@needs_smol
def test_invalid_constraint_grpc_status(smol):
    req = request(text="x", max_tokens=4)
    req.sampling.constraint.CopyFrom(pb.Constraint(grammar='root ::= "a" |'))
    with pytest.raises(grpc.RpcError) as e:
        unary(smol.stub, req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("sampling.constraint.grammar: "), e.value.details()
    assert "line 1, column" in e.value.details()


def test_sentencepiece_vocab(cluster):
    # stories260K: "▁" words and <0xXX> byte tokens decode through the other vocabulary encoding.
    for seed in range(6):
        req = request(text="Once upon a time", max_tokens=40, temperature=1.0, seed=seed)
        req.sampling.constraint.CopyFrom(pb.Constraint(regex=r" (Tom|Lily) (ran|sat) [a-z]{1,12}\."))
        s = unary(cluster.stub, req).one()
        assert re.fullmatch(r" (Tom|Lily) (ran|sat) [a-z]{1,12}\.", s.text), s.text


def test_constrained_outputs_survive_preemption(make_cluster, tmp_path):
    # A pool too small for all of them at once: samples are preempted and recomputed, and their
    # matchers (kept by the scheduler) continue where they were: the same text as alone.
    num_pages, page_size = 12, 16
    c = make_cluster(worker_flags={"num_pages": num_pages, "page_size": page_size},
                     scheduler_flags={"admin_token_file": W.token_file(str(tmp_path))})
    admin = c.scheduler.admin_stub()
    pattern = r"[a-z]{1,6}( [a-z]{1,6}){10,15}\."
    reqs = []
    for i in range(10):
        req = request(text="Once upon a time", max_tokens=100, temperature=1.0, seed=100 + i)
        req.sampling.constraint.CopyFrom(pb.Constraint(regex=pattern))
        reqs.append(req)
    alone = [unary(c.stub, r).one().text for r in reqs]
    # Queued while paused, then admitted together: sent freely, a loaded machine could run them
    # one after another (each takes a few milliseconds) and never fill the pool.
    admin.Pause(apb.PauseRequest(mode=apb.PAUSE_MODE_KEEP), metadata=W.auth(), timeout=30)
    with ThreadPoolExecutor(len(reqs)) as pool:
        futures = [pool.submit(lambda r=r: unary(c.stub, r).one().text) for r in reqs]
        harness.wait_until(lambda: c.stats().waiting_requests == len(reqs), 30)
        assert admin.Resume(apb.ResumeRequest(), metadata=W.auth(), timeout=30).was_paused
        together = [f.result() for f in futures]
    assert together == alone
    for t in together:
        assert re.fullmatch(pattern, t.lstrip()), t
    stats, _ = harness.wait_pages_free(c)
    assert stats.preemptions > 0, f"no preemption with {num_pages} pages: {stats}"


def test_constrained_outputs_survive_a_killed_worker(make_cluster):
    # The worker holding constrained samples is frozen and SIGKILLed mid-run: they restart on the
    # other worker, their matchers (the scheduler's) where they were, and end as they would have.
    pattern = r"( [a-z]{1,8}){30,40}\."
    reqs = []
    for i in range(12):
        req = request(text="Once upon a time", max_tokens=200, temperature=1.0, seed=300 + i)
        req.sampling.constraint.CopyFrom(pb.Constraint(regex=pattern))
        reqs.append(req)
    ref = make_cluster()
    want = [unary(ref.stub, r).one().text for r in reqs]
    for t in want:
        assert re.fullmatch(pattern, t), t

    c = make_cluster(num_workers=2, scheduler_flags={"worker_down_after_ms": 500})
    victim = c.workers[0]
    killed = []
    with ThreadPoolExecutor(len(reqs)) as pool:
        futures = [pool.submit(lambda r=r: unary(c.stub, r).one().text) for r in reqs]

        def held():
            return {w.address: w for w in c.stats().workers}[victim.address].running_sequences

        while not killed and not all(f.done() for f in futures):
            if held() == 0:
                time.sleep(0.002)
                continue
            victim.proc.signal(signal.SIGSTOP)
            time.sleep(0.2)
            if held() > 0:
                killed.append(held())
                victim.proc.signal(signal.SIGKILL)
                victim.proc.wait(10)
            else:
                victim.proc.signal(signal.SIGCONT)
        got = [f.result() for f in futures]
    assert killed, "every request finished before the victim held one"
    assert got == want
