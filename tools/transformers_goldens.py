#!/usr/bin/env python3
"""Regenerates tests/python/goldens/transformers_forward.json from Hugging Face transformers.

Run by hand (CI has no torch); tools/transformers_goldens.sh makes the venv and runs it:

    tools/transformers_goldens.sh [VENV]

For each case of tests/python/transformers_cases.py it writes the random-weight model with
`astr make-model` (f32 safetensors, deterministic from the case's flags and seed), loads it with
`AutoModelForCausalLM.from_pretrained` (float32, eager attention), and for each prompt records:
  * `greedy`: transformers' greedy continuation (`generate`, do_sample=False), MAX_NEW_TOKENS ids;
  * `logprobs`: the log-softmax of each chosen token, teacher-forced over prompt + greedy ids (one
    forward pass of the whole sequence);
  * `generate_logprobs`: the same from `generate`'s own logits, and `crosses_original_context`:
    a LongRoPE generation that grows past the original context (transformers' Phi-3 recomputes
    the sequence with the long factors there, so its earlier tokens were drawn under the short
    ones and the two lists differ; they agree otherwise);
  * `top`: the TOP_N best [id, logprob] pairs at each step;
  * `min_gap`: the smallest logit gap between the best and the second-best id over the steps (a
    small one means a near-tie that float rounding could flip);
  * `route_margin` (mixture-of-experts models): per position of prompt + greedy ids, the smallest
    gap over the MoE layers between the k-th and (k+1)-th router logit (a routing near-tie);
the same again with every weight rounded to bf16 (computed in float32; keys suffixed `_bf16w`),
which the bf16 backends are compared with; per case the SHA-256 of every tensor
(`weights_sha256`), so that CI can tell a change of make-model's weights from a change of the
forward pass; and the config.json transformers itself writes for the model (`save_pretrained`,
`transformers_config`: its own spelling, e.g. transformers 5's rope_parameters), which CI reads in
place of make-model's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import transformers_cases as cases  # noqa: E402


def longrope_original(config) -> int:
    """A LongRoPE model's original context (original_max_position_embeddings), else 0."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if (rope.get("rope_type") or rope.get("type")) not in ("longrope", "su"):
        return 0
    return int(rope.get("original_max_position_embeddings") or
               getattr(config, "original_max_position_embeddings", 0) or 0)


def greedy_run(torch, model, ids: list[int]) -> dict:
    """transformers' greedy continuation of `ids` and its teacher-forced logprobs."""
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), do_sample=False,
                             max_new_tokens=cases.MAX_NEW_TOKENS,
                             min_new_tokens=cases.MAX_NEW_TOKENS, pad_token_id=0,
                             eos_token_id=None, output_logits=True,
                             return_dict_in_generate=True)
        greedy = gen.sequences[0, len(ids):].tolist()
        gen_logp = [torch.log_softmax(step[0].double(), dim=-1) for step in gen.logits]
        moe = getattr(model.config, "num_experts_per_tok", 0)
        out = model(torch.tensor([ids + greedy]), **({"output_router_logits": True} if moe else {}))
        logits = out.logits[0].double()
        margins = route_margins(torch, out.router_logits, moe, model) if moe else None
    steps = logits[len(ids) - 1: len(ids) - 1 + len(greedy)]
    logp = torch.log_softmax(steps, dim=-1)
    top = torch.topk(logp, cases.TOP_N, dim=-1)
    two = torch.topk(steps, 2, dim=-1).values
    # LongRoPE: a generation that grows past the original context is recomputed with the long
    # factors at that point, so its earlier tokens were drawn under the short ones, while the
    # teacher-forced forward pass over the whole sequence takes the long ones throughout: the two
    # then differ, and the generation's own logprobs are recorded as well.
    original = longrope_original(model.config)
    crosses = bool(original) and len(ids) <= original < len(ids) + len(greedy) - 1
    return {
        "greedy": greedy,
        "crosses_original_context": crosses,
        "generate_logprobs": [round(float(gen_logp[i][t]), 7) for i, t in enumerate(greedy)],
        "logprobs": [round(float(logp[i, t]), 7) for i, t in enumerate(greedy)],
        "top": [[[int(top.indices[i, j]), round(float(top.values[i, j]), 7)]
                 for j in range(cases.TOP_N)] for i in range(len(greedy))],
        "min_gap": round(float((two[:, 0] - two[:, 1]).min()), 7),
        # The teacher-forced argmax must be the generated ids (same model, same ids).
        "argmax_agrees": steps.argmax(-1).tolist() == greedy,
        **({"route_margin": margins} if margins is not None else {}),
    }


