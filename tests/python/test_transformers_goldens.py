"""astr's forward pass against Hugging Face `transformers` itself, from committed goldens.

tools/transformers_goldens.sh (by hand, with torch) ran each model of transformers_cases.py through
`transformers` (float32, eager attention) and wrote goldens/transformers_forward.json: 32 greedy ids
per prompt, the chosen tokens' logprobs and the top 5 at each step. Here (no torch) each model is
rebuilt with `astr make-model` from the same flags and seed, its tensors' SHA-256 checked against
the goldens (a mismatch means make-model's weights changed: regenerate the goldens), and:
  * the CPU backend in f32 must give transformers' 32 greedy ids exactly, with every chosen
    logprob within TOL_F32, and, teacher-forced over that sequence (`astr run --logprob-start`),
    every logprob and top-5 entry within TOL_F32;
  * the CPU backend in bf16 and the CUDA backend on the emulated device (bf16 weights),
    teacher-forced over transformers' continuation on the same model with its weights rounded to
    bf16 (`_bf16w`, computed in float32: what is left is the backends' bf16 activations): logprobs
    within TOL_BF16_MAX (TOL_BF16_MEAN on average), and the best id transformers' wherever its
    top two are CLEAR_GAP apart. Free-running greedy ids are not compared there: these models'
    smallest top-2 gaps (0.002-0.06) are within bf16's reach.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import transformers_cases as cases

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("ASTR_BIN_DIR") or REPO / "build" / "bin")
ASTR = BIN_DIR / "astr"
CUDA_EMU = BIN_DIR.parent / "lib" / "libastr_backend_cuda_emu.so"
GOLDENS = Path(__file__).resolve().parent / "goldens" / "transformers_forward.json"

TOL_F32 = 1e-4
# bf16 backends, teacher-forced over transformers' sequence: the largest and the mean |logprob
# difference| per prompt, and the gap above which astr's best id must be transformers'. bf16
# activations (2^-9 relative) on these sharp random models (--init-std 0.25) move logprobs by
# 0.17 at most and 0.042 on average per prompt (2026-12-05, CPU and emulated CUDA); a wrong op
# moves them by more than 1 (a RoPE base of 20000 instead of 10000: 1.6).
TOL_BF16_MAX = 0.35
TOL_BF16_MEAN = 0.1
CLEAR_GAP = 0.35
# MoE: the router-logit gap between the last chosen and the first unchosen expert below which bf16
# activations may flip a token's routing (on these models, 2026-12-06: one flip on the CPU at a gap
# of 0.009, one on the emulated CUDA backend, whose router takes bf16 activations, at 0.034; none
# above).
ROUTE_CLEAR = 0.05

with open(GOLDENS) as _f:
    GOLD = json.load(_f)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    if not ASTR.exists():
        pytest.fail(f"astr binary not found at {ASTR} (build it, or set ASTR_BIN_DIR)")
    root = tmp_path_factory.mktemp("transformers_models")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            folder = root / name
            subprocess.run([str(ASTR), *cases.make_model_args(name, str(folder))], check=True,
                           stdout=subprocess.DEVNULL)
            cases.apply_overrides(str(folder), cases.CASES[name][1])
            made[name] = folder
        return made[name]

    return get


def run_astr(model: Path, ids: list[int], extra: list[str], env: dict | None = None,
             max_tokens: int | None = None, logprob_start: int = 0) -> dict:
    cmd = [str(ASTR), "run", "--model", str(model), "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(max_tokens or GOLD["max_new_tokens"]), "--json", "--logprobs",
           str(GOLD["top_n"]), "--ignore-eos", *extra]
    if logprob_start:
        cmd += ["--logprob-start", str(logprob_start)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    assert out["prompt_ids"] == ids
    return out


def teacher_forced(model: Path, p: dict, suffix: str, extra: list[str],
                   env: dict | None = None) -> tuple[list[float], list[list[dict]]]:
    """astr's logprobs and top 5 of transformers' continuation (greedy + suffix), fed as prompt."""
    out = run_astr(model, p["ids"] + p["greedy" + suffix], extra, env, max_tokens=1,
                   logprob_start=len(p["ids"]))
    assert len(out["prompt_logprobs"]) == len(p["greedy" + suffix])
    return out["prompt_logprobs"], out["prompt_top_logprobs"]


def generated_logprobs(p: dict) -> list[float]:
    """The logprobs of transformers' generation itself: those of the teacher-forced pass, but for a
    LongRoPE generation that crosses the original context (tools/transformers_goldens.py)."""
    return p["generate_logprobs"] if p.get("crosses_original_context") else p["logprobs"]


def is_moe(name: str) -> bool:
    return "--experts" in cases.CASES[name][0]


def test_goldens_cover_every_case() -> None:
    assert sorted(GOLD["cases"]) == sorted(cases.CASES), (
        "goldens and transformers_cases.py disagree: rerun tools/transformers_goldens.sh")
    for name, case in GOLD["cases"].items():
        assert case["make_model"] == cases.make_model_args(name, "OUT")[1:-2], name
        assert case["config_overrides"] == cases.CASES[name][1], name
        assert len(case["prompts"]) == len(cases.PROMPT_LENGTHS)
        for p in case["prompts"]:
            # A LongRoPE generation that crosses the original context is recomputed there with the
            # long factors: its earlier tokens were drawn under the short ones, so the
            # teacher-forced pass (long throughout) may pick others.
            assert p.get("crosses_original_context") or (
                p["argmax_agrees"] and p["argmax_agrees_bf16w"]), (
                f"{name}: transformers' generate and forward disagree")


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_weights_are_the_goldens(name: str, models) -> None:
    got = cases.weight_hashes(str(models(name)))
    want = GOLD["cases"][name]["weights_sha256"]
    assert got == want, (f"{name}: astr make-model's weights differ from the ones the goldens were "
                         "made from; regenerate them (tools/transformers_goldens.sh)")


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_cpu_f32_equals_transformers(name: str, models) -> None:
    model = models(name)
    f32 = ["--dtype", "f32", "--threads", "1"]
    for p in GOLD["cases"][name]["prompts"]:
        key = f"{name} prompt of {len(p['ids'])}"
        out = run_astr(model, p["ids"], f32)
        assert out["token_ids"] == p["greedy"], (
            f"{key}: greedy ids astr {out['token_ids']} vs transformers {p['greedy']}")
        for step, (lp, gold) in enumerate(zip(out["logprobs"], generated_logprobs(p))):
            assert abs(lp - gold) <= TOL_F32, f"{key} step {step}: logprob {lp} vs {gold}"
        # The same sequence teacher-forced (prompt scoring): every logprob and the top 5.
        logprobs, tops = teacher_forced(model, p, "", f32)
        for step, (lp, gold) in enumerate(zip(logprobs, p["logprobs"])):
            assert abs(lp - gold) <= TOL_F32, f"{key} forced step {step}: logprob {lp} vs {gold}"
        for step, (top, gold) in enumerate(zip(tops, p["top"])):
            gold_lp = dict((int(i), lp) for i, lp in gold)
            for e in top:
                if e["id"] in gold_lp:
                    assert abs(e["logprob"] - gold_lp[e["id"]]) <= TOL_F32, (key, step, e)
            # Same top-5 set, but for a swap at the 5th place between near-equal entries.
            missing = set(gold_lp) - {e["id"] for e in top}
            assert all(gold_lp[i] - gold[-1][1] <= TOL_F32 for i in missing), (key, step, top)


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_cpu_f32_reads_the_config_transformers_writes(name: str, models, tmp_path: Path) -> None:
    """The same weights with the config.json transformers' save_pretrained wrote for the model (its
    own spelling: transformers 5's rope_parameters, layer_types, ...), as a model made with
    transformers arrives: transformers' greedy ids and logprobs."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(models(name) / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(GOLD["cases"][name]["transformers_config"]))
    check_f32_greedy(name, folder, "transformers' config.json")


