"""64 concurrent streaming clients with mixed prompt and output lengths (some prompts long enough
to be split into prefill chunks): all complete, each stream equals its unary result and the
offline engine, and afterwards every page is free and the worker holds no sequence."""

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import harness
from harness import STORIES, request, stream, unary

CLIENTS = 64
PREFILL_CHUNK = 32


def make_requests():
    rng = random.Random(64)
    reqs = []
    for i in range(CLIENTS):
        # A quarter of the prompts exceed several prefill chunks.
        length = rng.randint(100, 300) if i % 4 == 0 else rng.randint(2, 40)
        prompt = harness.story_prompts(1, 1000 + i, length, length)[0]
        reqs.append((prompt, rng.randint(1, 48)))
    return reqs


def test_64_concurrent_streams(make_cluster):
    c = make_cluster(
        worker_flags={"num_pages": 2048, "page_size": 16},
        scheduler_flags={"prefill_chunk": PREFILL_CHUNK, "max_batch_tokens": 256},
    )
    reqs = make_requests()
    start = threading.Barrier(CLIENTS)

    def run_stream(i):
        prompt, max_tokens = reqs[i]
        start.wait(timeout=30)
        return stream(c.stub, request(token_ids=prompt, max_tokens=max_tokens, request_id=f"s{i}"))

    with ThreadPoolExecutor(CLIENTS) as pool:
        streamed = list(pool.map(run_stream, range(CLIENTS)))
    with ThreadPoolExecutor(16) as pool:
        unaries = list(pool.map(lambda r: unary(c.stub, request(token_ids=r[0], max_tokens=r[1])), reqs))

    mismatches = []
    for i, ((prompt, max_tokens), s, u) in enumerate(zip(reqs, streamed, unaries)):
        s1, u1 = s.one(), u.one()
        want = harness.offline_run(STORIES, prompt_ids=prompt, max_tokens=max_tokens)
        if (s1.text, s1.token_ids) != (u1.text, u1.token_ids):
            mismatches.append(f"client {i}: stream {s1.token_ids} != unary {u1.token_ids}")
        why = harness.offline_mismatch(u1, want)
        if why:
            mismatches.append(f"client {i} (prompt {len(prompt)} tokens, max_tokens {max_tokens}):\n{why}")
        assert s1.finish_reason == u1.finish_reason, f"client {i}"
        assert s.usage is not None and s.usage.prompt_tokens == len(prompt), f"client {i}: {s.usage}"
        assert s.usage.completion_tokens == len(s1.token_ids), f"client {i}: {s.usage}"
    assert not mismatches, "\n".join(mismatches)

    stats, _ = harness.wait_pages_free(c, timeout=5)
    assert stats.requests_admitted >= 2 * CLIENTS and stats.requests_finished >= 2 * CLIENTS
    assert stats.requests_refused == 0 and stats.workers[0].up
    assert stats.workers[0].sequences_assigned >= 2 * CLIENTS and stats.workers[0].mean_step_ns > 0
    assert stats.waiting_requests == 0 and stats.running_requests == 0
    harness.wait_workers_idle(c, timeout=5)
