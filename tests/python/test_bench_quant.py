"""tools/bench_quant.py end to end on stories260K: the real astr-bench, and stand-ins for
llama-bench / llama-batched-bench that print their formats with known figures, so the JSON's
figures, medians and ratios can be checked (the real comparison is in docs/benchmarks.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ASTR_SHARED_DIR", ROOT.parent / "shared"))
BIN = Path(os.environ.get("ASTR_BIN_DIR", ROOT / "build" / "bin"))
STORIES = SHARED / "models/stories260K.gguf"

LLAMA_BENCH = """#!/bin/sh
cat <<'JSON'
[{"n_prompt": 128, "n_gen": 0, "avg_ts": 50.0, "model_size": 1000000},
 {"n_prompt": 0, "n_gen": 32, "avg_ts": 20.0, "model_size": 1000000}]
JSON
"""
BATCHED_BENCH = """#!/bin/sh
echo "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
echo "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"
echo "|    32 |     16 |   16 |    768 |    8.413 |    60.86 |    5.082 |    40.00 |   13.495 |    56.91 |"
"""


def test_bench_quant_json(tmp_path):
    if not STORIES.exists():
        pytest.skip("shared stories260K.gguf missing")
    for name, text in (("llama-bench", LLAMA_BENCH), ("llama-batched-bench", BATCHED_BENCH)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    out = subprocess.run([sys.executable, str(ROOT / "tools/bench_quant.py"), "--models",
                          str(STORIES), "--llama-bin", str(tmp_path), "--astr-bench",
                          str(BIN / "astr-bench"), "--rounds", "2", "--read-mb", "64"],
                         capture_output=True, text=True, check=False, timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["rounds"] == 2 and len(doc["models"]) == 1
    m = doc["models"][0]
    assert m["llama_cpp"]["prefill_tok_s"] == 50.0
    assert m["llama_cpp"]["b1_tok_s"] == 20.0
    assert m["llama_cpp"]["b16_tok_s"] == 40.0
    # llama.cpp's file read in astr's share: all but one row of the untied embedding table.
    share = m["astr"]["batch1_read_bytes"] / m["astr"]["weight_bytes"]
    assert 0.5 < share < 1.0
    assert m["llama_cpp"]["b1_weight_gb_s"] == pytest.approx(1000000 * share * 20.0 / 1e9)
    for key, llama in (("prefill_tok_s", 50.0), ("b1_tok_s", 20.0), ("b16_tok_s", 40.0)):
        assert m["astr"][key] > 0
        assert m["ratio"][key] == pytest.approx(m["astr"][key] / llama)
    assert m["astr"]["weight_bytes"] > 0
    assert m["astr"]["b1_weight_gb_s"] > 0
    assert len(m["read_gb_s"]) == 4 and all(v > 0 for v in m["read_gb_s"])
    if m["astr"]["peak_rss_mib"] is not None:
        assert m["astr"]["peak_rss_mib"] > 1
        assert m["ratio"]["peak_rss"] == pytest.approx(
            m["astr"]["peak_rss_mib"] / m["llama_cpp"]["peak_rss_mib"])