def check_f32_greedy(name: str, folder: Path, what: str) -> None:
    """astr's f32 CPU greedy run on `folder` (case `name`'s weights): transformers' ids, and each
    chosen logprob within TOL_F32."""
    for p in GOLD["cases"][name]["prompts"]:
        out = run_astr(folder, p["ids"], ["--dtype", "f32", "--threads", "1"])
        assert out["token_ids"] == p["greedy"], (
            f"{name} ({what}), prompt of {len(p['ids'])}: astr {out['token_ids']} vs "
            f"transformers {p['greedy']}")
        for step, (lp, gold) in enumerate(zip(out["logprobs"], generated_logprobs(p))):
            assert abs(lp - gold) <= TOL_F32, f"{name} ({what}) step {step}: {lp} vs {gold}"


def check_bf16(name: str, model: Path, extra: list[str], env: dict | None, what: str) -> None:
    """Teacher-forced over transformers' continuation on the bf16-rounded weights."""
    for p in GOLD["cases"][name]["prompts"]:
        key = f"{name} prompt of {len(p['ids'])} ({what})"
        logprobs, tops = teacher_forced(model, p, "_bf16w", extra, env)
        diffs = [abs(a - b) for a, b in zip(logprobs, p["logprobs_bf16w"])]
        # MoE: a step whose own token's routing is a near-tie may pick another expert under bf16
        # activations (a flip moved one logprob by 1.35, another by 3.3); those steps are left
        # out, and they must be few.
        margins = p.get("route_margin_bf16w")
        if margins is not None:
            first = len(p["ids"]) - 1
            kept = [i for i in range(len(diffs)) if margins[first + i] >= ROUTE_CLEAR]
            assert len(kept) >= 0.6 * len(diffs), f"{key}: only {len(kept)} clear routings"
            logprobs = [logprobs[i] for i in kept]
            tops = [tops[i] for i in kept]
            gold_logprobs = [p["logprobs_bf16w"][i] for i in kept]
            gold_tops = [p["top_bf16w"][i] for i in kept]
            diffs = [diffs[i] for i in kept]
        else:
            gold_logprobs, gold_tops = p["logprobs_bf16w"], p["top_bf16w"]
        worst = max(range(len(diffs)), key=diffs.__getitem__)
        assert diffs[worst] <= TOL_BF16_MAX, (
            f"{key} step {worst}: logprob {logprobs[worst]} vs {gold_logprobs[worst]}")
        mean = sum(diffs) / len(diffs)
        assert mean <= TOL_BF16_MEAN, f"{key}: mean |logprob difference| {mean:.3f}"
        for step, (top, gold) in enumerate(zip(tops, gold_tops)):
            if gold[0][1] - gold[1][1] > CLEAR_GAP:
                assert top[0]["id"] == gold[0][0], (
                    f"{key} step {step}: astr's best id {top[0]['id']}, transformers' {gold[0][0]} "
                    f"by a clear margin (its top 5: {gold})")


