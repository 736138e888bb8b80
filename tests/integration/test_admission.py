"""Admission control: with a tiny queue bound, a burst gets some RESOURCE_EXHAUSTED naming the
limit; every admitted request completes with the right output."""

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

import harness
from harness import STORIES, request, unary

BURST = 24
MAX_TOKENS = 32


def burst(c, prompts):
    start = threading.Barrier(len(prompts))

    def run(i):
        start.wait(timeout=30)
        try:
            return unary(c.stub, request(token_ids=prompts[i], max_tokens=MAX_TOKENS))
        except grpc.RpcError as e:
            return e

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(run, range(len(prompts))))


def check_burst(c, prompts, results, limit_words):
    refused = [r for r in results if isinstance(r, grpc.RpcError)]
    done = [(p, r) for p, r in zip(prompts, results) if not isinstance(r, grpc.RpcError)]
    for e in refused:
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"{e.code()}: {e.details()}"
        assert any(w in e.details() for w in limit_words), f"{e.details()!r} names none of {limit_words}"
    print(f"{len(refused)} refused, {len(done)} completed")
    assert refused, "a burst over the queue bound refused nothing"
    assert done, "nothing was admitted"
    for p, r in done:
        want = harness.offline_run(STORIES, prompt_ids=p, max_tokens=MAX_TOKENS)
        why = harness.offline_mismatch(r.one(), want)
        assert why is None, why
    stats, _ = harness.wait_pages_free(c)
    assert stats.requests_refused == len(refused), stats
    # The server still admits once the burst is over.
    unary(c.stub, request(token_ids=prompts[0], max_tokens=2))


def test_max_queued_requests(make_cluster):
    # One running sequence at a time keeps the rest of the burst waiting.
    c = make_cluster(scheduler_flags={"max_queued_requests": 2, "max_running": 1})
    prompts = harness.story_prompts(BURST, 11, 4, 12)
    check_burst(c, prompts, burst(c, prompts), ["max_queued_requests", "max-queued-requests"])


def test_max_queued_tokens(make_cluster):
    c = make_cluster(scheduler_flags={"max_queued_tokens": 64, "max_running": 1})
    prompts = harness.story_prompts(BURST, 12, 40, 40)  # two waiting prompts exceed 64 tokens
    check_burst(c, prompts, burst(c, prompts), ["max_queued_tokens", "max-queued-tokens"])
