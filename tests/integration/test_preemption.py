"""A KV pool too small for every running request: sequences are preempted and recomputed, every
request completes with the greedy output of the offline engine (which has a big pool), none fails."""

import random
from concurrent.futures import ThreadPoolExecutor

import harness
from harness import STORIES, request, stream, unary

PAGE_SIZE = 16
NUM_PAGES = 12  # 192 tokens: two or three of the requests below at their full length
REQUESTS = 16


def test_small_pool_preempts_and_completes(make_cluster):
    c = make_cluster(worker_flags={"num_pages": NUM_PAGES, "page_size": PAGE_SIZE})
    rng = random.Random(7)
    reqs = []
    for i in range(REQUESTS):
        length = rng.randint(10, 40)
        prompt = harness.story_prompts(1, 500 + i, length, length)[0]
        reqs.append((prompt, 40))  # at most 80 tokens = 5 pages: each fits the pool alone
    assert all(len(p) + m <= NUM_PAGES * PAGE_SIZE for p, m in reqs)

    def run(i):
        prompt, max_tokens = reqs[i]
        req = request(token_ids=prompt, max_tokens=max_tokens, request_id=f"p{i}")
        # Half stream, half unary: both paths must survive preemption.
        return stream(c.stub, req) if i % 2 else unary(c.stub, req)

    with ThreadPoolExecutor(REQUESTS) as pool:
        results = list(pool.map(run, range(REQUESTS)))

    mismatches = []
    for i, ((prompt, max_tokens), r) in enumerate(zip(reqs, results)):
        want = harness.offline_run(STORIES, prompt_ids=prompt, max_tokens=max_tokens)
        why = harness.offline_mismatch(r.one(), want)
        if why:
            mismatches.append(f"request {i} ({'stream' if i % 2 else 'unary'}):\n{why}")
    assert not mismatches, "\n".join(mismatches)

    stats, _ = harness.wait_pages_free(c)
    print(f"preemptions: {stats.preemptions}")
    assert stats.preemptions > 0, f"no preemption with {NUM_PAGES} pages: {stats}"
    reported = sum(r.timings.preemptions for r in results if r.timings is not None)
    assert reported > 0, "no request's timings report a preemption"
    assert stats.workers[0].total_pages == NUM_PAGES
    harness.wait_workers_idle(c)