@pytest.mark.parametrize("name", sorted(n for n in cases.CASES if is_moe(n)))
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_cpu_moe_output_does_not_depend_on_threads(name: str, dtype: str, models) -> None:
    """The CPU backend runs a MoE layer's experts either one per thread (as many active experts as
    two per thread) or one after the other with each GEMM split across the threads: the same values
    either way, so 1, 2 and 3 threads give bit-identical logprobs."""
    p = GOLD["cases"][name]["prompts"][-1]
    runs = [run_astr(models(name), p["ids"], ["--dtype", dtype, "--threads", str(n)],
                     max_tokens=8) for n in (1, 2, 3)]
    for out in runs[1:]:
        assert out["token_ids"] == runs[0]["token_ids"]
        assert out["logprobs"] == runs[0]["logprobs"]


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_cpu_bf16_follows_transformers(name: str, models) -> None:
    check_bf16(name, models(name), ["--dtype", "bf16", "--threads", "1"], None, "cpu bf16")


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_cuda_emulated_follows_transformers(name: str, models) -> None:
    if not CUDA_EMU.exists():
        pytest.skip(f"no emulated CUDA plugin at {CUDA_EMU} (built without the CUDA toolkit)")
    check_bf16(name, models(name), ["--backend", "cuda"], {"ASTR_CUDA_PLUGIN": str(CUDA_EMU)},
               "emulated cuda")


