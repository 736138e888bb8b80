"""Sliding-window page groups through the served path: one worker serving a random Gemma 3 model
(two sliding layers of window 5, one global), built as the transformers goldens' case
gemma3_mqa_hd16_untied is (tests/python/transformers_cases.py), from a pool that holds a sequence
of 72 tokens only because the sliding layers' pages behind the window go back. With the prefix
cache on, preemptions and a conversation's next turn reusing cached pages (a match cut back to
where the window's pages are held), every greedy id is transformers' own
(tests/python/goldens/transformers_forward.json), and every page comes back."""

import tempfile

import pytest

import harness
from harness import request, unary

CASE = "gemma3_mqa_hd16_untied"
PAGE_SIZE = 4
PREFILL_CHUNK = 8
# One sequence of 72 tokens is 18 token pages; one step reads at most 4 through the window of 5
# (4 back from an 8-token chunk), each with 2 window ids: 26 ids. Holding every token page's
# window ids would take 54. 40 leaves room for the prefix cache and a second sequence, not a third.
NUM_PAGES = 40


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    missing = harness.missing_binaries()
    if missing:
        pytest.skip(missing)
    return harness.transformers_case_model(CASE, str(tmp_path_factory.mktemp("gemma3") / "model"))


@pytest.fixture(scope="module")
def gold(model):
    p = max(model[1]["prompts"], key=lambda p: len(p["ids"]))
    return p["ids"], p["greedy"]


@pytest.fixture(scope="module")
def cluster(log_dir, model):
    folder = model[0]
    c = harness.make_cluster(
        tempfile.mkdtemp(dir=log_dir),
        model=folder,
        worker_flags={"dtype": "f32", "page_size": PAGE_SIZE, "num_pages": NUM_PAGES},
        scheduler_flags={"prefill_chunk": PREFILL_CHUNK, "tokenizer": harness.STORIES,
                         "max_n": 4},
    )
    yield c
    c.close()


def greedy(c, ids, max_tokens):
    r = unary(c.stub, request(token_ids=ids, max_tokens=max_tokens, ignore_eos=True))
    return r.one().token_ids, r.usage, r.timings


def test_worker_reports_its_window_tables(cluster):
    info = cluster.workers[0].info()
    assert (info.kv_window_tables, info.kv_window_tokens) == (2, 5)
    assert info.num_pages == NUM_PAGES


def test_a_long_sequence_in_a_small_pool_gives_transformers_ids(cluster, gold):
    ids, want = gold
    got, _, timings = greedy(cluster, ids, len(want))
    assert got == want
    assert timings.preemptions == 0  # alone, it fits
    harness.wait_pages_free(cluster)


def test_next_turn_reuses_cached_pages_and_continues_exactly(cluster, gold):
    ids, want = gold
    greedy(cluster, ids, len(want))  # leaves its pages in the prefix cache
    # The next turn: the first 20 generated tokens become prompt; its continuation is
    # transformers' remaining 12.
    got, usage, _ = greedy(cluster, ids + want[:20], 12)
    assert got == want[20:]
    assert usage.cached_tokens > 0, usage
    harness.wait_pages_free(cluster)


def test_samples_that_preempt_each_other_still_give_transformers_ids(cluster, gold):
    # Four greedy samples of one request start together (the planner, not the clients' timing,
    # decides when) and cannot all fit: some are preempted and restart, every one gives
    # transformers' ids.
    ids, want = gold
    r = unary(cluster.stub, request(token_ids=ids, n=4, max_tokens=len(want), ignore_eos=True))
    assert sorted(r.samples) == [0, 1, 2, 3]
    for sample in r.samples.values():
        assert sample.token_ids == want
    assert r.timings.preemptions > 0, "the pool was meant to be too small"
    stats, _ = harness.wait_pages_free(cluster)
    assert stats.workers[0].total_pages == NUM_PAGES
