"""tools/bench_prefix_cache.py (the prefix-cache benchmark) in its --smoke mode on stories260K: it
starts one worker and one scheduler per configuration (cache on and off where the scheduler has
--prefix-cache, off alone where it has not) and prints one JSON document whose every scenario has
positive figures, exact token counts and consistent cache accounting. Also how it maps its
configs onto the scheduler's flags, and its usage errors."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import harness

BENCH = os.path.join(harness.SOURCE_DIR, "tools", "bench_prefix_cache.py")


def run_bench(*args, timeout=180):
    env = dict(os.environ, ASTR_BIN_DIR=harness.BIN_DIR)
    return subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_prefix_cache", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def scheduler_has(flag):
    r = subprocess.run([harness.SCHEDULER_BIN, "--help"], capture_output=True, text=True,
                       timeout=60)
    return re.search(rf"(?m)^\s*{re.escape(flag)}(\s|$)", r.stdout + r.stderr) is not None


def test_smoke_run_prints_consistent_figures_for_every_config():
    r = run_bench("--smoke", "--model", harness.STORIES, "--bin-dir", harness.BIN_DIR)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # one JSON document, nothing else on stdout
    failed = [(run["scenario"], run["target"], run["error_samples"]) for run in doc["runs"]
              if run["errors"]]
    assert not failed, f"failed requests: {failed}\n{r.stderr[-3000:]}"
    has_cache = scheduler_has("--prefix-cache")
    assert doc["prefix_cache_flag"] is has_cache
    assert doc["max_step_ms_flag"] is scheduler_has("--max-step-ms")
    names = [c["name"] for c in doc["config"]["configs"]]
    if has_cache:
        assert names == ["on", "off"], doc["config"]
        assert doc["config"]["configs"][0]["scheduler_args"] == ["--prefix-cache"]
        assert doc["config"]["configs"][1]["scheduler_args"] == ["--no-prefix-cache"]
    else:
        # No cache in this build: "on" cannot run, and "off" runs without the missing flag.
        assert names == ["off"], doc["config"]
        assert doc["config"]["configs"][0]["scheduler_args"] == []
        assert [c["name"] for c in doc["config"]["skipped_configs"]] == ["on"]
        assert any("--prefix-cache" in note for note in doc["notes"])
    assert sorted(doc["summary"]) == ["a", "b", "c", "itl"]
    # One round: every scenario ran on every config, in the configured order.
    order = [(run["scenario"], run["target"]) for run in doc["runs"]]
    assert order == [(s, n) for s in ("a", "b", "c", "itl") for n in names]

    for run in doc["runs"]:
        where = f"{run['scenario']} on {run['target']}: {run}"
        if "cached_tokens" in run:  # a, b, c (itl has them per level)
            assert run["cached_tokens"] >= 0, where
            if not has_cache:
                assert run["cached_tokens"] == 0, where
        if run["scenario"] == "a":  # 4 requests of 48 + 8 prompt tokens, 4 new each
            assert run["requests"] == 4 and run["output_tokens"] == 16, where
            assert run["prompt_tokens"] == 4 * 56, where
        elif run["scenario"] == "b":  # 2 prompts of 16 tokens x n=2, 4 new per sample
            assert run["requests"] == 2 and run["samples"] == 4, where
            assert run["output_tokens"] == 16 and run["prompt_tokens"] == 32, where
        elif run["scenario"] == "c":  # 3 turns of 8 new tokens, replies of 4
            assert [t["prompt_tokens"] for t in run["turns"]] == [8, 20, 32], where
            for t in run["turns"]:
                assert t["cached_tokens"] + t["computed_prefill_tokens"] == t["prompt_tokens"]
                assert t["ttft_ms"] > 0, where
        if run["scenario"] in ("a", "b"):
            assert run["cached_tokens"] + run["computed_prefill_tokens"] == run["prompt_tokens"]
            assert run["tokens_per_s"] > 0 and run["ttft_ms_p50"] > 0, where
        if run["scenario"] == "itl":
            level = run["levels"]["2"]
            assert level["requests"] == 2 and level["output_tokens"] == 8, where
            assert level["tokens_per_s"] > 0 and level["ttft_ms_p50"] > 0, where
        if run["target"] != names[0] and run["scenario"] != "itl":
            assert run["same_output"]["reference"] == names[0], where
    for scenario in ("a", "b"):
        for name in names:
            fig = doc["summary"][scenario][name]
            assert fig["errors"] == 0 and fig["tokens_per_s"]["median"] > 0, fig
            assert fig["ttft_ms_p99"] >= fig["ttft_ms_p50"] > 0, fig
    for name in names:
        assert [t["turn"] for t in doc["summary"]["c"][name]["turns"]] == [1, 2, 3]
        itl = doc["summary"]["itl"][name]["levels"]["2"]
        # No inter-token gap at all when a loaded machine delivers each stream's 4 tokens in one
        # message: then there is no ITL to report.
        if itl["itl_ms_p50"] is not None:
            assert itl["itl_ms_p99"] >= itl["itl_ms_p50"] >= 0, itl


def test_configs_follow_the_schedulers_flags():
    bench = load_bench()
    configs = [("on", ["--prefix-cache"]), ("off", ["--no-prefix-cache"]),
               ("fast", ["--prefix-cache", "--max-step-ms=5", "--max-running=8"])]
    base = {"--workers", "--max-running"}
    # Neither flag: the cache configs are skipped, --no-prefix-cache is dropped.
    run, skipped, notes = bench.plan_configs(configs, None, base)
    assert run == [("off", [])]
    assert [s["name"] for s in skipped] == ["on", "fast"]
    assert notes
    # Both: everything passes as given; --max-step-ms N goes to configs that lack it.
    run, skipped, notes = bench.plan_configs(configs, 20, base | {"--prefix-cache",
                                                                  "--max-step-ms"})
    assert run == [("on", ["--prefix-cache", "--max-step-ms=20"]),
                   ("off", ["--no-prefix-cache", "--max-step-ms=20"]),
                   ("fast", ["--prefix-cache", "--max-step-ms=5", "--max-running=8"])]
    assert skipped == [] and notes == []
    # A cache but no latency bound: --max-step-ms (and a separate value) is dropped.
    run, _, notes = bench.plan_configs([("on", ["--prefix-cache", "--max-step-ms", "5"])], None,
                                       base | {"--prefix-cache"})
    assert run == [("on", ["--prefix-cache"])] and len(notes) == 1
    # --prefix-cache=false turns nothing on: dropped, not skipped.
    run, skipped, _ = bench.plan_configs([("off", ["--prefix-cache=false"])], None, base)
    assert run == [("off", [])] and skipped == []
    # Any other unknown flag is an error.
    try:
        bench.plan_configs([("x", ["--no-such-flag=1"])], None, base)
    except ValueError as e:
        assert "--no-such-flag" in str(e)
    else:
        raise AssertionError("an unknown flag was accepted")


def test_help_names_every_flag():
    r = run_bench("--help", timeout=60)
    assert r.returncode == 0, r.stderr
    for flag in ("--bin-dir", "--model", "--worker-threads", "--kv-cache-mb", "--worker-arg",
                 "--scheduler-arg", "--config", "--max-step-ms", "--llama-server",
                 "--scenarios", "--rounds", "--warmup", "--seed", "--request-timeout-s",
                 "--shared-requests", "--shared-concurrency", "--system-tokens",
                 "--question-tokens", "--max-tokens", "--grpo-prompts", "--grpo-n",
                 "--grpo-prompt-tokens", "--grpo-max-tokens", "--grpo-temperature", "--turns",
                 "--turn-tokens", "--turn-max-tokens", "--itl-levels", "--itl-requests",
                 "--itl-prompt-tokens", "--itl-max-tokens", "--smoke"):
        assert flag in r.stdout, flag


def test_usage_errors():
    r = run_bench("--scenarios", "a,zz", timeout=60)
    assert r.returncode == 2 and "zz" in r.stderr, r.stderr
    r = run_bench("--config", "bad name:--prefix-cache", timeout=60)
    assert r.returncode == 2 and "NAME" in r.stderr, r.stderr
    r = run_bench("--config", "a", "--config", "a", timeout=60)
    assert r.returncode == 2 and "differ" in r.stderr, r.stderr
    # A flag the scheduler does not have: refused before anything starts.
    r = run_bench("--bin-dir", harness.BIN_DIR, "--config", "x:--no-such-flag=1", timeout=60)
    assert r.returncode == 2 and "--no-such-flag" in r.stderr, r.stderr