def route_margins(torch, router_logits, k: int, model=None) -> list[float]:
    """Mixture of experts: per position of the teacher-forced sequence, the smallest gap over the
    MoE layers between the k-th and the (k+1)-th largest router logit (0 when every expert is
    chosen). A small one is a routing near-tie that rounding (bf16 activations) could flip.
    Sigmoid routers (GLM-4.5, DeepSeek-V3: n_group, e_score_correction_bias) choose by the score
    sigmoid(logit) + bias within the kept groups: there the gaps are those of the choice scores
    (the k-th against the (k+1)-th kept one, and the topk_group-th group's score against the next
    group's), times 4, sigmoid's steepest slope being 1/4 (so in logit units, at most the logit
    change that closes them)."""
    cfg = getattr(model, "config", None)
    groups = getattr(cfg, "n_group", None)
    biases = []
    if groups is not None:
        for layer in model.model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None and hasattr(gate, "e_score_correction_bias"):
                biases.append(gate.e_score_correction_bias.double())
    best = None
    for i, layer in enumerate(router_logits):
        logits = layer.double()
        if groups is not None:
            choice = torch.sigmoid(logits) + biases[i]
            n = choice.shape[-1]
            grouped = choice.view(-1, groups, n // groups)
            group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
            kept_n = cfg.topk_group
            gtop = torch.topk(group_scores, min(kept_n + 1, groups), dim=-1)
            ggap = (gtop.values[:, kept_n - 1] - gtop.values[:, kept_n] if groups > kept_n
                    else torch.full((choice.shape[0],), float("inf"), dtype=choice.dtype))
            mask = torch.zeros_like(group_scores).scatter_(1, gtop.indices[:, :kept_n], 1.0)
            masked = (grouped * mask.unsqueeze(-1)).reshape(-1, n)
            top = torch.topk(masked, min(k + 1, n), dim=-1).values
            egap = top[:, k - 1] - top[:, k] if top.shape[-1] > k else torch.zeros(top.shape[0])
            gap = 4 * torch.minimum(ggap, egap)
        else:
            top = torch.topk(logits, min(k + 1, logits.shape[-1]), dim=-1).values
            gap = top[:, k - 1] - top[:, k] if top.shape[-1] > k else torch.zeros(top.shape[0])
        best = gap if best is None else torch.minimum(best, gap)
    return [round(float(g), 7) for g in best]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--astr", default=str(REPO / "build" / "bin" / "astr"), help="astr binary")
    parser.add_argument("--out", default=str(REPO / "tests" / "python" / "goldens" /
                                             "transformers_forward.json"), help="goldens file")
    parser.add_argument("--only", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    names = [n for n in cases.CASES if not args.only or n in args.only.split(",")]
    result = {
        "generated_by": "tools/transformers_goldens.py",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "max_new_tokens": cases.MAX_NEW_TOKENS,
        "top_n": cases.TOP_N,
        "cases": {},
    }
    if args.only and os.path.exists(args.out):  # regenerate some, keep the others
        with open(args.out) as f:
            result["cases"] = json.load(f)["cases"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            folder = os.path.join(tmp, name)
            subprocess.run([args.astr, *cases.make_model_args(name, folder)], check=True,
                           stdout=subprocess.DEVNULL)
            overrides = cases.CASES[name][1]
            cases.apply_overrides(folder, overrides)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                         attn_implementation="eager")
            model.eval()
            vocab = model.config.vocab_size
            prompts = [{"ids": cases.prompt_ids(name, n, vocab)} for n in cases.PROMPT_LENGTHS]
            for suffix in ("", "_bf16w"):
                if suffix:  # the same model with every weight rounded to bf16 (computed in f32)
                    with torch.no_grad():
                        for param in model.parameters():
                            param.copy_(param.to(torch.bfloat16).to(torch.float32))
                for p in prompts:
                    p.update({k + suffix: v for k, v in greedy_run(torch, model, p["ids"]).items()})
            with tempfile.TemporaryDirectory() as saved:
                model.config.save_pretrained(saved)
                with open(os.path.join(saved, "config.json")) as f:
                    saved_config = json.load(f)
            saved_config.pop("transformers_version", None)
            result["cases"][name] = {
                "make_model": cases.make_model_args(name, "OUT")[1:-2],
                "transformers_config": saved_config,
                "config_overrides": overrides,
                "architecture": model.config.architectures[0] if model.config.architectures
                else type(model).__name__,
                "weights_sha256": cases.weight_hashes(folder),
                "prompts": prompts,
            }
            gaps = [p["min_gap"] for p in prompts] + [p["min_gap_bf16w"] for p in prompts]
            print(f"{name}: {type(model).__name__}, min top-2 gaps {gaps}", file=sys.stderr)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
