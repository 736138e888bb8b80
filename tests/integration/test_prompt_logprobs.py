"""Prompt scoring (GenerateRequest.logprob_start) through the real astr-worker (--dtype f32) and
astr-scheduler, against the independent float64 numpy reference of tests/python/reference_llama.py:

  * for a random HF llama (`astr make-model`) and stories260K converted to an HF folder
    (`astr convert`), the prompt logprobs of 40-300-token prompts, prefilled in several chunks
    (--prefill-chunk) and cut further by the worker's logits rows (--max-batch), equal the
    reference's log_softmax at each position within TOL, in RAW mode and in PROCESSED mode with
    temperature 0.7 (reference: log_softmax(logits / 0.7)); the top alternatives match;
  * the sampled tokens' logprobs still match the reference;
  * streaming gives the same scores as unary, on its first message only; n = 2 gives one set;
  * text prompts are scored on their tokenized ids; `astr generate --logprob-start` prints them;
  * a logprob_start out of [1, prompt length] is INVALID_ARGUMENT naming the field and the range.
"""

import json
import os
import sys
import tempfile

import grpc
import numpy as np
import pytest

import harness
from harness import STORIES

sys.path.insert(0, os.path.join(harness.SOURCE_DIR, "tests", "python"))
from reference_llama import ReferenceModel, log_softmax  # noqa: E402

TOL = 1e-4
NEAR_TIE = 1e-4  # top-n ranks may swap only between entries the reference scores this close
PREFILL_CHUNK = 24
MAX_BATCH = 16  # the worker's logits rows per step: a scoring chunk holds at most 15-16 rows
VOCAB = 512  # both models; the scheduler tokenizes with stories260K's vocabulary

# Max |astr - reference| per model and mode, printed at the end of the module (pytest -s / -rP).
MAX_DIFFS = {}

MODELS = {
    "llama_random": ["make-model", "--format", "hf", "--dtype", "f32", "--layers", "2", "--arch",
                     "llama", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim",
                     "16", "--ffn", "96", "--vocab", str(VOCAB), "--seed", "3"],
    "stories260K": ["convert", STORIES],
}


class Served:
    def __init__(self, name, cluster, ref):
        self.name = name
        self.cluster = cluster
        self.ref = ref
        self.stub = cluster.stub


@pytest.fixture(scope="module", params=sorted(MODELS))
def served(request, log_dir, tmp_path_factory):
    name = request.param
    folder = str(tmp_path_factory.mktemp(name) / "model")
    args = MODELS[name]
    args = args + (["--out", folder] if args[0] == "make-model" else [folder, "--dtype", "f32"])
    r = harness.run_cli(*args, timeout=120)
    assert r.returncode == 0, f"astr {' '.join(args)}: {r.stderr}"
    ref = ReferenceModel.load(folder)
    assert int(ref.cfg["vocab_size"]) == VOCAB
    c = harness.make_cluster(
        tempfile.mkdtemp(dir=log_dir),
        model=folder,
        worker_flags={"dtype": "f32", "max_batch": MAX_BATCH, "page_size": 16, "num_pages": 512},
        scheduler_flags={"prefill_chunk": PREFILL_CHUNK, "tokenizer": STORIES, "max_n": 4},
    )
    yield Served(name, c, ref)
    c.close()


@pytest.fixture(scope="module", autouse=True)
def report_max_diffs():
    yield
    for key, d in sorted(MAX_DIFFS.items()):
        print(f"\nprompt logprobs max |astr - float64 reference| {key}: {d:.3g}")


def record(key, diff):
    MAX_DIFFS[key] = max(MAX_DIFFS.get(key, 0.0), diff)


def make_prompt(length, seed):
    rng = np.random.default_rng(seed)
    return [harness.STORIES_BOS] + [int(x) for x in rng.integers(3, VOCAB, size=length - 1)]


def ref_rows(ref, ids, temperature=None):
    """log_softmax rows of the reference at every position of `ids` (row i predicts ids[i + 1])."""
    logits = ref.forward(ids)
    if temperature is not None:
        logits = logits / temperature
    return log_softmax(logits)


def tops_of(top_list):
    return [[(e.token_id, e.logprob) for e in t.entries] for t in top_list]


