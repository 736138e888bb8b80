"""Admission control: with a tiny queue bound, a burst gets some RESOURCE_EXHAUSTED naming the
limit; every admitted request completes with the right output."""

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc

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


def test_priority_scheduled_first(make_cluster):
    # One sequence at a time: LOWS long low-priority requests queue up; a high-priority one sent
    # after them must be scheduled next, ahead of the low ones still waiting.
    lows = 6
    c = make_cluster(scheduler_flags={"max_running": 1})
    prompts = harness.story_prompts(lows + 1, 13, 4, 8)
    done = []
    lock = threading.Lock()

    def run(i, priority, max_tokens):
        req = request(token_ids=prompts[i], max_tokens=max_tokens, priority=priority, ignore_eos=True)
        r = unary(c.stub, req)
        with lock:
            done.append(i)
        return r

    with ThreadPoolExecutor(lows + 1) as pool:
        futures = [pool.submit(run, i, 0, 600) for i in range(lows)]
        harness.wait_until(lambda: c.stats().waiting_requests >= lows - 1, 10)
        futures.append(pool.submit(run, lows, 5, 16))
        for f in futures:
            f.result(timeout=120)
    print(f"completion order: {done}")
    # Before it: the low request running when it arrived, and at most one more that may have
    # started between the check above and its arrival.
    assert done.index(lows) <= 2, f"high-priority request finished at place {done.index(lows)}: {done}"