# Sliding-window page groups: models that mix sliding-window and global layers keep the sliding
# layers' K/V in page groups of their own, whose pages behind every query's window go back to the
# pool. Per case: the window and the window page ids per token page (ceil(sliding layers / global
# layers): a page id holds as many layers as there are global ones).
WINDOW_CASES = {
    "gemma3_gqa2_hd32_sw8": (8, 1),      # layer 0 slides, layer 1 is global
    "gemma3_mqa_hd16_untied": (5, 2),    # layers 0, 1 slide, layer 2 is global
    "gemma2_gqa2_hd32_softcap": (6, 1),  # alternating
    "gemma2_mqa_hd16_untied": (5, 1),    # alternating, four layers
    "gpt_oss_e4_top2_sw8": (8, 1),       # alternating
    "gpt_oss_e8_top3_mqa_clamped": (5, 2),  # layers 0, 2 slide, layer 1 is global
}
WINDOW_PAGE = 4


def window_pool(name: str, tokens: int, chunk: int) -> list[str]:
    """Flags for the smallest pool that holds one sequence of `tokens` tokens fed `chunk` at a time
    when window pages are given back: a page id per token page, plus the window ids of the token
    pages one step reads through the window (positions window - 1 back of its chunk), where
    holding every page's window ids would take (1 + tables) per token page."""
    window, tables = WINDOW_CASES[name]
    pages = -(-tokens // WINDOW_PAGE)
    read = -(-(window - 1 + chunk) // WINDOW_PAGE) + 1
    num_pages = pages + tables * read
    assert num_pages < pages * (1 + tables), "the pool would hold every window page anyway"
    return ["--page-size", str(WINDOW_PAGE), "--num-pages", str(num_pages), "--prefill-chunk",
            str(chunk)]


def long_prompt(name: str) -> dict:
    return max(GOLD["cases"][name]["prompts"], key=lambda p: len(p["ids"]))


@pytest.mark.parametrize("name", sorted(WINDOW_CASES))
def test_cpu_f32_window_pages_given_back_keep_transformers_ids(name: str, models) -> None:
    """The 40-token prompt and its 32 tokens in a pool that only holds them because the sliding
    layers' pages behind the window go back: transformers' greedy ids and logprobs, exactly; one
    page less is refused up front (the pool's capacity counts the window)."""
    p = long_prompt(name)
    total = len(p["ids"]) + GOLD["max_new_tokens"]
    pool = window_pool(name, total, 8)
    out = run_astr(models(name), p["ids"], ["--dtype", "f32", "--threads", "1", *pool])
    assert out["token_ids"] == p["greedy"], (name, out["token_ids"], p["greedy"])
    for step, (lp, gold) in enumerate(zip(out["logprobs"], p["logprobs"])):
        assert abs(lp - gold) <= TOL_F32, f"{name} step {step}: {lp} vs {gold}"
    smaller = pool[:3] + [str(int(pool[3]) - 1)] + pool[4:]
    cmd = [str(ASTR), "run", "--model", str(models(name)), "--prompt-ids",
           ",".join(map(str, p["ids"])), "--max-tokens", str(GOLD["max_new_tokens"]),
           "--ignore-eos", "--dtype", "f32", *smaller]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "exceeds the KV pool" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", sorted(WINDOW_CASES))
@pytest.mark.parametrize("chunk", [8, 1])
def test_cuda_emulated_window_pages_given_back_follow_transformers(name: str, chunk: int,
                                                                    models) -> None:
    """The same on the emulated CUDA backend, teacher-forced over transformers' continuation: in
    chunks of 8 (the prefill kernels) and of 1 (every step a decode step: the decode kernel and
    its CUDA graphs), each reading the window tables it is given."""
    if not CUDA_EMU.exists():
        pytest.skip(f"no emulated CUDA plugin at {CUDA_EMU} (built without the CUDA toolkit)")
    p = long_prompt(name)
    total = len(p["ids"]) + len(p["greedy_bf16w"]) + 1
    extra = ["--backend", "cuda", *window_pool(name, total, chunk)]
    env = {"ASTR_CUDA_PLUGIN": str(CUDA_EMU)}
    logprobs, _ = teacher_forced(models(name), p, "_bf16w", extra, env)
    diffs = [abs(a - b) for a, b in zip(logprobs, p["logprobs_bf16w"])]
    assert max(diffs) <= TOL_BF16_MAX, (name, chunk, max(diffs))
    assert sum(diffs) / len(diffs) <= TOL_BF16_MEAN, (name, chunk, sum(diffs) / len(diffs))


# Cases whose model GGUF can hold as it is (no config overrides, a layer pattern llama.cpp fixes the
# same, q/k rows in rotate-half order): `make-model --format gguf` writes the same values under
# llama.cpp's names (Phi-3's fused attn_qkv / ffn_up, Gemma's norms as 1 + w, Qwen3-MoE's experts
# stacked in ffn_{gate,up,down}_exps [experts, rows, cols], gpt-oss's with their biases [experts,
# rows] and YaRN as llama.cpp's keys say it), so astr's reading of
# the GGUF form must give transformers' greedy ids too.
GGUF_FORM_CASES = ["gemma2_gqa2_hd32_softcap", "phi3_gqa2_hd16", "qwen3_gqa4_hd32",
                   "qwen3_moe_e8_top2", "qwen2_moe_e8_top2_shared", "gpt_oss_e4_top2_sw8",
                   "glm4_moe_e8_g2_shared"]


@pytest.mark.parametrize("name", GGUF_FORM_CASES)
def test_cpu_f32_gguf_form_equals_transformers(name: str, tmp_path: Path) -> None:
    assert not cases.CASES[name][1], f"{name} has config overrides GGUF cannot hold"
    args = cases.make_model_args(name, str(tmp_path / "model.gguf"))
    args[args.index("--format") + 1] = "gguf"
    subprocess.run([str(ASTR), *args], check=True, stdout=subprocess.DEVNULL)
    for p in GOLD["cases"][name]["prompts"]:
        out = run_astr(tmp_path / "model.gguf", p["ids"], ["--dtype", "f32", "--threads", "1"])
        assert out["token_ids"] == p["greedy"], (
            f"{name} prompt of {len(p['ids'])} (GGUF): astr {out['token_ids']} vs transformers "
            f"{p['greedy']}")
        for step, (lp, gold) in enumerate(zip(out["logprobs"], p["logprobs"])):
            assert abs(lp - gold) <= TOL_F32, f"{name} GGUF step {step}: logprob {lp} vs {gold}"


# Gemma 3's larger checkpoints (4B, 12B, 27B) are multimodal (Gemma3ForConditionalGeneration,
# model_type gemma3): the text model's keys under text_config, leaving out what equals
# Gemma3TextConfig's defaults, and its tensors under language_model.model. (transformers < 4.52)
# or model.language_model. (later), beside the vision tower's. astr serves the text stack: the same
# weights in that form must give transformers' greedy ids and logprobs.
GEMMA3_TEXT_DEFAULTS = {"hidden_activation": "gelu_pytorch_tanh", "rope_theta": 1e6,
                        "rope_local_base_freq": 1e4, "tie_word_embeddings": True}


def write_multimodal_gemma3(text: Path, out: Path, prefix: str) -> None:
    out.mkdir()
    config = json.loads((text / "config.json").read_text())
    text_config = {k: v for k, v in config.items()
                   if k not in ("model_type", "torch_dtype", "bos_token_id", "eos_token_id")
                   and v is not None and GEMMA3_TEXT_DEFAULTS.get(k, object()) != v}
    text_config["model_type"] = "gemma3_text"
    wrapper = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
               "text_config": text_config,
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8},
               "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
               "mm_tokens_per_image": 256, "image_token_index": 262144}
    (out / "config.json").write_text(json.dumps(wrapper, indent=2))
    # The same tensor bytes under the wrapper's names, and two vision tensors after them.
    blob = (text / "model.safetensors").read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    data = bytearray(blob[8 + n:])
    renamed = {}
    for name, info in header.items():
        if name == "__metadata__":
            renamed[name] = info
            continue
        assert name.startswith("model."), name
        renamed[prefix + name[len("model."):]] = info
    for name, shape in (("vision_tower.vision_model.post_layernorm.weight", [8]),
                        ("multi_modal_projector.mm_input_projection_weight", [8, 64])):
        begin = len(data)
        data += bytes(2 * shape[0] * (shape[1] if len(shape) > 1 else 1))
        renamed[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [begin, len(data)]}
    head = json.dumps(renamed).encode()
    head += b" " * (-len(head) % 8)
    (out / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + bytes(data))