def check_top(top, row, k, where):
    """astr's top-k at one position against the reference row; returns the worst |diff|."""
    assert len(top) == k, f"{where}: {len(top)} alternatives, asked for {k}"
    for a, b in zip(top, top[1:]):
        assert a[1] > b[1] or (a[1] == b[1] and a[0] < b[0]), f"{where}: top not ordered: {top}"
    want = [int(i) for i in np.argsort(-row, kind="stable")[:k]]
    worst = 0.0
    for rank, (tid, lp) in enumerate(top):
        d = abs(float(row[tid]) - lp)
        worst = max(worst, d)
        assert d <= TOL, f"{where}: top-{rank} id {tid} logprob {lp:.7f} vs reference {row[tid]:.7f}"
        if tid != want[rank]:
            gap = abs(float(row[tid] - row[want[rank]]))
            assert gap < NEAR_TIE, f"{where}: top ids {[t for t, _ in top]} vs reference {want}"
    return worst


def check_prompt_scores(lps, tops, rows, prompt, start, k, key):
    """prompt_logprobs / prompt_top_logprobs against the reference rows; returns the worst diff."""
    assert len(lps) == len(prompt) - start, f"{key}: {len(lps)} scores for positions [{start}, {len(prompt)})"
    assert len(tops) == (len(lps) if k else 0)
    worst = 0.0
    for j, lp in enumerate(lps):
        i = start + j
        row = rows[i - 1]
        d = abs(float(row[prompt[i]]) - lp)
        worst = max(worst, d)
        assert d <= TOL, (f"{key} position {i}: token {prompt[i]} logprob astr {lp:.7f} vs reference "
                          f"{row[prompt[i]]:.7f} (|diff| {d:.3g})")
        if k:
            worst = max(worst, check_top(tops[j], row, k, f"{key} position {i}"))
    record(key, worst)
    return worst


def check_sampled(sample, rows_after_prompt, k, key, greedy):
    """Sampled tokens' logprobs (and top) against the reference rows at their positions."""
    worst = 0.0
    for t, (tok, lp) in enumerate(zip(sample.token_ids, sample.logprobs)):
        row = rows_after_prompt[t]
        d = abs(float(row[tok]) - lp)
        worst = max(worst, d)
        assert d <= TOL, f"{key} generated {t}: token {tok} logprob {lp:.7f} vs reference {row[tok]:.7f}"
        if greedy:
            gap = float(np.max(row) - row[tok])
            assert gap < NEAR_TIE, f"{key} generated {t}: {tok} is not the reference's greedy pick"
        if k:
            worst = max(worst, check_top(sample.top_logprobs[t], row, k, f"{key} generated {t}"))
    record(key + "/sampled", worst)


def scoring_request(prompt, start, n=1, **sampling):
    req = harness.request(token_ids=prompt, n=n, **sampling)
    req.logprob_start = start
    return req


def stream_messages(stub, req):
    return list(stub.GenerateStream(req, timeout=harness.RPC_TIMEOUT_S))


def test_raw_scores_of_a_long_prompt_match_the_reference(served):
    prompt = make_prompt(250, seed=1)
    req = scoring_request(prompt, 1, temperature=0.0, max_tokens=6, top_logprobs=5,
                          return_logprobs=True, ignore_eos=True)
    r = served.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    rows = ref_rows(served.ref, prompt)
    check_prompt_scores(list(r.prompt_logprobs), tops_of(r.prompt_top_logprobs), rows, prompt, 1, 5,
                        f"{served.name}/raw")
    assert r.prompt_weight_version == 0  # weights loaded from --model
    # The sampled tokens are unchanged by scoring: greedy under the reference, same logprobs.
    sample = harness.unary(served.stub, req).one()
    gen_rows = ref_rows(served.ref, prompt + sample.token_ids[:-1])[len(prompt) - 1:]
    check_sampled(sample, gen_rows, 5, f"{served.name}/raw", greedy=True)


def test_processed_scores_with_temperature_match_the_reference_streamed_and_unary(served):
    prompt = make_prompt(180, seed=2)
    start = 77  # mid-chunk: earlier rows are computed without being scored
    req = scoring_request(prompt, start, temperature=0.7, seed=5, max_tokens=5, top_logprobs=3,
                          logprobs_mode=harness.pb.LOGPROBS_MODE_PROCESSED, ignore_eos=True)
    rows = ref_rows(served.ref, prompt, temperature=0.7)
    u = served.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    check_prompt_scores(list(u.prompt_logprobs), tops_of(u.prompt_top_logprobs), rows, prompt, start,
                        3, f"{served.name}/processed-t0.7")

    messages = stream_messages(served.stub, req)
    first = messages[0]
    assert list(first.prompt_logprobs) == pytest.approx(list(u.prompt_logprobs), abs=1e-6)
    assert tops_of(first.prompt_top_logprobs) == [
        [(i, pytest.approx(lp, abs=1e-6)) for i, lp in t] for t in tops_of(u.prompt_top_logprobs)]
    assert first.prompt_weight_version == u.prompt_weight_version
    for m in messages[1:]:
        assert not m.prompt_logprobs and not m.prompt_top_logprobs, "scores after the first message"
    streamed = harness.collect_stream(messages).one()
    unary = harness.unary(served.stub, req).one()
    assert (streamed.token_ids, streamed.text) == (unary.token_ids, unary.text)
    # Seeded sampling at temperature 0.7: each drawn token's processed logprob is the reference's.
    gen_rows = ref_rows(served.ref, prompt + unary.token_ids[:-1], temperature=0.7)[len(prompt) - 1:]
    check_sampled(unary, gen_rows, 3, f"{served.name}/processed-t0.7", greedy=False)


