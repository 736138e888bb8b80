"""Hostile structured-output constraints (issue 41) against the real services on the default model
(a 49k vocabulary, one worker, one scheduler): each is answered within the compile budget, accepted
or refused with a 400 naming the field (and the limit or budget it went over); the scheduler's
peak resident memory stays far below 1 GB and comes back near where it started; another client's
short requests keep their latency while hostile compiles run; one client's excess compiles are
429 while another client's compile goes ahead; a client that disconnects or cancels stops its
compile (its child process is gone).

Expected outcomes follow docs/structured.md's limits table and the constraint's meaning (an
accepted output that ended with its constraint must match it: Python's `re` and `json` check),
never the server's own answers.
"""

import json
import os
import random
import re
import socket
import statistics
import threading
import time

import grpc
import openai
import pytest

import harness
import openai_http as oh
from harness import pb

MODEL = harness.default_model()
# --grammar-max-compile-ms of the cluster below. The accepted cases take 0.4-1.2 s each on an idle
# 2-core machine (repeat_range_100k, 5000-value enums), but two ran past a 3000 ms budget once when
# the suite's other jobs loaded both cores. The refused cases are refused by memory or size.
BUDGET_MS = 6000
CACHE_MB = 32  # --grammar-cache-mb
SLACK_S = 3.0  # answer time beyond the budget: scheduling, the response, a loaded CI machine
GIB = 1 << 30


@pytest.fixture(scope="module")
def smol(log_dir):
    if MODEL is None:
        pytest.skip("default model not present (scripts/default_model.sh)")
    yield from harness.openai_cluster(
        log_dir, MODEL, worker_flags={"num_pages": 64, "page_size": 16},
        scheduler_flags={"grammar_max_compile_ms": BUDGET_MS, "grammar_cache_mb": CACHE_MB})


def status_kb(c, key):
    return harness.proc_status(c.scheduler.proc.proc.pid, key)


def children(c):
    """Pids of the scheduler's child processes (a compile's trial runs in one)."""
    parent = c.scheduler.proc.proc.pid
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2:].split()[1]) == parent:
            out.append(int(d))
    return out


def metric(c, name, **labels):
    return oh.metric_total(oh.scrape_metrics(c)[1], name, **labels)


