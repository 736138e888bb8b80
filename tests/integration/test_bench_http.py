"""tools/bench_http.py (the HTTP vs gRPC serving benchmark) in its --smoke mode on stories260K: it
starts its own worker and scheduler, and prints one JSON document whose every level has positive
throughput and no error over both transports. Also its usage errors."""

import json
import os
import subprocess
import sys

import harness

BENCH = os.path.join(harness.SOURCE_DIR, "tools", "bench_http.py")


def run_bench(*args, timeout=180):
    env = dict(os.environ, ASTR_BIN_DIR=harness.BIN_DIR)
    return subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def test_smoke_run_prints_positive_figures_for_both_transports():
    r = run_bench("--smoke", "--model", harness.STORIES, "--bin-dir", harness.BIN_DIR)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # one JSON document, nothing else on stdout
    failed = [(run["server"], run["level"], run["error_samples"]) for run in doc["runs"]
              if run.get("errors")]
    assert not failed, f"failed requests: {failed}\n{r.stderr[-3000:]}"
    assert doc["config"]["levels"] == [1, 2]
    assert doc["config"]["max_tokens"] == 4
    for server in ("astr_http", "astr_grpc"):
        levels = doc["summary"][server]
        assert sorted(levels) == ["1", "2"], levels
        for level, fig in levels.items():
            where = f"{server} level {level}: {fig}"
            assert fig["errors"] == 0, where
            assert fig["requests"] == 2, where
            assert fig["tokens_per_s"]["median"] > 0, where
            assert fig["ttft_ms_p50"] > 0 and fig["ttft_ms_p99"] >= fig["ttft_ms_p50"], where
            # No inter-token gap at all when a loaded machine delivers each stream's 4 tokens
            # in one message: then there is no ITL to report.
            if fig["itl_ms_p50"] is not None:
                assert fig["itl_ms_p50"] >= 0 and fig["itl_ms_p99"] >= fig["itl_ms_p50"], where
            assert fig["prompt_tokens_mean"] > 1, where
    # Interleaved: each level runs on HTTP, then on gRPC, before the next level.
    order = [(run["level"], run["server"]) for run in doc["runs"]]
    assert order == [(1, "astr_http"), (1, "astr_grpc"), (2, "astr_http"), (2, "astr_grpc")]
    for run in doc["runs"]:
        # ignore_eos: every request generated exactly max_tokens tokens.
        assert run["output_tokens"] == 2 * 4, run


def test_help_names_every_flag():
    r = run_bench("--help", timeout=60)
    assert r.returncode == 0, r.stderr
    for flag in ("--bin-dir", "--model", "--threads", "--grpc", "--http", "--llama-server",
                 "--levels", "--requests", "--rounds", "--max-tokens", "--prompt-words",
                 "--smoke"):
        assert flag in r.stdout, flag


def test_attach_needs_both_addresses():
    r = run_bench("--grpc", "127.0.0.1:1", timeout=60)
    assert r.returncode == 2
    assert "--grpc and --http" in r.stderr