@pytest.mark.parametrize("prefix", ["language_model.model.", "model.language_model."])
def test_gemma3_multimodal_checkpoint_serves_its_text_stack(prefix: str, models,
                                                            tmp_path: Path) -> None:
    name = "gemma3_gqa2_hd32_sw8"
    folder = tmp_path / "gemma3-mm"
    write_multimodal_gemma3(models(name), folder, prefix)
    inspect = subprocess.run([str(ASTR), "inspect", "--json", str(folder)], capture_output=True,
                             text=True, check=True)
    config = json.loads(inspect.stdout)["config"]
    assert config["architecture"] == "gemma3" and config["rope_local_theta"] == 1e4
    check_f32_greedy(name, folder, f"as gemma3 under {prefix}")


def test_glm4_moe_checkpoint_with_its_mtp_layer(models, tmp_path: Path) -> None:
    """GLM-4.5's released checkpoints add their multi-token-prediction layer after the last one
    (model.layers.{num_hidden_layers}.*, num_nextn_predict_layers 1), which transformers does not
    run: astr skips it and serves transformers' greedy ids."""
    name = "glm4_moe_e8_g2_shared"
    folder = tmp_path / "glm-mtp"
    folder.mkdir()
    config = dict(GOLD["cases"][name]["transformers_config"], num_nextn_predict_layers=1)
    (folder / "config.json").write_text(json.dumps(config))
    layers = config["num_hidden_layers"]
    blob = (models(name) / "model.safetensors").read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    # The MTP layer: a copy of the last layer's tensors under the next index (its own extras,
    # eh_proj and enorm / hnorm, as GLM's checkpoints have them).
    last = f"model.layers.{layers - 1}."
    for key, info in list(header.items()):
        if key.startswith(last):
            header[f"model.layers.{layers}." + key[len(last):]] = info
    header[f"model.layers.{layers}.eh_proj.weight"] = header[last + "self_attn.o_proj.weight"]
    header[f"model.layers.{layers}.enorm.weight"] = header[last + "input_layernorm.weight"]
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    (folder / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head +
                                               blob[8 + n:])
    check_f32_greedy(name, folder, "with an MTP layer")
