"""tools/bench_fairness.py (one heavy client against light ones, fair share and paused streams on
and off) on stories260K with a short window: it starts its own servers and prints one JSON
document with a run per configuration and scenario, every light client served without failure.
The figures themselves are the benchmark's business (docs/benchmarks.md), not this test's."""

import json
import os
import subprocess
import sys

import harness

BENCH = os.path.join(harness.SOURCE_DIR, "tools", "bench_fairness.py")


def test_short_run_prints_one_document_with_every_run():
    r = subprocess.run(
        [sys.executable, BENCH, "--model", harness.STORIES, "--bin-dir", harness.BIN_DIR,
         "--seconds", "1.5", "--light-clients", "2", "--heavy-streams", "4", "--heavy-tokens", "32",
         "--stalled-streams", "8", "--stalled-tokens", "400", "--kv-cache-mb", "4", "--threads", "1"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    runs = {(x["config"], x["scenario"]): x for x in doc["runs"]}
    assert sorted(runs) == [("after", "active"), ("after", "stalled"), ("before", "active"),
                            ("before", "stalled")]
    for key, run in runs.items():
        assert len(run["light"]) == 2, key
        assert run["light_failures"] == 0, (key, run["light"])
        if key[1] == "active":
            assert run["heavy"]["requests"] > 0 and run["heavy"]["failures"] == 0, (key, run["heavy"])
    # With paused streams the light clients get tokens while the never-read streams wait.
    assert all(c["tokens"] > 0 for c in runs[("after", "stalled")]["light"])


def test_bad_arguments_are_refused():
    r = subprocess.run([sys.executable, BENCH, "--model", "x", "--configs", "sometimes"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--configs" in r.stderr, r.stderr
