"""SIGTERM drains: the scheduler finishes in-flight requests (complete outputs), refuses new ones
and exits 0; a worker exits 0 too, idle or with a scheduler connected."""

import signal
import threading
import time

import grpc

import harness
from harness import STORIES, request

STREAMS = 8
MAX_TOKENS = 300  # the signal lands after the first token: the streams are surely in flight
EXIT_TIMEOUT_S = 30


def test_scheduler_sigterm_drains(make_cluster):
    c = make_cluster(worker_flags={"num_pages": 2048, "page_size": 16})
    prompts = harness.story_prompts(STREAMS, 33, 5, 40)
    wants = [
        harness.offline_run(STORIES, prompt_ids=p, max_tokens=MAX_TOKENS, extra=["--ignore-eos"])
        for p in prompts
    ]

    received = [0] * STREAMS
    started = threading.Barrier(STREAMS + 1)
    results = [None] * STREAMS

    def run(i):
        req = request(token_ids=prompts[i], max_tokens=MAX_TOKENS, ignore_eos=True)
        first = [True]

        def on_message(m):
            received[i] += len(m.token_ids)
            if first[0] and received[i] > 0:
                first[0] = False
                started.wait(timeout=60)

        try:
            results[i] = harness.collect_stream(c.stub.GenerateStream(req, timeout=120), on_message)
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    started.wait(timeout=60)
    c.scheduler.proc.signal(signal.SIGTERM)
    at_signal = list(received)
    assert any(r < MAX_TOKENS for r in at_signal), "every stream had finished before SIGTERM"

    # New requests are refused from now on (one sent before the signal was handled may pass).
    deadline = time.monotonic() + 5
    refused = None
    while time.monotonic() < deadline and refused is None:
        try:
            harness.unary(c.stub, request(token_ids=prompts[0], max_tokens=1), timeout=5)
        except grpc.RpcError as e:
            refused = e
    assert refused is not None, "requests still admitted 5 s after SIGTERM"
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, f"{refused.code()}: {refused.details()}"
    print(f"refused while draining: {refused.details()}")
    if any(t.is_alive() for t in threads):
        # Still draining: the stats say so (when the server still answers them).
        try:
            assert c.stats().draining
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e

    for t in threads:
        t.join(timeout=120)
    for i, r in enumerate(results):
        assert not isinstance(r, Exception), f"stream {i} (had {at_signal[i]} tokens at SIGTERM) failed: {r}"
        why = harness.offline_mismatch(r.one(), wants[i])
        assert why is None, f"stream {i}: {why}"
    print(f"tokens received at SIGTERM: {at_signal}")

    drained_at = time.monotonic()
    code = c.scheduler.proc.wait(EXIT_TIMEOUT_S)
    print(f"scheduler exited {time.monotonic() - drained_at:.2f} s after the last stream ended")
    assert code == 0, f"scheduler exit code {code} (None: still running after {EXIT_TIMEOUT_S} s)"


def test_scheduler_sigterm_idle_exits_zero(make_cluster):
    c = make_cluster()
    c.scheduler.proc.signal(signal.SIGTERM)
    code = c.scheduler.proc.wait(EXIT_TIMEOUT_S)
    assert code == 0, f"scheduler exit code {code}"


def test_worker_sigterm_alone_exits_zero(new_cluster):
    c = new_cluster()
    w = c.start_worker()
    w.proc.signal(signal.SIGTERM)
    code = w.proc.wait(EXIT_TIMEOUT_S)
    assert code == 0, f"worker exit code {code}"


def test_worker_sigterm_with_scheduler_connected_exits_zero(make_cluster):
    c = make_cluster()
    harness.unary(c.stub, request(token_ids=[1, 403], max_tokens=4))  # the step stream is live
    w = c.workers[0]
    w.proc.signal(signal.SIGTERM)
    code = w.proc.wait(EXIT_TIMEOUT_S)
    assert code == 0, f"worker exit code {code} with a scheduler connected"
