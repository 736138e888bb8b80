"""astr-worker --metrics-listen: GET /metrics in the Prometheus text format, parsed with
prometheus_client's own parser. After requests of known prompt and output lengths the worker's
step counters agree with its Info (a different interface), its token and sequence histograms with
what was sent, and scraping while it serves sees counters rise and never breaks the stream."""

import threading

from prometheus_client.parser import text_string_to_metric_families

import harness
from harness import request, stream, unary

NUM_PAGES = 256
PAGE_SIZE = 16
METRIC_FLAGS = {"num_pages": NUM_PAGES, "page_size": PAGE_SIZE, "metrics_listen": "127.0.0.1:0"}

FAMILIES = {
    # name as the parser reports it (a counter without _total) -> type
    "astr:worker_steps": "counter",
    "astr:worker_step_time_seconds": "histogram",
    "astr:worker_forward_time_seconds": "histogram",
    "astr:worker_tokens_per_step": "histogram",
    "astr:worker_batch_size": "histogram",
    "astr:worker_kv_pages_used": "gauge",
    "astr:worker_kv_pages_total": "gauge",
    "astr:worker_weight_version": "gauge",
}


def scrape(worker):
    """{family name: family} of one scrape, checking every family's type and model label."""
    families = {f.name: f for f in text_string_to_metric_families(worker.metrics_text())}
    model = worker.info().model_name
    for name, typ in FAMILIES.items():
        assert name in families, f"{name} missing from /metrics: {sorted(families)}"
        assert families[name].type == typ, f"{name}: {families[name].type}"
        for s in families[name].samples:
            assert s.labels.get("model") == model, f"{name}: labels {s.labels}"
    return families


def value(families, family, sample=None, **labels):
    """The value of one sample (sample name defaults to the family's own, _total for counters)."""
    f = families[family]
    want = sample or (family + "_total" if f.type == "counter" else family)
    found = [s.value for s in f.samples
             if s.name == want and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{want} {labels}: {found} in {f.samples}"
    return found[0]


def histogram(families, family):
    """(count, sum, {le: cumulative count}) of a histogram family with one child."""
    f = families[family]
    buckets = {s.labels["le"]: s.value for s in f.samples if s.name == family + "_bucket"}
    return value(families, family, family + "_count"), value(families, family, family + "_sum"), buckets


def test_steps_and_tokens_agree_with_what_was_sent(make_cluster):
    c = make_cluster(worker_flags=METRIC_FLAGS)
    w = c.workers[0]
    before = scrape(w)
    assert value(before, "astr:worker_steps") == 0
    assert value(before, "astr:worker_kv_pages_total") == NUM_PAGES
    assert value(before, "astr:worker_kv_pages_used") == 0
    assert value(before, "astr:worker_weight_version") == 0
    assert histogram(before, "astr:worker_step_time_seconds")[0] == 0

    # One at a time (so no step is shared) and ignoring EOS (so each makes exactly max_tokens);
    # every prompt fits one prefill chunk and the pool holds them all (no preemption).
    sent = [(p, m) for p, m in zip(harness.story_prompts(5, 7, 3, 40), [1, 4, 9, 16, 25])]
    for prompt, max_tokens in sent:
        r = unary(c.stub, request(token_ids=prompt, max_tokens=max_tokens, ignore_eos=True))
        assert len(r.one().token_ids) == max_tokens
    harness.wait_workers_idle(c)
    harness.wait_pages_free(c)

    after = scrape(w)
    info = w.info()
    steps = value(after, "astr:worker_steps")
    assert steps == info.steps > 0
    # The scheduler read a result for every step the worker executed.
    assert c.stats().workers[0].steps == steps
    step_count, step_sum, step_buckets = histogram(after, "astr:worker_step_time_seconds")
    assert step_count == steps and step_sum > 0 and step_buckets["+Inf"] == steps
    # Each request feeds its prompt once, then one decode row for each token after the first.
    tokens_count, tokens_sum, _ = histogram(after, "astr:worker_tokens_per_step")
    assert tokens_count == steps
    assert tokens_sum == sum(len(p) + m - 1 for p, m in sent)
    # Entries: one prefill entry, then max_tokens - 1 decode entries per request.
    batch_count, batch_sum, batch_buckets = histogram(after, "astr:worker_batch_size")
    assert batch_count == steps and batch_sum == sum(m for _, m in sent)
    assert batch_buckets["1"] == steps  # never two sequences in one step
    # The forward ran in every step that had an entry (one per token), not in release-only ones.
    forward_count, forward_sum, _ = histogram(after, "astr:worker_forward_time_seconds")
    assert forward_count == sum(m for _, m in sent) and forward_sum > 0
    assert value(after, "astr:worker_kv_pages_used") == info.pages_in_use == 0


def test_scraping_while_serving(make_cluster):
    c = make_cluster(worker_flags=METRIC_FLAGS)
    w = c.workers[0]
    start_steps = value(scrape(w), "astr:worker_steps")
    prompts = harness.story_prompts(4, 11, 5, 20)
    results = [None] * len(prompts)

    def run(i):
        results[i] = stream(c.stub, request(token_ids=prompts[i], max_tokens=200, ignore_eos=True))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    seen = []  # (steps, pages used) of each scrape while the streams run
    while any(t.is_alive() for t in threads):
        f = scrape(w)
        seen.append((value(f, "astr:worker_steps"), value(f, "astr:worker_kv_pages_used")))
    for t in threads:
        t.join()
    for i, r in enumerate(results):
        assert r is not None and len(r.one().token_ids) == 200, f"stream {i}"
    harness.wait_workers_idle(c)
    final = value(scrape(w), "astr:worker_steps")
    steps_seen = [s for s, _ in seen]
    assert steps_seen == sorted(steps_seen), "worker_steps_total went down"
    # Scrapes landed mid-run: some saw steps done and pages held by the running streams.
    assert any(start_steps < s < final for s in steps_seen), seen[:5]
    assert any(used > 0 for _, used in seen), seen[:5]


def test_other_paths_and_methods(make_cluster):
    c = make_cluster(worker_flags=METRIC_FLAGS)
    base = f"http://{c.workers[0].metrics_address}"
    status, headers, body = harness.http_get(base + "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE astr:worker_steps_total counter" in body
    assert harness.http_get(base + "/")[0] == 404
    assert harness.http_get(base + "/metricsx")[0] == 404
    assert harness.http_get(base + "/metrics", method="POST")[0] == 405


def test_off_by_default(make_cluster):
    c = make_cluster()
    assert c.workers[0].metrics_address is None
    assert "metrics on" not in c.workers[0].proc.log_text()
