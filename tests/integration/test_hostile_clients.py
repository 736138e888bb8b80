"""The probes of a hostile-but-legitimate client (issue 11), re-run against the real services on
loopback: after each the scheduler is alive and serving, the error names the field or the limit,
and one client cannot lock the others out.

Expected values come from the proto contract, the flags' documented meaning and the offline
engine (`astr run`), never from the services themselves.
"""

import signal
import subprocess
import tempfile
import time

import grpc
import pytest

import harness
from harness import STORIES, request, unary

DEEP = 50_000  # nesting that overflowed a server thread's stack before the depth limit


def deep_json(depth=DEEP):
    return "[" * depth + "]" * depth


def scheduler_status(c, key):
    """A number from the scheduler's /proc/PID/status ("Threads", "VmHWM" in kB, ...)."""
    return harness.proc_status(c.scheduler.proc.proc.pid, key)


def assert_serving(c, prompt=(1, 403, 407), max_tokens=4):
    """The scheduler process is alive and a normal request gets the offline engine's output."""
    assert c.scheduler.proc.proc.poll() is None, c.scheduler.proc.log_tail()
    got = unary(c.stub, request(token_ids=list(prompt), max_tokens=max_tokens)).one()
    want = harness.offline_run(STORIES, prompt_ids=list(prompt), max_tokens=max_tokens)
    why = harness.offline_mismatch(got, want)
    assert why is None, why


# ---------------------------------------------------------------------------------------------
# Deeply nested JSON in the chat fields (needs a model with a chat template: the default model)

MODEL = harness.default_model()


@pytest.fixture(scope="module")
def smol(log_dir):
    if MODEL is None:
        pytest.skip("default model not present (scripts/default_model.sh)")
    c = harness.make_cluster(tempfile.mkdtemp(dir=log_dir), model=MODEL,
                             worker_flags={"num_pages": 64, "page_size": 16})
    yield c
    c.close()


