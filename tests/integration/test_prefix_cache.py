"""The scheduler's radix prefix cache on loopback: with --prefix-cache, requests that share a
system prompt, the samples of one request, preempted sequences, sequences moved off a SIGKILLed
worker and the turns of a conversation reuse cached K/V, and every token id and logprob is
bit-identical to the same requests on a --no-prefix-cache scheduler. usage.cached_tokens and
GetServerStats report the reuse, cache_salt isolates namespaces, and after every run each
worker's pool is whole again (cached pages nobody uses count as free)."""

import random
import re
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness
from harness import request, stream, unary

PAGE_SIZE = 16
BIG_POOL = 2048
SMALL_POOL = 16  # 256 tokens: a few of the requests below at once, so sequences are preempted
REQUESTS = 64
SYSTEM_PROMPTS = 4
SEED = 20261201


def full_pages(tokens):
    """Tokens in the full pages of `tokens` tokens."""
    return tokens // PAGE_SIZE * PAGE_SIZE


# ---------------------------------------------------------------------------------------------
# Clusters


def start_scheduler(cluster, prefix_cache, **flags):
    """Cluster.start_scheduler with --prefix-cache / --no-prefix-cache (a bool flag takes no
    value, which harness._flag_args cannot express)."""
    addrs = ",".join(w.address for w in cluster.workers)
    flags.setdefault("admin_listen", "")
    flags.setdefault("http_listen", "")
    flags.setdefault("max_n", 4)
    argv = [harness.SCHEDULER_BIN, "--workers", addrs, "--listen", "127.0.0.1:0",
            "--prefix-cache" if prefix_cache else "--no-prefix-cache"] + harness._flag_args(flags)
    proc = harness.ServerProcess("scheduler", argv, cluster.log_dir)
    proc.wait_listening()
    if flags["http_listen"]:
        proc.http_address = proc.wait_log(harness._HTTP_RE)
    harness.wait_serving(proc.address)
    cluster.scheduler = harness.Scheduler(proc)
    return cluster.scheduler


def cache_cluster(new_cluster, prefix_cache, workers=1, num_pages=BIG_POOL, **flags):
    c = new_cluster()
    for _ in range(workers):
        w = c.start_worker(num_pages=num_pages, page_size=PAGE_SIZE)
        assert w.info().page_size == PAGE_SIZE
    start_scheduler(c, prefix_cache, **flags)
    return c


def check_pages_back(c):
    """Every worker's pool whole again: free == total, no sequence, nothing waiting."""

    def check():
        s = c.stats()
        ws = s.workers
        ok = ws and all(w.free_pages == w.total_pages and w.running_sequences == 0 for w in ws)
        return s if ok and s.running_requests == 0 and s.waiting_requests == 0 else None

    try:
        stats, _ = harness.wait_until(check, 10)
    except AssertionError:
        raise AssertionError(f"pages not all back after 10 s: {c.stats()}") from None
    return stats


# ---------------------------------------------------------------------------------------------
# The request set: SYSTEM_PROMPTS shared prefixes, each request one of them plus its own suffix.


def make_requests(max_tokens=(8, 16)):
    rng = random.Random(SEED)
    systems = harness.story_prompts(SYSTEM_PROMPTS, SEED, 40, 100)
    specs, seen = [], set()
    for i in range(REQUESTS):
        system = i % SYSTEM_PROMPTS
        while True:
            suffix = [rng.randint(259, harness.STORIES_VOCAB - 1)
                      for _ in range(rng.randint(5, 20))]
            prompt = systems[system] + suffix
            if tuple(prompt) not in seen:
                seen.add(tuple(prompt))
                break
        greedy = i % 3 == 0
        specs.append({
            "prompt": prompt,
            "system": system,
            "n": rng.choice([1, 1, 2]) if greedy else rng.choice([1, 2, 3, 4]),
            "greedy": greedy,
            "seed": 5000 + i,
            "max_tokens": rng.randint(*max_tokens),
            "top_logprobs": 3 if i % 5 == 0 else 0,
            "stream": i % 2 == 1,
        })
    return systems, specs


