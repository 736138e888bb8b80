"""Sampling through the services: seeded n-sample requests are reproducible and equal through
unary, stream and the offline engine; logprobs are sane; stop strings, stop ids, EOS and length
end samples with the right finish reason, and stop strings never reach the text unless asked."""

import math

import pytest

import harness
from harness import FINISH, STORIES, request, stream, unary

PROMPT = [1, 403, 407, 261, 378]  # "Once upon a time"
# llama.cpp's greedy continuation (models/README.md).
GOLDEN_TEXT = ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw"
GOLDEN_IDS = [432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
              410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394]


def both(c, req):
    """Unary and stream results of one request, checked equal sample by sample."""
    u = unary(c.stub, req)
    s = stream(c.stub, req)
    assert sorted(u.samples) == sorted(s.samples)
    for i in u.samples:
        a, b = u.samples[i], s.samples[i]
        assert (a.text, a.token_ids, a.finish_reason) == (b.text, b.token_ids, b.finish_reason), f"sample {i}"
        assert (a.stop_string, a.stop_token_id) == (b.stop_string, b.stop_token_id), f"sample {i}"
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)
    return u, s


def test_seeded_samples_reproducible(cluster):
    req = request(token_ids=PROMPT, n=3, temperature=0.9, seed=1234, max_tokens=24, request_id="seeded")
    u1, s1 = both(cluster, req)
    assert u1.request_ids == {"seeded"} and s1.request_ids == {"seeded"}
    u2 = unary(cluster.stub, req)
    assert sorted(u1.samples) == [0, 1, 2]
    assert {i: s.key() for i, s in u1.samples.items()} == {i: s.key() for i, s in u2.samples.items()}
    assert u1.seed == 1234 and s1.seed == 1234
    assert u1.usage.prompt_tokens == len(PROMPT)
    assert u1.usage.completion_tokens == sum(len(s.token_ids) for s in u1.samples.values())
    want = harness.offline_run(
        STORIES, prompt_ids=PROMPT, max_tokens=24,
        extra=["--n", "3", "--temperature", "0.9", "--seed", "1234"],
    )
    for i, s in u1.samples.items():
        why = harness.offline_mismatch(s, want["samples"][i])
        assert why is None, f"sample {i} vs astr run --n 3 --seed 1234: {why}"


def test_drawn_seed_is_returned_and_replays(cluster):
    req = request(token_ids=PROMPT, n=2, temperature=1.0, max_tokens=16)
    first = unary(cluster.stub, req)
    req.sampling.seed = first.seed
    again = unary(cluster.stub, req)
    assert again.seed == first.seed
    assert {i: s.key() for i, s in again.samples.items()} == {i: s.key() for i, s in first.samples.items()}


def check_top(sample, k, greedy):
    assert len(sample.logprobs) == len(sample.token_ids)
    assert len(sample.top_logprobs) == len(sample.token_ids)
    for pos, (tid, lp, top) in enumerate(zip(sample.token_ids, sample.logprobs, sample.top_logprobs)):
        assert lp <= 1e-6 and math.isfinite(lp), f"position {pos}: logprob {lp}"
        assert len(top) == k, f"position {pos}: {len(top)} alternatives"
        order = sorted(top, key=lambda e: (-e[1], e[0]))
        assert top == order, f"position {pos}: not sorted: {top}"
        assert all(e[1] <= 1e-6 for e in top)
        assert sum(math.exp(e[1]) for e in top) <= 1 + 1e-4
        assert lp <= top[0][1] + 1e-6
        in_top = [e for e in top if e[0] == tid]
        if in_top:
            assert in_top[0][1] == pytest.approx(lp, abs=1e-5)
        if greedy:
            assert top[0][0] == tid, f"position {pos}: greedy chose {tid}, top is {top[0]}"


def test_logprobs_greedy_match_offline(cluster):
    req = request(token_ids=PROMPT, max_tokens=12, return_logprobs=True, top_logprobs=3)
    u, s = both(cluster, req)
    check_top(u.one(), 3, greedy=True)
    check_top(s.one(), 3, greedy=True)
    want = harness.offline_run(STORIES, prompt_ids=PROMPT, max_tokens=12, extra=["--logprobs", "3"])
    assert u.one().logprobs == pytest.approx(want["logprobs"], abs=1e-3)
    for got_top, want_top in zip(u.one().top_logprobs, want["top_logprobs"]):
        assert [e[0] for e in got_top] == [e["id"] for e in want_top]


def test_logprobs_sampled(cluster):
    req = request(token_ids=PROMPT, n=2, temperature=1.2, seed=5, max_tokens=16, top_logprobs=5)
    u, s = both(cluster, req)
    for smp in list(u.samples.values()) + list(s.samples.values()):
        check_top(smp, 5, greedy=False)


def test_no_logprobs_unless_asked(cluster):
    u = unary(cluster.stub, request(token_ids=PROMPT, max_tokens=4)).one()
    assert u.logprobs == [] and u.top_logprobs == []


