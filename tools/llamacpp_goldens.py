#!/usr/bin/env python3
"""Regenerates tests/python/goldens/llamacpp_forward.json from llama.cpp itself.

Run by hand (CI has no llama.cpp); tools/llamacpp_goldens.sh makes the venv (llama-cpp-python,
which builds its bundled llama.cpp for this CPU) and runs it:

    tools/llamacpp_goldens.sh [VENV] [-- ARGS...]

For each case of CASES below it writes a random-weight GGUF with `astr make-model` (deterministic
from its flags and seed: the file's SHA-256 is recorded, so that CI can tell a change of
make-model's output from a change of astr's forward pass), and for each prompt records
llama.cpp's greedy continuation (MAX_NEW_TOKENS ids, argmax of its logits at each step, on the CPU)
and, at each step, its TOP_N best [id, logprob] pairs (log-softmax of its f32 logits). These are
the oracle for file forms that only llama.cpp defines: gpt-oss GGUF files with MXFP4 experts (the
form in which gpt-oss is served from GGUF), whose layer (sinks, YaRN as llama.cpp computes it,
the clamped SwiGLU, biases) and block format astr must read as llama.cpp does, and GLM-4.5's
glm4moe files (its keys, exp_probs_b, the shared experts, partial rotary).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

from transformers_cases import prompt_ids  # noqa: E402  (the same deterministic prompts)

MAX_NEW_TOKENS = 16
TOP_N = 5

# name -> `astr make-model` flags (after the binary and `make-model`, before --out).
CASES: dict[str, list[str]] = {
    # gpt-oss with MXFP4 experts (projections bf16, norms and biases f32: as llama.cpp multiplies
    # bf16 weights with bf16 activations, so does astr), 8 experts top-2, GQA 2, head_dim 32,
    # alternating windows of 8, make-model's YaRN (factor 32 over 4096).
    "gpt_oss_mxfp4": ["--arch", "gpt_oss", "--format", "gguf", "--dtype", "bf16", "--dtype-of",
                      "experts.=mxfp4", "--layers", "2", "--hidden", "128", "--heads", "4",
                      "--kv-heads", "2", "--head-dim", "32", "--ffn", "128", "--experts", "8",
                      "--experts-per-tok", "2", "--vocab", "300", "--seed", "73", "--init-std",
                      "0.1", "--router-std", "0.5", "--sliding-window", "8"],
    # GLM-4.5 as llama.cpp's glm4moe holds it (f32): layer 0 dense, then 8 experts in 2 groups
    # (1 stays) by sigmoid scores plus exp_probs_b, renormalized top-2 weights times 2.5, an
    # ungated shared expert (ffn_*_shexp), q/k/v biases, q/k norms, partial rotary (half the
    # head, NeoX order).
    "glm4moe_shared": ["--arch", "glm4_moe", "--format", "gguf", "--dtype", "f32", "--layers",
                       "3", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim",
                       "16", "--ffn", "96", "--moe-ffn", "32", "--shared-ffn", "32", "--experts",
                       "8", "--experts-per-tok", "2", "--expert-groups", "2", "--topk-groups", "1",
                       "--routed-scaling", "2.5", "--qk-norm", "--attention-bias", "--vocab",
                       "300", "--seed", "91", "--init-std", "0.1", "--router-std", "0.5"],
}

# Prompt lengths: one token, a few, past the window, and several windows long.
PROMPT_LENGTHS = (1, 3, 7, 12, 20, 33, 40, 64)


def vocab_of(flags: list[str]) -> int:
    return int(flags[flags.index("--vocab") + 1])


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def greedy(llm, np, ids: list[int]) -> dict:
    llm.reset()
    llm.eval(ids)
    out, top = [], []
    for _ in range(MAX_NEW_TOKENS):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        logp = logits - logits.max()
        logp -= np.log(np.exp(logp).sum())
        order = np.argsort(-logp, kind="stable")[:TOP_N]
        top.append([[int(i), round(float(logp[i]), 6)] for i in order])
        out.append(int(order[0]))
        llm.eval([int(order[0])])
    return {"ids": ids, "greedy": out, "top": top}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--astr", default=str(REPO / "build" / "bin" / "astr"), help="astr binary")
    parser.add_argument("--out", default=str(REPO / "tests" / "python" / "goldens" /
                                             "llamacpp_forward.json"), help="goldens file")
    args = parser.parse_args()

    import llama_cpp
    import numpy as np

    gold = {"llama_cpp_python": llama_cpp.__version__,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "max_new_tokens": MAX_NEW_TOKENS, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in CASES.items():
            path = str(Path(tmp) / f"{name}.gguf")
            subprocess.run([args.astr, "make-model", *flags, "--out", path], check=True,
                           stdout=subprocess.DEVNULL)
            llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2,
                                  logits_all=True, verbose=False)
            prompts = [greedy(llm, np, prompt_ids(name, n, vocab_of(flags)))
                       for n in PROMPT_LENGTHS]
            del llm
            gold["cases"][name] = {"make_model": flags, "gguf_sha256": sha256(path),
                                   "prompts": prompts}
            gaps = [min(s[0][1] - s[1][1] for s in p["top"]) for p in prompts]
            print(f"{name}: min top-2 logprob gaps {gaps}", file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(gold, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