def build(spec, i, tag, salt=None):
    sampling = dict(max_tokens=spec["max_tokens"], return_logprobs=True,
                    top_logprobs=spec["top_logprobs"])
    if not spec["greedy"]:
        sampling.update(temperature=1.0, seed=spec["seed"])
    req = request(token_ids=spec["prompt"], n=spec["n"], request_id=f"{tag}{i}", **sampling)
    if salt is not None:
        req.cache_salt = salt
    return req


def run_all(c, specs, tag, during=None):
    """Every request in flight at once (half streamed, half unary); `during(futures)` runs while
    they do. Returns the results in order."""
    start = threading.Barrier(len(specs) + (1 if during else 0))

    def one(i):
        req = build(specs[i], i, tag)
        start.wait(timeout=60)
        return stream(c.stub, req, timeout=120) if specs[i]["stream"] else unary(c.stub, req, 120)

    with ThreadPoolExecutor(len(specs)) as pool:
        futures = [pool.submit(one, i) for i in range(len(specs))]
        if during:
            start.wait(timeout=60)
            during(futures)
        return [f.result(timeout=180) for f in futures]


def outputs(result):
    """Everything that must be bit-identical between two runs of a request."""
    return {i: (tuple(s.token_ids), tuple(s.logprobs), tuple(tuple(t) for t in s.top_logprobs),
                s.finish_reason, s.text)
            for i, s in sorted(result.samples.items())}


def diff(i, got, want):
    """Why request i's outputs differ, or None."""
    g, w = outputs(got), outputs(want)
    if g == w:
        return None
    if sorted(g) != sorted(w):
        return f"request {i}: samples {sorted(g)} != {sorted(w)}"
    lines = []
    for k in w:
        if g[k] == w[k]:
            continue
        gi, gl, gt, gf, _ = g[k]
        wi, wl, wt, wf, _ = w[k]
        pos = next((p for p in range(min(len(gi), len(wi)))
                    if (gi[p], gl[p]) != (wi[p], wl[p]) or gt[p:p + 1] != wt[p:p + 1]),
                   min(len(gi), len(wi)))
        lines.append(f"request {i} sample {k}: first difference at token {pos}:\n"
                     f"  cache: ids={list(gi)} logprobs={list(gl)} finish={gf}\n"
                     f"  ref:   ids={list(wi)} logprobs={list(wl)} finish={wf}")
    return "\n".join(lines)


def assert_same(results, reference, specs):
    mismatches = [d for i, (r, ref) in enumerate(zip(results, reference)) if (d := diff(i, r, ref))]
    assert not mismatches, (f"{len(mismatches)} of {len(specs)} requests differ from the "
                            f"--no-prefix-cache run:\n" + "\n".join(mismatches[:4]))
    for i, (spec, r) in enumerate(zip(specs, results)):
        assert sorted(r.samples) == list(range(spec["n"])), f"request {i}"
        assert r.usage.prompt_tokens == len(spec["prompt"]), f"request {i}: {r.usage}"
        for s in r.samples.values():
            assert len(s.logprobs) == len(s.token_ids) > 0, f"request {i}"


def check_cached_tokens(results, specs):
    """cached_tokens is whole pages, never the last prompt token (it must be fed to sample)."""
    for i, (spec, r) in enumerate(zip(specs, results)):
        ct = r.usage.cached_tokens
        assert ct % PAGE_SIZE == 0 and 0 <= ct <= full_pages(len(spec["prompt"]) - 1), \
            f"request {i} (prompt {len(spec['prompt'])} tokens): cached_tokens {ct}"


@pytest.fixture(scope="module")
def reference(log_dir):
    """The request set on a --no-prefix-cache scheduler with a big pool: the expected outputs."""
    c = harness.Cluster(tempfile.mkdtemp(dir=log_dir))
    try:
        c.start_worker(num_pages=BIG_POOL, page_size=PAGE_SIZE)
        start_scheduler(c, prefix_cache=False)
        systems, specs = make_requests()
        results = run_all(c, specs, "ref")
        stats = check_pages_back(c)
        yield {"cluster": c, "specs": specs, "systems": systems, "results": results,
               "stats": stats}
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# Tests