@pytest.mark.parametrize("field", ["template_kwargs_json", "tools_json", "tool_calls_json"])
def test_deeply_nested_json_is_invalid_argument(smol, field):
    req = request(chat=[("user", "Hi")], max_tokens=2)
    if field == "tool_calls_json":
        m = req.chat.messages.add(role="assistant", content="")
        m.tool_calls_json = deep_json()
        path = "chat.messages[1].tool_calls_json"
    else:
        setattr(req.chat, field, deep_json())
        path = f"chat.{field}"
    with pytest.raises(grpc.RpcError) as e:
        unary(smol.stub, req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert path in e.value.details() and "nested deeper than" in e.value.details(), e.value.details()
    assert smol.scheduler.proc.proc.poll() is None, smol.scheduler.proc.log_tail()
    r = unary(smol.stub, request(chat=[("user", "Hi")], max_tokens=2))
    assert r.one().token_ids


def test_chat_template_cli_refuses_deep_messages_file(tmp_path):
    if MODEL is None:
        pytest.skip("default model not present")
    messages = tmp_path / "deep.json"
    messages.write_text('[{"role": "user", "content": ' + deep_json() + "}]")
    r = harness.run_cli("chat-template", "--model", MODEL, "--messages", str(messages))
    assert r.returncode not in (0, -11, 139), r.stderr  # an error, not a crash
    assert "nested deeper than" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# One client holding many streams that it never reads


def test_one_client_cannot_lock_out_the_others(make_cluster):
    # Long generations (the context is 2048) keep the greedy client's streams open; its client
    # never reads, so the server's writes wait on flow control.
    c = make_cluster(scheduler_flags={"stream_stall_timeout_s": 0, "max_queued_requests": 2048})
    greedy = grpc.insecure_channel(c.scheduler.address)
    stub = harness.pb_grpc.GenerateStub(greedy)
    calls = [stub.GenerateStream(request(token_ids=[1, 403, 407], max_tokens=1900,
                                         return_logprobs=True, top_logprobs=5),
                                 timeout=120)
             for _ in range(1100)]
    try:
        def refused_ones():
            done = [x for x in calls if x.done()]
            return [x for x in done if x.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]

        # The calls past the per-connection limit are refused at once. By default it is half of
        # the running sequences the worker holds (--max-running 256): 128.
        refused, _ = harness.wait_until(lambda: len(refused_ones()) >= 1100 - 128 and refused_ones(),
                                        timeout=60, interval=0.1)
        for x in refused[:3]:
            assert "--max-calls-per-peer 128" in x.details(), x.details()
        # Another client is served, and stats, health and tokenization answer.
        # A connection of its own (gRPC would otherwise share the greedy client's connection).
        with grpc.insecure_channel(c.scheduler.address,
                                   options=[("grpc.use_local_subchannel_pool", 1)]) as other:
            ostub = harness.pb_grpc.GenerateStub(other)
            got = unary(ostub, request(token_ids=[1, 403, 407], max_tokens=4)).one()
            want = harness.offline_run(STORIES, prompt_ids=[1, 403, 407], max_tokens=4)
            assert harness.offline_mismatch(got, want) is None
            ostub.Tokenize(harness.pb.TokenizeRequest(text="Once upon"), timeout=30)
            stats = ostub.GetServerStats(harness.pb.GetServerStatsRequest(), timeout=30)
        assert stats.requests_refused_peer_limit == len(refused_ones()), stats
        assert stats.requests_refused >= stats.requests_refused_peer_limit
        # No thread per call: 128 open streams cost the scheduler no thread each.
        threads = scheduler_status(c, "Threads")
        assert threads < 64, f"{threads} scheduler threads with 128 streams open"
        print(f"{len(refused_ones())} refused; scheduler threads with 128 open streams: {threads}")
    finally:
        for x in calls:
            x.cancel()
        greedy.close()
    harness.wait_pages_free(c, timeout=30)
    assert_serving(c)


def test_never_read_streams_are_paused_and_give_their_pages_back(make_cluster):
    # A pool of 4096 tokens, and a client that opens 40 streams of 1900 tokens it never reads:
    # without pausing they would hold the whole pool until the stall timeout (off here).
    c = make_cluster(worker_flags={"num_pages": 256, "page_size": 16},
                     scheduler_flags={"stream_stall_timeout_s": 0, "stream_pause_ms": 500})
    total_pages = c.stats().workers[0].total_pages
    greedy = grpc.insecure_channel(c.scheduler.address, options=[
        ("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)])
    prompt = [1, 403, 407]
    stub = harness.pb_grpc.GenerateStub(greedy)
    calls = [stub.GenerateStream(request(token_ids=prompt, max_tokens=1900, return_logprobs=True,
                                         top_logprobs=5, seed=i), timeout=300)
             for i in range(40)]
    try:
        # Every stream is paused once its client's window is full: held, its pages returned.
        stats, waited = harness.wait_until(
            lambda: (s := c.stats()).requests_held == 40 and s, timeout=60, interval=0.1)
        assert stats.streams_paused >= 40, stats
        harness.wait_pages_free(c, timeout=10)
        print(f"40 never-read streams held after {waited:.1f} s; pool free again "
              f"({total_pages} pages)")
        # Another client is answered at once, with the offline engine's output.
        with grpc.insecure_channel(c.scheduler.address,
                                   options=[("grpc.use_local_subchannel_pool", 1)]) as other:
            t0 = time.monotonic()
            got = unary(harness.pb_grpc.GenerateStub(other),
                        request(token_ids=prompt, max_tokens=8)).one()
            took = time.monotonic() - t0
        want = harness.offline_run(STORIES, prompt_ids=prompt, max_tokens=8)
        assert harness.offline_mismatch(got, want) is None
        assert took < 10, f"the other client waited {took:.1f} s"
        # A paused stream whose client reads again resumes where it was, with the same output
        # as if it had never paused (recomputed from its tokens).
        first = harness.collect_stream(calls[0])
        sample = first.one()
        want = harness.offline_run(STORIES, prompt_ids=prompt, max_tokens=1900)
        assert harness.offline_mismatch(sample, want) is None
    finally:
        for x in calls:
            x.cancel()
        greedy.close()
    harness.wait_pages_free(c, timeout=30)
    # Held requests hold no pages, so free pages do not mean the cancellations were seen: the
    # scheduler drops each held request when its cancellation reaches the loop.
    harness.wait_until(lambda: c.stats().requests_held == 0, timeout=30, interval=0.05)
    assert_serving(c)


def test_stream_of_a_client_that_stops_reading_is_cancelled(make_cluster):
    c = make_cluster(scheduler_flags={"stream_stall_timeout_s": 1})
    # A small receive window: the server can write little before it must wait for the reader.
    slow = grpc.insecure_channel(c.scheduler.address, options=[
        ("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)])
    try:
        call = harness.pb_grpc.GenerateStub(slow).GenerateStream(
            request(token_ids=[1, 403, 407], max_tokens=1900, return_logprobs=True,
                    top_logprobs=5), timeout=120)
        stats, waited = harness.wait_until(
            lambda: (s := c.stats()).streams_stalled == 1 and s, timeout=30, interval=0.1)
        print(f"stalled stream cancelled after {waited:.1f} s")
        harness.wait_pages_free(c, timeout=10)
        # The status comes after the messages the client has not read yet.
        read = 0
        with pytest.raises(grpc.RpcError) as e:
            for _ in call:
                read += 1
        assert e.value.code() == grpc.StatusCode.CANCELLED, e.value.details()
        assert read < 1900
    finally:
        slow.close()
    assert_serving(c)


# A prompt far larger than the context: test_long_prompt.py.


# ---------------------------------------------------------------------------------------------
# Ports in use, and health that follows admission


def _start_expecting_failure(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_second_scheduler_on_a_port_in_use_is_refused(make_cluster):
    c = make_cluster()
    r = _start_expecting_failure([harness.SCHEDULER_BIN, "--workers", c.workers[0].address,
                                  "--listen", c.scheduler.address])
    assert r.returncode == 1, r.stderr
    assert f"cannot listen on {c.scheduler.address}" in r.stderr, r.stderr
    assert "listening on" not in r.stderr
    assert_serving(c)


def test_second_worker_on_a_port_in_use_is_refused(make_cluster):
    c = make_cluster()
    r = _start_expecting_failure([harness.WORKER_BIN, "--model", STORIES, "--backend", "cpu",
                                  "--threads", "1", "--listen", c.workers[0].address])
    assert r.returncode == 1, r.stderr
    assert f"cannot listen on {c.workers[0].address}" in r.stderr, r.stderr
    assert "listening on" not in r.stderr
    assert_serving(c)


def test_health_is_not_serving_without_a_worker(make_cluster):
    c = make_cluster(scheduler_flags={"worker_down_after_ms": 300})
    c.workers[0].proc.kill()

    def health():
        with grpc.insecure_channel(c.scheduler.address) as ch:
            stub = harness.health_pb2_grpc.HealthStub(ch)
            return stub.Check(harness.health_pb2.HealthCheckRequest(service=""), timeout=5).status

    harness.wait_until(lambda: health() == harness.health_pb2.HealthCheckResponse.NOT_SERVING,
                       timeout=20, interval=0.1)
    stats = c.stats()
    assert not stats.accepting_requests
    assert stats.not_accepting_reason == "no worker is up"


def test_stopped_worker_is_noticed_long_before_the_step_timeout(make_cluster):
    # The step timeout stays at its 300 s default: keepalive pings notice the stopped process.
    c = make_cluster(scheduler_flags={"worker_down_after_ms": 500})
    worker = c.workers[0].proc
    worker.signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        harness.wait_until(lambda: not c.stats().workers[0].up, timeout=40, interval=0.2)
        print(f"stopped worker marked down after {time.monotonic() - start:.1f} s")
        stats = c.stats()
        assert not stats.accepting_requests and stats.not_accepting_reason == "no worker is up"
    finally:
        worker.signal(signal.SIGCONT)
    # Once it runs again the scheduler reconnects and serves.
    harness.wait_until(lambda: c.stats().workers[0].up, timeout=30, interval=0.2)
    assert_serving(c)