# (stop strings, include_stop_str_in_output, expected text, expected matched stop): texts cut by
# hand from the golden continuation.
STOP_CASES = [
    (["Lily"], False, ", there was a little girl named ", "Lily"),
    (["Lily"], True, ", there was a little girl named Lily", "Lily"),
    (["l nam"], False, ", there was a little gir", "l nam"),  # spans the tokens "l" and " named"
    (["park", "little"], False, ", there was a ", "little"),  # the earliest match wins
    (["park.", "zzz"], True,
     ", there was a little girl named Lily. She loved to play outside in the park.", "park."),
]


@pytest.mark.parametrize("stops,include,text,matched", STOP_CASES)
def test_stop_strings(cluster, stops, include, text, matched):
    req = request(token_ids=PROMPT, max_tokens=32, stop=stops, include_stop_str_in_output=include)
    u, s = both(cluster, req)
    for r in (u, s):
        smp = r.one()
        assert smp.text == text
        assert smp.finish_reason == FINISH["stop"]
        assert smp.stop_string == matched
        # The tokens behind the text are a prefix of the greedy ones.
        assert smp.token_ids == GOLDEN_IDS[: len(smp.token_ids)]
    extra = [a for st in stops for a in ("--stop", st)]
    want = harness.offline_run(STORIES, prompt_ids=PROMPT, max_tokens=32, extra=extra)
    if not include:
        assert want["text"] == text  # the offline engine agrees with the hand-cut text


def test_stop_strings_never_leak_in_samples(cluster):
    stops = [" the", "ed", "!"]
    req = request(token_ids=PROMPT, n=4, temperature=1.0, seed=77, max_tokens=40, stop=stops)
    u, s = both(cluster, req)
    for r in (u, s):
        for i, smp in r.samples.items():
            for st in stops:
                assert st not in smp.text, f"sample {i}: {st!r} in {smp.text!r}"
            if smp.finish_reason == FINISH["stop"]:
                assert smp.stop_string in stops
            elif smp.finish_reason == FINISH["length"]:
                assert len(smp.token_ids) == 40
            else:
                assert smp.finish_reason == FINISH["eos"], f"sample {i}: {smp.finish_reason}"


def test_stop_token_id(cluster):
    req = request(token_ids=PROMPT, max_tokens=16, stop_token_ids=[376])
    u, _ = both(cluster, req)
    smp = u.one()
    assert smp.token_ids == GOLDEN_IDS[:5]  # the stop id is listed
    assert smp.finish_reason == FINISH["stop"]
    assert smp.stop_token_id == 376
    want = harness.offline_run(STORIES, prompt_ids=PROMPT, max_tokens=16, extra=["--stop-token-ids", "376"])
    assert harness.offline_mismatch(smp, want) is None, harness.offline_mismatch(smp, want)


def test_eos_finish(cluster):
    # A +100 bias on EOS (id 2) makes it the greedy choice at once.
    u, _ = both(cluster, request(token_ids=PROMPT, max_tokens=16, logit_bias={2: 100.0}))
    smp = u.one()
    assert smp.finish_reason == FINISH["eos"]
    assert smp.text == ""
    assert smp.token_ids in ([], [2])


def test_min_tokens_masks_eos(cluster):
    req = request(token_ids=PROMPT, max_tokens=16, logit_bias={2: 100.0}, min_tokens=3)
    u, _ = both(cluster, req)
    smp = u.one()
    assert smp.finish_reason == FINISH["eos"]
    assert 2 not in smp.token_ids[:3] and len(smp.token_ids) >= 3
    want = harness.offline_run(
        STORIES, prompt_ids=PROMPT, max_tokens=16, extra=["--logit-bias", "2:100", "--min-tokens", "3"]
    )
    assert harness.offline_mismatch(smp, want) is None, harness.offline_mismatch(smp, want)


def test_ignore_eos_runs_to_length(cluster):
    req = request(token_ids=PROMPT, max_tokens=6, logit_bias={2: 100.0}, ignore_eos=True)
    u, _ = both(cluster, req)
    smp = u.one()
    assert smp.finish_reason == FINISH["length"]
    assert smp.token_ids == [2] * 6


def test_length_finish(cluster):
    u, s = both(cluster, request(token_ids=PROMPT, max_tokens=7, request_id="len7"))
    assert u.one().finish_reason == FINISH["length"]
    assert u.one().token_ids == GOLDEN_IDS[:7]


def test_request_id_made_up_when_empty(cluster):
    u = unary(cluster.stub, request(token_ids=PROMPT, max_tokens=2))
    s = stream(cluster.stub, request(token_ids=PROMPT, max_tokens=2))
    assert len(u.request_ids) == 1 and "" not in u.request_ids
    assert len(s.request_ids) == 1 and "" not in s.request_ids


def test_timings_ordered(cluster):
    for r in (unary(cluster.stub, request(token_ids=PROMPT, max_tokens=8)),
              stream(cluster.stub, request(token_ids=PROMPT, max_tokens=8))):
        t = r.timings
        assert t is not None
        assert 0 <= t.queue_ns <= t.time_to_first_token_ns <= t.total_ns, t
        assert t.total_ns > 0
        assert t.total_ns < 60 * 10**9