def test_model_page_size(reference):
    c = reference["cluster"]
    assert c.workers[0].info().page_size == PAGE_SIZE
    assert c.stats().workers[0].total_pages == BIG_POOL


def test_cache_off_reports_nothing_cached(reference):
    specs, results, stats = reference["specs"], reference["results"], reference["stats"]
    assert [r.usage.cached_tokens for r in results] == [0] * len(specs)
    assert stats.prefix_cache_hit_rate == 0
    assert all(w.cached_pages == 0 and w.cache_hit_tokens == 0 for w in stats.workers), stats
    # The set has what it should: greedy and seeded multi-sample requests; greedy samples agree.
    assert any(s["greedy"] and s["n"] > 1 for s in specs)
    assert any(not s["greedy"] and s["n"] == 4 for s in specs)
    for spec, r in zip(specs, results):
        if spec["greedy"] and spec["n"] > 1:
            assert len({tuple(s.token_ids) for s in r.samples.values()}) == 1


def test_shared_prefixes_identical_with_cache(reference, new_cluster):
    specs, systems = reference["specs"], reference["systems"]
    c = cache_cluster(new_cluster, prefix_cache=True, http_listen="127.0.0.1:0")
    results = run_all(c, specs, "on")
    assert_same(results, reference["results"], specs)
    check_cached_tokens(results, specs)

    cached = [r.usage.cached_tokens for r in results]
    print(f"cached_tokens: sum {sum(cached)}, per request {cached}")
    assert sum(cached) > 0
    # One worker, a pool that never evicts: a page being computed is waited for, never computed
    # twice, so only the first request of each system prompt computes it; every other request
    # reuses at least the system prompt's full pages.
    misses = [i for i, (spec, ct) in enumerate(zip(specs, cached))
              if ct < full_pages(len(systems[spec["system"]]))]
    assert len(misses) <= SYSTEM_PROMPTS, f"requests without their system prompt cached: {misses}"
    assert len({specs[i]["system"] for i in misses}) == len(misses), misses

    stats = check_pages_back(c)
    w = stats.workers[0]
    print(f"hit rate {stats.prefix_cache_hit_rate:.3f}, cached_pages {w.cached_pages}, "
          f"query {w.cache_query_tokens}, hit {w.cache_hit_tokens}")
    assert stats.prefix_cache_hit_rate > 0
    assert 0 < w.cache_hit_tokens <= w.cache_query_tokens
    assert stats.prefix_cache_hit_rate == pytest.approx(w.cache_hit_tokens / w.cache_query_tokens)
    assert w.cached_pages > 0
    # Samples 2..n of a request reuse its whole prompt's full pages (prefilled once), on top of
    # what each request's first sample found.
    want_hits = sum(r.usage.cached_tokens + (s["n"] - 1) * full_pages(len(s["prompt"]) - 1)
                    for s, r in zip(specs, results))
    assert w.cache_hit_tokens >= want_hits, (w.cache_hit_tokens, want_hits)
    assert stats.preemptions == 0

    # /metrics: the same counters.
    status, _, body = harness.http_get(f"http://{c.scheduler.proc.http_address}/metrics")
    assert status == 200, body

    def metric(name, worker=None):
        for line in body.splitlines():
            m = re.match(r"^" + re.escape(name) + r"\{([^}]*)\} (\S+)$", line)
            if m and (worker is None or f'worker="{worker}"' in m.group(1)):
                return float(m.group(2))
        raise AssertionError(f"no {name} (worker {worker}) in /metrics:\n{body}")

    assert metric("astr:prefix_cache_queries_total") == w.cache_query_tokens
    assert metric("astr:prefix_cache_hits_total") == w.cache_hit_tokens
    assert metric("astr:prefix_cache_pages", w.address) == w.cached_pages


