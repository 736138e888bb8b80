"""LongRoPE through the served path: a random Phi-3 with a pre-training context of 20 (the
transformers goldens' case phi3_longrope_crossing, tests/python/transformers_cases.py) on one
worker. Prompts of 1 and 7 tokens grow past the original context while they generate:
transformers' generate then recomputes the whole sequence with the long factors, and the
scheduler restarts the sequence there (InfoResponse.longrope_original_context), so every greedy id
is transformers' own (tests/python/goldens/transformers_forward.json), with the prefix cache on,
and concurrent requests do not disturb it."""

import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness
from harness import request, unary

CASE = "phi3_longrope_crossing"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    missing = harness.missing_binaries()
    if missing:
        pytest.skip(missing)
    return harness.transformers_case_model(CASE, str(tmp_path_factory.mktemp("phi3") / "model"))


@pytest.fixture(scope="module")
def prompts(model):
    return model[1]["prompts"]


@pytest.fixture(scope="module")
def cluster(log_dir, model):
    folder = model[0]
    c = harness.make_cluster(
        tempfile.mkdtemp(dir=log_dir),
        model=folder,
        worker_flags={"dtype": "f32", "page_size": 4, "num_pages": 256},
        scheduler_flags={"prefill_chunk": 8, "tokenizer": harness.STORIES},
    )
    yield c
    c.close()


def greedy(c, ids, max_tokens):
    r = unary(c.stub, request(token_ids=ids, max_tokens=max_tokens, ignore_eos=True))
    return r.one().token_ids


def test_worker_reports_the_original_context(cluster):
    assert cluster.workers[0].info().longrope_original_context == 20


def test_generations_that_cross_the_original_context_give_transformers_ids(cluster, prompts):
    assert [p["crosses_original_context"] for p in prompts] == [True, True, False]
    for p in prompts:
        assert greedy(cluster, p["ids"], len(p["greedy"])) == p["greedy"], len(p["ids"])
    # Again, concurrently and after the first run's pages were cached.
    with ThreadPoolExecutor(6) as pool:
        futures = [(p, pool.submit(greedy, cluster, p["ids"], len(p["greedy"])))
                   for p in prompts + prompts]
        for p, f in futures:
            assert f.result() == p["greedy"], len(p["ids"])
    harness.wait_pages_free(cluster)
