"""GET /metrics (Prometheus text) agrees with the requests a test sent: after K completions of
known usage, the token counters, the success counter by finish reason and the latency
histograms' counts grew by exactly what was sent (a dedicated cluster: nothing else runs).
Names: docs/metrics.md."""

import math

import pytest

import openai_http as oh

COUNTERS = ["astr:prompt_tokens_total", "astr:generation_tokens_total"]
HISTOGRAMS = ["astr:time_to_first_token_seconds", "astr:e2e_request_latency_seconds"]
GAUGES = ["astr:num_requests_running", "astr:num_requests_waiting"]


scrape = oh.scrape_metrics
total = oh.metric_total


def has(samples, name):
    return any(n == name for n, _ in samples)


@pytest.fixture
def c(make_cluster):
    return make_cluster(worker_flags={"num_pages": 512, "page_size": 16})


def test_metrics_count_what_was_sent(c):
    model = oh.served_model(c)
    families, before = scrape(c)
    for name in COUNTERS + GAUGES + ["astr:request_success_total"]:
        assert has(before, name), f"/metrics has no {name}; families: {sorted(f.name for f in families)}"
    for name in HISTOGRAMS:
        assert has(before, name + "_count") and has(before, name + "_bucket"), name

    # Requests of known usage: some end on length, some on a stop string or stop id, one is
    # streamed.
    sent = []
    for i, (prompt, fields) in enumerate([
        ("Once upon a time", {"max_tokens": 8}),
        ("The little dog", {"max_tokens": 5}),
        ([1, 403, 407], {"max_tokens": 12}),
        ("Once upon a time", {"max_tokens": 24, "stop": ["girl"]}),
        ("Once upon a time", {"max_tokens": 24, "stop_token_ids": [261]}),
        ("Tom and Sue", {"max_tokens": 6, "n": 2, "temperature": 1.0, "seed": 3}),
    ]):
        body = {"model": model, "prompt": prompt, "temperature": 0}
        body.update(fields)
        r = oh.post(c.scheduler.http_address, "/v1/completions", body)
        assert r.status == 200, r
        sent.append(r.json())
    _, values = oh.stream_post(c.scheduler.http_address, "/v1/completions",
                               {"model": model, "prompt": "The sun", "max_tokens": 7, "temperature": 0,
                                "stream": True, "stream_options": {"include_usage": True}})
    streamed_usage = values[-1]["usage"]

    prompt_tokens = sum(b["usage"]["prompt_tokens"] for b in sent) + streamed_usage["prompt_tokens"]
    generation_tokens = (sum(b["usage"]["completion_tokens"] for b in sent)
                         + streamed_usage["completion_tokens"])
    finishes = [ch["finish_reason"] for b in sent for ch in b["choices"]] + ["length"]
    # A sample a stop string ended (vLLM's stop_reason: the string) counts only the tokens returned,
    # not those sampled while the front's finish was on its way (docs/metrics.md).
    stop_string_samples = sum(1 for b in sent for ch in b["choices"]
                              if isinstance(ch.get("stop_reason"), str))
    assert stop_string_samples == 1
    requests = len(sent) + 1
    sequences = len(finishes)

    # Counters may be updated a moment after the response is written: poll until they settle.
    def delta():
        _, after = scrape(c)
        return after, {name: total(after, name) - total(before, name) for name in COUNTERS}

    after, d = delta()
    oh.wait_until(lambda: (got := delta())[1]["astr:generation_tokens_total"] >= generation_tokens and got,
                  timeout=10, interval=0.1)
    after, d = delta()
    # docs/metrics.md: prompt tokens once per request (as usage.prompt_tokens), generated tokens
    # and successes per sample, latency histograms once per request.
    assert d["astr:prompt_tokens_total"] == prompt_tokens, (d, prompt_tokens)
    assert d["astr:generation_tokens_total"] == generation_tokens, (d, generation_tokens)

    def grew(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    assert grew("astr:request_success_total") == sequences, f"{sequences} samples ended"
    # OpenAI's "stop" is astr's stop (string or stop id) or eos.
    assert grew("astr:request_success_total", finished_reason="length") == finishes.count("length")
    assert (grew("astr:request_success_total", finished_reason="stop")
            + grew("astr:request_success_total", finished_reason="eos")) == finishes.count("stop")
    assert grew("astr:request_success_total", finished_reason="abort") == 0
    assert finishes.count("stop") >= 1  # the stop-string request
    for name in HISTOGRAMS:
        n = grew(name + "_count")
        assert n == requests, f"{name}_count grew by {n} for {requests} requests"
        s = grew(name + "_sum")
        assert s > 0 and math.isfinite(s), f"{name}_sum grew by {s}"
        # Cumulative buckets: +Inf equals the count.
        assert grew(name + "_bucket", le="+Inf") == n, name
    # Nothing is left running.
    oh.wait_until(lambda: total(scrape(c)[1], "astr:num_requests_running") == 0, timeout=10, interval=0.1)
    assert total(scrape(c)[1], "astr:num_requests_waiting") == 0