def test_preemption_identical_with_cache(reference, new_cluster):
    specs = reference["specs"]
    assert all(len(s["prompt"]) + s["max_tokens"] <= SMALL_POOL * PAGE_SIZE for s in specs)
    c = cache_cluster(new_cluster, prefix_cache=True, num_pages=SMALL_POOL)
    results = run_all(c, specs, "pre")
    assert_same(results, reference["results"], specs)
    check_cached_tokens(results, specs)
    stats = check_pages_back(c)
    print(f"preemptions {stats.preemptions}, hit rate {stats.prefix_cache_hit_rate:.3f}, "
          f"cached_tokens {sum(r.usage.cached_tokens for r in results)}")
    assert stats.preemptions > 0, f"no preemption with {SMALL_POOL} pages: {stats}"
    assert sum(r.timings.preemptions for r in results) > 0
    assert stats.workers[0].total_pages == SMALL_POOL
    assert stats.prefix_cache_hit_rate > 0
    assert stats.requests_refused == 0


def test_killed_worker_identical_with_cache(reference, new_cluster):
    specs = reference["specs"]
    c = cache_cluster(new_cluster, prefix_cache=True, workers=2, worker_down_after_ms=500)
    victim = c.workers[0]
    killed_with = []

    def kill_mid_run(futures):
        # Freeze the victim, then look: sequences it holds now cannot finish there. SIGKILL it
        # only then, so that the kill always lands mid-run (else let it go on and look again).
        def held():
            return {w.address: w for w in c.stats().workers}[victim.address].running_sequences

        while not all(f.done() for f in futures):
            if held() == 0:
                time.sleep(0.002)
                continue
            victim.proc.signal(signal.SIGSTOP)
            time.sleep(0.2)  # results already on the wire are applied
            n = held()
            if n > 0:
                victim.proc.signal(signal.SIGKILL)
                victim.proc.wait(10)
                killed_with.append(n)
                return
            victim.proc.signal(signal.SIGCONT)

    results = run_all(c, specs, "kill", during=kill_mid_run)
    assert killed_with, "every request finished before the victim held a sequence"
    print(f"SIGKILLed the worker holding {killed_with[0]} sequences")
    assert_same(results, reference["results"], specs)
    check_cached_tokens(results, specs)
    assert sum(r.timings.preemptions for r in results) > 0
    assert sum(r.usage.cached_tokens for r in results) > 0
    stats = check_pages_back(c)  # the dead worker's too: its sequences left it
    by_address = {w.address: w for w in stats.workers}
    assert by_address[c.workers[1].address].up, stats
    assert victim.address not in by_address or not by_address[victim.address].up, stats
    print(f"after the kill: {stats.workers}")


CONVERSATIONS = 4
TURNS = 3


def _conversation_turns(c, starts, news, max_tokens, tag):
    """Runs the conversations (concurrently, turns in order): turn t's prompt is turn t-1's
    prompt, its generated tokens, and new tokens. Returns per conversation [(prompt, result)]."""

    def converse(k):
        prompt, turns = list(starts[k]), []
        for t in range(TURNS):
            req = request(token_ids=prompt, max_tokens=max_tokens, return_logprobs=True,
                          temperature=1.0, seed=700 + 10 * k + t, request_id=f"{tag}{k}.{t}")
            r = stream(c.stub, req) if (k + t) % 2 else unary(c.stub, req)
            turns.append((prompt, r))
            prompt = prompt + r.one().token_ids + news[k][t]
        return turns

    with ThreadPoolExecutor(len(starts)) as pool:
        return list(pool.map(converse, range(len(starts))))


def test_multi_turn_reuses_the_conversation(reference, new_cluster):
    rng = random.Random(SEED + 4)
    starts = harness.story_prompts(CONVERSATIONS, SEED + 4, 20, 70)
    news = [[[rng.randint(259, 511) for _ in range(rng.randint(3, 12))] for _ in range(TURNS)]
            for _ in range(CONVERSATIONS)]
    want = _conversation_turns(reference["cluster"], starts, news, 16, "mt-ref")
    c = cache_cluster(new_cluster, prefix_cache=True)
    got = _conversation_turns(c, starts, news, 16, "mt")
    for k in range(CONVERSATIONS):
        for t in range(TURNS):
            (gp, g), (wp, w) = got[k][t], want[k][t]
            assert gp == wp, f"conversation {k} turn {t}: prompts differ"
            d = diff(f"{k}.{t}", g, w)
            assert d is None, d
            assert w.usage.cached_tokens == 0
            ct = g.usage.cached_tokens
            if t == 0:
                assert ct == 0, f"conversation {k}: a fresh prompt found {ct} tokens cached"
                continue
            previous = got[k][t - 1][0]
            print(f"conversation {k} turn {t}: prompt {len(gp)}, cached {ct} "
                  f"(previous prompt {len(previous)})")
            assert ct >= full_pages(len(previous)), (
                f"conversation {k} turn {t}: cached_tokens {ct} < the {full_pages(len(previous))} "
                f"tokens in full pages of turn {t - 1}'s prompt ({len(previous)} tokens)")
            # In fact everything turn t-1 computed: its prompt and all but its last token.
            computed = len(previous) + len(got[k][t - 1][1].one().token_ids) - 1
            assert ct >= full_pages(computed), (ct, computed)
            assert ct <= full_pages(len(gp) - 1)
    check_pages_back(c)
    check_pages_back(reference["cluster"])


