"""tools/bench_structured.py (the structured-outputs benchmark) in its --smoke mode on the default
model: one JSON document with a compile time per corpus schema, and constrained and unconstrained
decoding of the same token counts at each batch size. And tools/bench_hostile_constraints.py on two
of its cases."""

import json
import os
import subprocess
import sys

import pytest

import harness

BENCH = os.path.join(harness.SOURCE_DIR, "tools", "bench_structured.py")
SMOL = harness.default_model()


@pytest.mark.skipif(SMOL is None, reason="default model not present (scripts/default_model.sh)")
def test_smoke_run_prints_figures():
    env = dict(os.environ, ASTR_BIN_DIR=harness.BIN_DIR)
    r = subprocess.run([sys.executable, BENCH, "--smoke", "--model", SMOL, "--threads", "1"],
                       capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["rounds"] == 1
    assert len(doc["compile_ms"]) == 3 and set(doc["compile_ms"]) == set(doc["cached_ms"])
    assert set(doc["miss_request_ms"]) == set(doc["compile_ms"])
    # A schema new to the server compiles; the same schema again comes from the cache.
    assert all(v > 0 for v in doc["compile_ms"].values()), doc["compile_ms"]
    assert [d["batch"] for d in doc["decode"]] == [1, 2]
    for d in doc["decode"]:
        # Every constrained output has at least one token; both runs made the same count.
        assert d["tokens"][0] >= d["batch"]
        assert d["constrained_tok_s"] > 0 and d["unconstrained_tok_s"] > 0
        assert d["overhead"] == pytest.approx(1 - d["constrained_tok_s"] / d["unconstrained_tok_s"], abs=1e-3)


HOSTILE = os.path.join(harness.SOURCE_DIR, "tools", "bench_hostile_constraints.py")


@pytest.mark.skipif(SMOL is None, reason="default model not present (scripts/default_model.sh)")
def test_hostile_bench_prints_figures():
    env = dict(os.environ, ASTR_BIN_DIR=harness.BIN_DIR)
    r = subprocess.run([sys.executable, HOSTILE, "--model", SMOL, "--threads", "1",
                        "--cases", "choice_100k,recursive_ref"],
                       capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [c["case"] for c in doc["cases"]] == ["choice_100k", "recursive_ref"]
    # docs/structured.md: over the choice count, a 400 naming the field; a recursive schema compiles.
    assert doc["cases"][0]["status"] == 400
    assert doc["cases"][0]["param"] == "structured_outputs.choice"
    assert doc["cases"][1]["status"] == 200
    rss = doc["scheduler_rss_mb"]
    assert 0 < rss["start"] <= rss["peak"] and 0 < rss["end"] <= rss["peak"]
    assert doc["other_client_ms"]["idle_p50"] > 0