def test_n_samples_share_one_set_of_scores(served):
    prompt = make_prompt(60, seed=3)
    one = served.stub.Generate(scoring_request(prompt, 10, temperature=0.0, max_tokens=3),
                               timeout=harness.RPC_TIMEOUT_S)
    req = scoring_request(prompt, 10, n=2, temperature=1.0, seed=9, max_tokens=4, ignore_eos=True)
    two = served.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    assert len(two.completions) == 2
    assert all(len(c.token_ids) == 4 for c in two.completions)
    assert list(two.prompt_logprobs) == pytest.approx(list(one.prompt_logprobs), abs=1e-6)
    check_prompt_scores(list(two.prompt_logprobs), [], ref_rows(served.ref, prompt), prompt, 10, 0,
                        f"{served.name}/raw-n2")
    # Sample 1 (which does not score) finishes its prefill first; its tokens wait for the scores,
    # which the first message carries.
    messages = stream_messages(served.stub, req)
    assert list(messages[0].prompt_logprobs) == pytest.approx(list(one.prompt_logprobs), abs=1e-6)
    assert sum(len(m.prompt_logprobs) for m in messages) == len(prompt) - 10
    assert harness.collect_stream(messages).samples.keys() == {0, 1}


def test_text_prompt_is_scored_on_its_tokens(served):
    req = harness.request(text="Once upon a time, there was a little girl named Lily. She loved to "
                               "play outside in the park with her friends every day.",
                          temperature=0.0, max_tokens=2, return_prompt_ids=True)
    req.logprob_start = 1
    r = served.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S)
    prompt = list(r.prompt_ids)
    assert len(prompt) >= 20 and prompt[0] == harness.STORIES_BOS
    check_prompt_scores(list(r.prompt_logprobs), [], ref_rows(served.ref, prompt), prompt, 1, 0,
                        f"{served.name}/raw-text")


def test_logprob_start_at_the_prompt_length_scores_nothing(served):
    prompt = make_prompt(40, seed=4)
    r = served.stub.Generate(scoring_request(prompt, len(prompt), temperature=0.0, max_tokens=2),
                             timeout=harness.RPC_TIMEOUT_S)
    assert len(r.prompt_logprobs) == 0 and len(r.completions[0].token_ids) == 2


def test_out_of_range_logprob_start_is_invalid_argument(served):
    prompt = make_prompt(40, seed=5)
    for start in (0, -3, len(prompt) + 1):
        req = scoring_request(prompt, start, max_tokens=2)
        for call in (lambda: served.stub.Generate(req, timeout=harness.RPC_TIMEOUT_S),
                     lambda: stream_messages(served.stub, req)):
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
            assert "logprob_start" in e.value.details() and f"[1, {len(prompt)}]" in e.value.details()
    # The server goes on serving.
    ok = served.stub.Generate(scoring_request(prompt, 5, max_tokens=1), timeout=harness.RPC_TIMEOUT_S)
    assert len(ok.prompt_logprobs) == len(prompt) - 5


def test_cli_generate_prints_the_scores(served):
    prompt = make_prompt(45, seed=6)
    r = harness.run_cli("generate", "--server", served.cluster.scheduler.address, "--prompt-ids",
                        ",".join(map(str, prompt)), "--logprob-start", "3", "--logprobs", "2",
                        "--temperature", "0", "--max-tokens", "2", "--no-stream", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    tops = [[(e["token_id"], e["logprob"]) for e in t["entries"]] for t in out["prompt_top_logprobs"]]
    check_prompt_scores(out["prompt_logprobs"], tops, ref_rows(served.ref, prompt), prompt, 3, 2,
                        f"{served.name}/raw-cli")
    bad = harness.run_cli("generate", "--server", served.cluster.scheduler.address, "--prompt-ids",
                          ",".join(map(str, prompt)), "--logprob-start", "0", "--no-stream")
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr and "logprob_start" in bad.stderr