def test_cache_salt_isolates(new_cluster):
    c = cache_cluster(new_cluster, prefix_cache=True)
    prompt = harness.story_prompts(1, SEED + 5, 50, 50)[0]

    def run(salt, tag):
        req = request(token_ids=prompt, max_tokens=8, return_logprobs=True, request_id=tag)
        if salt is not None:
            req.cache_salt = salt
        return unary(c.stub, req)

    first = run("tenant-a", "salt-a1")
    other = run("tenant-b", "salt-b1")
    shared = run(None, "salt-none")
    again = run("tenant-a", "salt-a2")
    other_again = run("tenant-b", "salt-b2")
    assert first.usage.cached_tokens == 0
    assert other.usage.cached_tokens == 0, "tenant-b found tenant-a's pages"
    assert shared.usage.cached_tokens == 0, "the unsalted namespace found a salted one's pages"
    assert again.usage.cached_tokens == full_pages(len(prompt) - 1)
    assert other_again.usage.cached_tokens == full_pages(len(prompt) - 1)
    for r in (other, shared, again, other_again):
        assert outputs(r) == outputs(first)
    stats = check_pages_back(c)
    # Three namespaces, each with its own copy of the prompt's pages.
    assert stats.workers[0].cached_pages >= 3 * full_pages(len(prompt) - 1) // PAGE_SIZE, stats


def test_cli_generate_cache_salt(new_cluster):
    """`astr generate --cache-salt` sends the salt: the second call with it reports its prompt's
    full pages cached, a call with another salt none."""
    c = cache_cluster(new_cluster, prefix_cache=True)
    prompt = harness.story_prompts(1, SEED + 6, 40, 40)[0]
    ids = ",".join(str(t) for t in prompt)

    def cached(salt):
        r = harness.run_cli("generate", "--server", c.scheduler.address, "--prompt-ids", ids,
                            "--max-tokens", "4", "--no-stream", "--cache-salt", salt)
        assert r.returncode == 0, r.stderr
        m = re.search(r"\((\d+) cached\)", r.stdout + r.stderr)
        assert m, r.stdout + r.stderr
        return int(m.group(1))

    assert cached("cli-a") == 0
    assert cached("cli-a") == full_pages(len(prompt) - 1)
    assert cached("cli-b") == 0
    check_pages_back(c)


def test_openai_usage_reports_cached_tokens(new_cluster):
    """Through the official openai client: the second completion of a prompt reports its full
    pages in usage.prompt_tokens_details.cached_tokens; cache_salt (extra_body) isolates."""
    import openai_http as oh

    c = cache_cluster(new_cluster, prefix_cache=True, http_listen="127.0.0.1:0")
    client = oh.openai_client(c)
    try:
        model = oh.served_model(c)
        prompt = harness.story_prompts(1, SEED + 7, 45, 45)[0]

        def cached(**extra):
            r = client.completions.create(model=model, prompt=prompt, max_tokens=4,
                                          temperature=0, extra_body=extra or None)
            return r.usage.prompt_tokens_details.cached_tokens

        assert cached() == 0
        assert cached() == full_pages(len(prompt) - 1)
        assert cached(cache_salt="http-tenant") == 0
        assert cached(cache_salt="http-tenant") == full_pages(len(prompt) - 1)
    finally:
        client.close()
    check_pages_back(c)
