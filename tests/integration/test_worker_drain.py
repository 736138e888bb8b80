"""Draining one worker of a running pool on loopback: `astr admin drain-worker` before a
scale-down, and a worker's own SIGTERM. Seeded streams run throughout; every output equals
`astr run` with the same seed, and the pool ends full. A fixed --workers address whose worker
restarts joins again."""

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

import harness
from harness import STORIES, request, stream

STREAMS = 12
MAX_TOKENS = 120


def _token(tmp_path):
    path = os.path.join(str(tmp_path), "admin-token")
    with open(path, "w") as f:
        f.write("drain-test-token\n")
    return path


def _load(c, prompts, started):
    """Runs one seeded stream per prompt; `started` is set once each has a token."""
    barrier = threading.Barrier(len(prompts) + 1)

    def run(i):
        req = request(token_ids=prompts[i], max_tokens=MAX_TOKENS, temperature=0.8, seed=70 + i,
                      request_id=f"d{i}")
        first = [True]

        def on_message(m):
            if first[0] and m.token_ids:
                first[0] = False
                barrier.wait(timeout=60)

        return harness.collect_stream(c.stub.GenerateStream(req, timeout=120), on_message)

    pool = ThreadPoolExecutor(len(prompts))
    futures = [pool.submit(run, i) for i in range(len(prompts))]
    barrier.wait(timeout=60)
    started.set()
    return pool, futures


def _check_outputs(prompts, results):
    for i, (p, r) in enumerate(zip(prompts, results)):
        want = harness.offline_run(STORIES, prompt_ids=p, max_tokens=MAX_TOKENS,
                                   extra=["--temperature", "0.8", "--seed", str(70 + i)])
        why = harness.offline_mismatch(r.one(), want)
        assert why is None, f"request {i}: {why}"


def test_admin_drain_worker_under_load_keeps_every_output(make_cluster, tmp_path):
    token = _token(tmp_path)
    c = make_cluster(num_workers=2, worker_flags={"num_pages": 1024, "page_size": 16},
                     scheduler_flags={"admin_token_file": token, "worker_refresh_s": 0.3})
    w0, w1 = (w.address for w in c.workers)
    prompts = harness.story_prompts(STREAMS, 31, 3, 20)
    started = threading.Event()
    pool, futures = _load(c, prompts, started)
    r = harness.run_cli("admin", "drain-worker", "--server", c.scheduler.admin_address,
                        "--token-file", token, "--worker", w0, "--json")
    assert r.returncode == 0, r.stderr
    drained = json.loads(r.stdout)
    assert drained["address"] == w0
    print(f"drain-worker: {drained}")
    results = [f.result(timeout=180) for f in futures]
    pool.shutdown()
    _check_outputs(prompts, results)
    # Drained on purpose: not added back although --workers still lists it.
    time.sleep(1.0)
    stats, _ = harness.wait_pages_free(c)
    assert [w.address for w in stats.workers] == [w1], stats
    assert [w.address for w in c.scheduler.model_info().workers] == [w1]
    # The human form, and an unknown address.
    r = harness.run_cli("admin", "drain-worker", "--server", c.scheduler.admin_address,
                        "--token-file", token, "--worker", "127.0.0.1:1")
    assert r.returncode == 1
    assert "NOT_FOUND" in r.stderr and "127.0.0.1:1" in r.stderr, r.stderr
    # Bad requests name the field.
    admin = c.scheduler.admin_stub()
    auth = [("authorization", "Bearer drain-test-token")]
    for req, field in ((harness.apb.DrainWorkerRequest(), "address"),
                       (harness.apb.DrainWorkerRequest(address=w1, timeout_s=-1), "timeout_s")):
        with pytest.raises(grpc.RpcError) as e:
            admin.DrainWorker(req, metadata=auth, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert e.value.details().startswith(field + ":"), e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        admin.DrainWorker(harness.apb.DrainWorkerRequest(address=w1), timeout=30)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value
    # The pool still serves, on the worker left.
    one = stream(c.stub, request(token_ids=prompts[0], max_tokens=8))
    assert len(one.one().token_ids) == 8
    assert [w.address for w in c.stats().workers] == [w1]


def test_worker_sigterm_finishes_its_sequences_and_a_restarted_worker_rejoins(make_cluster):
    c = make_cluster(num_workers=2,
                     worker_flags={"num_pages": 1024, "page_size": 16, "drain_timeout_s": 60},
                     scheduler_flags={"worker_refresh_s": 0.3})
    w0 = c.workers[0]
    prompts = harness.story_prompts(STREAMS, 32, 3, 20)
    started = threading.Event()
    pool, futures = _load(c, prompts, started)
    w0.proc.signal(harness.signal.SIGTERM)
    assert w0.proc.wait(60) == 0, w0.proc.log_tail()
    results = [f.result(timeout=180) for f in futures]
    pool.shutdown()
    _check_outputs(prompts, results)
    # Its sequences finished on it: none restarted elsewhere.
    assert sum(r.timings.preemptions for r in results) == 0
    log = c.scheduler.proc.log_text()
    assert f"worker {w0.address} left the pool (the worker is shutting down)" in log, log[-3000:]
    stats, _ = harness.wait_pages_free(c)
    assert [w.address for w in stats.workers] == [c.workers[1].address]

    # The same fixed address comes back: it joins again and takes sequences.
    again = harness.ServerProcess(
        "worker0-again", [harness.WORKER_BIN, "--model", STORIES, "--listen", w0.address,
                          "--threads", "1", "--backend", "cpu", "--num-pages", "1024",
                          "--page-size", "16"], c.log_dir)
    try:
        again.wait_listening()
        harness.wait_until(lambda: len(c.stats().workers) == 2, 30)
        for i in range(4):
            stream(c.stub, request(token_ids=prompts[i], max_tokens=8))
        stats, _ = harness.wait_pages_free(c)
        by_address = {w.address: w for w in stats.workers}
        assert by_address[w0.address].sequences_assigned > 0, stats
    finally:
        c.scheduler.close()
        again.kill()