def words(n, seed, lo=4, hi=12):
    rng = random.Random(seed)
    return ["".join(chr(rng.randint(97, 122)) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def schema_format(schema):
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def tools(n):
    return [{"type": "function", "function": {
        "name": f"f{i}", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}
        for i in range(n)]


def ebnf_chain(n, tag="x"):
    return ("root ::= r0\n" + "\n".join(f'r{i} ::= "{tag}{i}" r{i + 1} | "y{i}"' for i in range(n))
            + f'\nr{n} ::= "end"')


def nested(depth):
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


# (name, body fields, expected). Expected: ("ok", check) where check(text) holds for an output
# that ended with its constraint (None: any); ("400", param, needle); ("budget", param): a 400
# over the compile budget; ("ok-or-budget", param): near the budget on some machines.
CASES = [
    # The probes of the issue: each was accepted and compiled for 11 to 73 s.
    ("enum_100k_strings", schema_format({"enum": words(100_000, 1, 3, 5)}),
     ("400", "response_format.json_schema.schema", "100000 enum and const values, at most 16384")),
    ("choice_100k", {"structured_outputs": {"choice": words(100_000, 2)}},
     ("400", "structured_outputs.choice", "100000 choices, at most 16384")),
    ("tools_5000_required", {"tools": tools(5000), "tool_choice": "required"},
     ("400", "tools", "5000 tools, at most 1024")),
    ("regex_50k_alternatives", {"structured_outputs": {"regex": "|".join(words(50_000, 3))}},
     ("400", "structured_outputs.regex", "at most 65536")),
    # Under every size limit, over the budget (memory: the same on every machine).
    ("enum_16k_long_strings", schema_format({"enum": words(16_000, 4, 60, 60)}),
     ("budget", "response_format.json_schema.schema")),
    ("choice_16k_long", {"structured_outputs": {"choice": words(16_000, 5, 60, 60)}},
     ("budget", "structured_outputs.choice")),
    ("tools_1000_required", {"tools": tools(1000), "tool_choice": "required"},
     ("ok-or-budget", "tools")),
    # Large EBNF grammars.
    ("ebnf_20k_rules", {"structured_outputs": {"grammar": ebnf_chain(20_000)}},
     ("ok-or-budget", "structured_outputs.grammar")),
    ("ebnf_300_rules", {"structured_outputs": {"grammar": ebnf_chain(300)}},
     ("ok", lambda t: re.fullmatch("".join(f"(x{i}" for i in range(300)) + "end"
                                   + "".join(f"|y{i})" for i in reversed(range(300))), t))),
    # Recursion and nesting.
    ("recursive_ref", schema_format({"$defs": {"n": {"type": "object", "properties": {
        "l": {"$ref": "#/$defs/n"}, "r": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}),
     ("ok", lambda t: isinstance(json.loads(t), dict))),
    ("nested_60_objects", schema_format(nested(60)), ("ok", None)),
    ("nested_200_objects", schema_format(nested(200)), ("400", None, "nested deeper than 128")),
    # Regexes that backtracking engines take exponential time on.
    ("catastrophic_star_star", {"structured_outputs": {"regex": "(a*)*b"}},
     ("ok", lambda t: re.fullmatch("(a*)*b", t))),
    ("catastrophic_alternation", {"structured_outputs": {"regex": "(a|a)*(b|b)*(a|aa)*c"}},
     ("ok", lambda t: re.fullmatch("(a|a)*(b|b)*(a|aa)*c", t))),
    ("catastrophic_plus_plus", {"structured_outputs": {"regex": "(x+x+)+y"}},
     ("ok", lambda t: re.fullmatch("(x+x+)+y", t))),
    # Huge counted repetitions.
    ("repeat_million", {"structured_outputs": {"regex": "((a{100}){100}){100}"}},
     ("ok", lambda t: t == "a" * 1_000_000)),
    ("repeat_range_100k", {"structured_outputs": {"regex": "[a-z]{1,100000}"}},
     ("ok", lambda t: re.fullmatch("[a-z]{1,100000}", t))),
    ("schema_min_items_100k", schema_format({"type": "array", "items": {"type": "string"},
                                             "minItems": 100_000}),
     ("ok", lambda t: len(json.loads(t)) >= 100_000)),
    ("schema_min_length_100k", schema_format({"type": "string", "minLength": 100_000}),
     ("ok", lambda t: len(json.loads(t)) >= 100_000)),
]


def post_chat(c, extra, max_tokens=8, timeout=oh.TIMEOUT_S):
    body = {"model": c.model, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": max_tokens, "temperature": 0, **extra}
    return oh.post(c.scheduler.http_address, "/v1/chat/completions", body, timeout=timeout)


def assert_serving_quickly(c):
    """The scheduler is alive, its peak memory bounded, and a plain request answers."""
    assert c.scheduler.proc.proc.poll() is None, c.scheduler.proc.log_tail()
    assert status_kb(c, "VmHWM") * 1024 < GIB, status_kb(c, "VmHWM")
    start = time.monotonic()
    r = post_chat(c, {}, max_tokens=2)
    assert r.status == 200, r
    assert time.monotonic() - start < 5, time.monotonic() - start


@pytest.fixture(scope="module")
def start_rss_kb(smol):
    post_chat(smol, {}, max_tokens=2)  # warm: the first request's allocations are not a leak
    return status_kb(smol, "VmRSS")


@pytest.mark.parametrize("name,extra,expect", CASES, ids=[c[0] for c in CASES])
def test_hostile_constraint_is_answered_within_the_budget(smol, start_rss_kb, name, extra, expect):
    start = time.monotonic()
    r = post_chat(smol, extra)
    took = time.monotonic() - start
    assert took < BUDGET_MS / 1000 + SLACK_S, (name, took)
    kind = expect[0]
    if kind == "ok-or-budget" and r.status == 200:
        kind = "ok-any"
    if kind in ("ok", "ok-any"):
        assert r.status == 200, r
        choice = r.json()["choices"][0]
        check = expect[1] if kind == "ok" else None
        if check is not None and choice["finish_reason"] == "stop":
            assert check(choice["message"]["content"]), choice["message"]["content"]
    else:
        assert r.status == 400, r
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error", err
        param = expect[1]
        assert err["param"] == param, err
        needle = expect[2] if kind == "400" else "budget of"
        assert needle in err["message"], err
        if kind != "400":
            assert "--grammar-max-compile-" in err["message"], err
            assert err["message"].startswith(param + ": "), err
    assert_serving_quickly(smol)


def test_memory_comes_back_after_refused_and_evicted_compiles(smol, start_rss_kb):
    # Refused over the memory budget, and accepted ones that push each other out of the cache.
    for seed in range(3):
        r = post_chat(smol, {"structured_outputs": {"choice": words(16_000, 100 + seed, 60, 60)}})
        assert r.status == 400, r
        r = post_chat(smol, schema_format({"enum": words(5000, 200 + seed, 8, 16)}))
        assert r.status == 200, r
    assert status_kb(smol, "VmHWM") * 1024 < GIB
    assert metric(smol, "astr:constraint_cache_bytes") <= CACHE_MB << 20
    end_kb = status_kb(smol, "VmRSS")
    assert end_kb - start_rss_kb < 64 * 1024, (start_rss_kb, end_kb)
    oh.wait_until(lambda: not children(smol), timeout=5)  # every trial process is gone


def test_other_clients_keep_their_latency_while_hostile_compiles_run(smol):
    def short():
        start = time.monotonic()
        r = post_chat(smol, {}, max_tokens=2)
        assert r.status == 200, r
        return time.monotonic() - start

    baseline = [short() for _ in range(8)]
    stop = threading.Event()
    hostile_answers = []

    def hostile(k):
        seed = 1000 * k
        while not stop.is_set():
            seed += 1
            r = post_chat(smol, {"structured_outputs": {"choice": words(16_000, seed, 60, 60)}})
            hostile_answers.append(r.status)

    threads = [threading.Thread(target=hostile, args=(k,)) for k in range(1, 4)]
    for t in threads:
        t.start()
    try:
        oh.wait_until(lambda: children(smol), timeout=30)  # a hostile compile is running
        loaded = []
        for _ in range(12):
            loaded.append(short())
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    print("baseline", baseline, "loaded", loaded)
    assert hostile_answers and set(hostile_answers) == {400}, hostile_answers
    # Compiles run at a lower CPU priority in their own processes and threads: a short request
    # waits for neither (measured: 2x the idle median at most on 2 cores).
    assert max(loaded) < max(1.5, 5 * max(baseline)), (baseline, loaded)
    assert statistics.median(loaded) < 3 * statistics.median(baseline) + 0.3, (baseline, loaded)


def grpc_choice_request(seed, words_n=4000, length=10):
    req = harness.request(chat=[("user", "Hi")], max_tokens=2)
    req.sampling.constraint.CopyFrom(
        pb.Constraint(choice=pb.ChoiceList(choices=words(words_n, seed, length, length))))
    return req


def test_one_clients_excess_compiles_are_429_and_others_go_ahead(smol):
    # One gRPC channel is one client: 40 distinct compiles at once. One runs, 16 wait (the
    # defaults), the rest are refused at once.
    stub = smol.stub
    futures = [stub.Generate.future(grpc_choice_request(5000 + i), timeout=120) for i in range(40)]
    refused = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(refused) < 40 - 17:
        refused = [f for f in futures if f.done() and f.exception() is not None
                   and f.exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
        time.sleep(0.01)
    assert len(refused) >= 40 - 17 - 2, len(refused)  # two may have finished meanwhile
    assert "--grammar-max-queued-per-client" in refused[0].exception().details()
    # Another client (the HTTP API) compiles a new constraint without waiting for that queue.
    start = time.monotonic()
    r = post_chat(smol, {"structured_outputs": {"choice": words(500, 77)}}, max_tokens=2)
    assert r.status == 200, r
    assert time.monotonic() - start < BUDGET_MS / 1000 + SLACK_S
    # The rest is dropped by cancelling it: nothing keeps compiling for nobody.
    for f in futures:
        f.cancel()
    oh.wait_until(lambda: not children(smol), timeout=10)
    assert metric(smol, "astr:constraint_compile_refusals_total", reason="busy") >= len(refused)
    assert_serving_quickly(smol)


def slow_grammar(tag):
    """A grammar whose trial runs until the budget ends it (about a second and a half here)."""
    return ebnf_chain(20_000, tag)


def test_disconnect_stops_the_compile(smol):
    killed_before = metric(smol, "astr:constraint_compile_refusals_total", reason="cancelled")
    body = {"model": smol.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
            "structured_outputs": {"grammar": slow_grammar("disconnect")}}
    host, port = oh.split_address(smol.scheduler.http_address)
    s = socket.create_connection((host, port))
    s.sendall(oh.build_request("POST", "/v1/chat/completions", body))
    oh.wait_until(lambda: children(smol), timeout=10)  # its trial runs
    s.close()
    start = time.monotonic()
    oh.wait_until(lambda: not children(smol), timeout=5)
    assert time.monotonic() - start < 1.0  # killed, not left to its budget
    oh.wait_until(lambda: metric(smol, "astr:constraint_compile_refusals_total",
                                 reason="cancelled") == killed_before + 1, timeout=5)
    assert_serving_quickly(smol)


def test_grpc_cancel_stops_the_compile(smol):
    killed_before = metric(smol, "astr:constraint_compile_refusals_total", reason="cancelled")
    req = harness.request(chat=[("user", "Hi")], max_tokens=2)
    req.sampling.constraint.CopyFrom(pb.Constraint(grammar=slow_grammar("cancel")))
    f = smol.stub.Generate.future(req, timeout=60)
    oh.wait_until(lambda: children(smol), timeout=10)
    f.cancel()
    oh.wait_until(lambda: not children(smol), timeout=1.0)
    oh.wait_until(lambda: metric(smol, "astr:constraint_compile_refusals_total",
                                 reason="cancelled") == killed_before + 1, timeout=5)
    # And a deadline that passes while it compiles is a cancel too.
    req.sampling.constraint.CopyFrom(pb.Constraint(grammar=slow_grammar("deadline")))
    with pytest.raises(grpc.RpcError) as e:
        smol.stub.Generate(req, timeout=0.5)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    oh.wait_until(lambda: not children(smol), timeout=1.5)
    assert_serving_quickly(smol)


def test_openai_client_sees_the_400(smol):
    # The official client raises BadRequestError with the param, and the server keeps serving.
    with pytest.raises(openai.BadRequestError) as e:
        smol.client.chat.completions.create(
            model=smol.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
            extra_body={"structured_outputs": {"choice": words(16_000, 9, 60, 60)}})
    assert e.value.body["param"] == "structured_outputs.choice", e.value.body
    assert "--grammar-max-compile-" in e.value.body["message"], e.value.body
    assert_serving_quickly(smol)
