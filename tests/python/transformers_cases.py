"""The random-weight models and prompts checked against Hugging Face `transformers` itself.

Shared by tools/transformers_goldens.py (run by hand with torch and transformers: it writes
tests/python/goldens/transformers_forward.json) and tests/python/test_transformers_goldens.py (CI,
no torch: it rebuilds each model with `astr make-model` from the same flags and seed, checks the
weights' hashes against the goldens, and compares astr's greedy run with transformers').

Shapes: head_dim != hidden / heads, GQA ratios 1, 2, 4 and 8 (MQA), tied and untied embeddings,
a sliding window shorter than the prompt, llama3 / linear RoPE scaling, q/k norms (qwen3) and qkv
biases (qwen2), GeGLU (hidden_act gelu_pytorch_tanh, Gemma's MLP), Gemma 2 (soft-capping), Gemma 3 (gemma3_text) and Phi-3 (fused
qkv / gate_up, partial rotary), Qwen3-MoE (8 and 16 experts, top-1 / 2 / 4, renormalized and raw
top-k weights, dense layers by mlp_only_layers and by decoder_sparse_step), Qwen2-MoE (a gated
shared expert), Mixtral and gpt-oss (attention sinks, q/k/v/o biases, YaRN, clamped SwiGLU,
expert and router biases) and GLM-4.5 (sigmoid routing with a choice bias, expert groups, a
routed scaling factor, ungated shared experts, dense first layers). `--init-std 0.25` makes the random models' distributions sharp enough that
greedy decoding has no near-ties at float32 precision (the goldens record the smallest top-2 gap of each prompt).
"""

from __future__ import annotations

MAX_NEW_TOKENS = 32
TOP_N = 5

_COMMON = ["--format", "hf", "--dtype", "f32", "--layers", "2", "--init-std", "0.25"]

# name -> (astr make-model flags after _COMMON, config.json overrides)
CASES: dict[str, tuple[list[str], dict]] = {
    "llama_gqa2_hd16": (["--arch", "llama", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                         "--head-dim", "16", "--ffn", "96", "--vocab", "300", "--seed", "3"], {}),
    "llama_mha_hd32_tied": (["--arch", "llama", "--hidden", "64", "--heads", "4", "--kv-heads", "4",
                             "--head-dim", "32", "--ffn", "80", "--vocab", "257", "--seed", "11",
                             "--tie", "--rope-theta", "500000"], {}),
    "llama_mqa_llama3_rope": (["--arch", "llama", "--hidden", "64", "--heads", "8",
                               "--kv-heads", "1", "--head-dim", "16", "--ffn", "96", "--vocab",
                               "300", "--seed", "5"],
                              {"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 64}}),
    "llama_linear_rope": (["--arch", "llama", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                           "--head-dim", "16", "--ffn", "96", "--vocab", "300", "--seed", "6"],
                          {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "llama_geglu_tanh": (["--arch", "llama", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                          "--head-dim", "32", "--ffn", "160", "--vocab", "300", "--seed", "13",
                          "--hidden-act", "gelu_pytorch_tanh"], {}),
    "mistral_gqa4_hd16": (["--arch", "mistral", "--hidden", "96", "--heads", "8",
                           "--kv-heads", "2", "--head-dim", "16", "--ffn", "128", "--vocab", "300",
                           "--seed", "7"], {}),
    "mistral_sliding_window8": (["--arch", "mistral", "--hidden", "64", "--heads", "4",
                                 "--kv-heads", "2", "--head-dim", "16", "--ffn", "96", "--vocab",
                                 "300", "--seed", "8"], {"sliding_window": 8}),
    "qwen2_gqa2_hd16": (["--arch", "qwen2", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                         "--head-dim", "16", "--ffn", "96", "--vocab", "300", "--seed", "3"], {}),
    "qwen2_gqa4_hd32_tied": (["--arch", "qwen2", "--hidden", "64", "--heads", "8",
                              "--kv-heads", "2", "--head-dim", "32", "--ffn", "96", "--vocab",
                              "280", "--seed", "9", "--tie", "--rope-theta", "1000000"], {}),
    "qwen3_mha_hd16_tied": (["--arch", "qwen3", "--hidden", "64", "--heads", "4", "--kv-heads", "4",
                             "--head-dim", "16", "--ffn", "96", "--vocab", "300", "--seed", "3",
                             "--tie", "--rms-eps", "1e-6"], {}),
    "qwen3_gqa4_hd32": (["--arch", "qwen3", "--hidden", "64", "--heads", "8", "--kv-heads", "2",
                         "--head-dim", "32", "--ffn", "112", "--vocab", "300", "--seed", "12",
                         "--rope-theta", "1000000"], {}),
    # Gemma 3: sandwich norms scaled by 1 + w, q/k norms, GeGLU, scaled embeddings, sliding and
    # global layers with their own RoPE bases (pattern 2: layer 0 slides, layer 1 is global).
    "gemma3_gqa2_hd32_sw8": (["--arch", "gemma3", "--hidden", "64", "--heads", "4",
                              "--kv-heads", "2", "--head-dim", "32", "--ffn", "96", "--vocab",
                              "300", "--seed", "21", "--tie", "--rope-theta", "1000000",
                              "--sliding-window", "8", "--sliding-window-pattern", "2"], {}),
    # Three layers, two sliding (window 5) then one global; MQA, head_dim 16 != 48 / 4, untied,
    # and query_pre_attn_scalar other than head_dim.
    "gemma3_mqa_hd16_untied": (["--arch", "gemma3", "--layers", "3", "--hidden", "48", "--heads",
                                "4", "--kv-heads", "1", "--head-dim", "16", "--ffn", "80",
                                "--vocab", "300", "--seed", "22", "--rope-theta", "1000000",
                                "--sliding-window", "5", "--sliding-window-pattern", "3"],
                               {"query_pre_attn_scalar": 24}),
    # Gemma 2: attention scores and final logits soft-capped (small caps so that they bite on
    # these random models), alternating sliding (window 6) and global layers, sandwich norms.
    "gemma2_gqa2_hd32_softcap": (["--arch", "gemma2", "--hidden", "64", "--heads", "4",
                                  "--kv-heads", "2", "--head-dim", "32", "--ffn", "96",
                                  "--vocab", "300", "--seed", "31", "--tie",
                                  "--sliding-window", "6", "--attn-softcap", "3",
                                  "--final-softcap", "8"], {}),
    # Four layers, MQA, untied, head_dim 16 != 48 / 4, query_pre_attn_scalar other than head_dim
    # and Gemma 2's released caps (50 / 30).
    "gemma2_mqa_hd16_untied": (["--arch", "gemma2", "--layers", "4", "--hidden", "48",
                                "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--ffn",
                                "80", "--vocab", "300", "--seed", "32", "--sliding-window", "5"],
                               {"query_pre_attn_scalar": 24}),
    # Phi-3: fused qkv_proj and gate_up_proj (split by the model file), GQA 2, untied.
    "phi3_gqa2_hd16": (["--arch", "phi3", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                        "--ffn", "96", "--vocab", "300", "--seed", "41"], {}),
    # Phi-4-mini's shape of attention: partial rotary (half the head), MQA, tied, and a sliding
    # window of 8 under the 40-token prompt.
    "phi3_partial_rotary_sw8": (["--arch", "phi3", "--hidden", "96", "--heads", "4",
                                 "--kv-heads", "1", "--ffn", "128", "--vocab", "300", "--seed",
                                 "42", "--tie"],
                                {"partial_rotary_factor": 0.5, "sliding_window": 8}),
    # LongRoPE (Phi-3 128k, Phi-4-mini) on 18 of 24 head dims: pre-training context 39, so the
    # 1- and 7-token prompts (39 tokens at most with their continuations) use the short factors
    # and the 40-token one the long factors throughout (transformers picks one set per forward
    # pass by its length); cos / sin times sqrt(1 + ln(312 / 39) / ln(39)).
    "phi3_longrope_partial": (["--arch", "phi3", "--hidden", "96", "--heads", "4",
                               "--kv-heads", "2", "--ffn", "128", "--vocab", "300", "--seed",
                               "43"],
                              {"partial_rotary_factor": 0.75, "max_position_embeddings": 312,
                               "original_max_position_embeddings": 39,
                               "rope_scaling": {
                                   "type": "longrope",
                                   "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.8, 2.5,
                                                    3.0],
                                   "long_factor": [1.0, 1.5, 2.5, 4.0, 6.5, 10.0, 16.0, 25.0,
                                                   40.0]}}),
    # LongRoPE with a pre-training context of 20 that the 1- and 7-token prompts cross while they
    # generate: transformers' Phi-3 generate then recomputes the whole sequence with the long
    # factors (prepare_inputs_for_generation drops the cache), which astr's scheduler does by
    # restarting the sequence. Full rotary, MQA, untied.
    "phi3_longrope_crossing": (["--arch", "phi3", "--hidden", "64", "--heads", "4",
                                "--kv-heads", "1", "--ffn", "96", "--vocab", "300", "--seed",
                                "44"],
                               {"max_position_embeddings": 160,
                                "original_max_position_embeddings": 20,
                                "rope_scaling": {
                                    "type": "longrope",
                                    "short_factor": [1.0, 1.05, 1.1, 1.2, 1.4, 1.8, 2.5, 3.0],
                                    "long_factor": [1.0, 2.0, 3.5, 6.0, 10.0, 16.0, 25.0,
                                                    40.0]}}),
    # Qwen3-MoE: Qwen3's attention, every layer a mixture of 8 experts (ffn 32), top-2 with the
    # weights renormalized (norm_topk_prob), GQA 2, untied.
    "qwen3_moe_e8_top2": (["--arch", "qwen3_moe", "--hidden", "64", "--heads", "4",
                           "--kv-heads", "2", "--head-dim", "16", "--ffn", "96", "--moe-ffn",
                           "32", "--experts", "8", "--experts-per-tok", "2", "--vocab", "300",
                           "--seed", "51"], {}),
    # Three layers, the first dense (mlp_only_layers), 16 experts top-4 with the raw softmax
    # weights (norm_topk_prob false), GQA 4, tied.
    "qwen3_moe_e16_top4_dense0": (["--arch", "qwen3_moe", "--layers", "3", "--hidden", "64",
                                   "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--ffn",
                                   "80", "--moe-ffn", "24", "--experts", "16",
                                   "--experts-per-tok", "4", "--norm-topk-prob=false",
                                   "--dense-layers", "0", "--vocab", "300", "--seed", "52",
                                   "--tie"], {}),
    # Mixtral: Mistral's layer with every MLP 4 experts (of --ffn), top-2 renormalized, GQA 2.
    "mixtral_e4_top2": (["--arch", "mixtral", "--hidden", "64", "--heads", "4", "--kv-heads",
                         "2", "--head-dim", "16", "--ffn", "48", "--experts", "4",
                         "--experts-per-tok", "2", "--vocab", "300", "--seed", "61"], {}),
    # Eight experts, MQA, tied, and Mistral's sliding window (8) under the 40-token prompt.
    "mixtral_e8_top2_sw8": (["--arch", "mixtral", "--hidden", "48", "--heads", "4",
                             "--kv-heads", "1", "--head-dim", "16", "--ffn", "40", "--experts",
                             "8", "--experts-per-tok", "2", "--vocab", "300", "--seed", "62",
                             "--tie"], {"sliding_window": 8}),
    # Qwen2-MoE: q/k/v biases, 8 experts top-2 with the raw softmax weights, and a shared expert
    # (ffn 48) scaled by its sigmoid gate, GQA 2.
    "qwen2_moe_e8_top2_shared": (["--arch", "qwen2_moe", "--hidden", "64", "--heads", "4",
                                  "--kv-heads", "2", "--head-dim", "16", "--ffn", "96",
                                  "--moe-ffn", "32", "--shared-ffn", "48", "--experts", "8",
                                  "--experts-per-tok", "2", "--vocab", "300", "--seed", "54"],
                                 {}),
    # decoder_sparse_step 2 (layer 0 dense, layer 1 MoE), 4 experts top-1, MHA.
    "qwen3_moe_step2_top1": (["--arch", "qwen3_moe", "--hidden", "48", "--heads", "4",
                              "--kv-heads", "4", "--head-dim", "12", "--ffn", "64", "--moe-ffn",
                              "40", "--experts", "4", "--experts-per-tok", "1",
                              "--decoder-sparse-step", "2", "--vocab", "300", "--seed", "53"],
                             {}),
    # gpt-oss: biases on q, k, v, o, a sink logit per head, YaRN (make-model's: factor 32 over 4096,
    # truncated correction dims), alternating sliding (window 8) and global layers, every MLP 4
    # experts (ffn 32, with biases) top-2 with softmax over the chosen logits, clamped SwiGLU.
    # gpt-oss's few experts make routing near-ties common; these seeds and router stds (a trained
    # router's decisiveness) keep bf16 activations from flipping one on the goldens' sequences.
    # YaRN's factor 32 multiplies every attention score by (1 + 0.1 ln 32)^2 = 1.81: --init-std
    # 0.2 (the later one wins) brings the scores back to the other cases' sharpness, which bf16
    # q / k (the CUDA backend's KV cache) move by what TOL_BF16_MAX allows.
    "gpt_oss_e4_top2_sw8": (["--arch", "gpt_oss", "--hidden", "64", "--heads", "4", "--kv-heads",
                             "2", "--head-dim", "16", "--ffn", "32", "--experts", "4",
                             "--experts-per-tok", "2", "--vocab", "300", "--seed", "108",
                             "--router-std", "1", "--sliding-window", "8", "--init-std", "0.2"],
                            {}),
    # Three layers (two sliding, window 5), MQA, head_dim 16 != 48 / 4, 8 experts top-3, a SwiGLU
    # limit small enough to clamp often, and the released model's form of YaRN (untruncated) with
    # its own betas and a 32-token pre-training context.
    "gpt_oss_e8_top3_mqa_clamped": (["--arch", "gpt_oss", "--layers", "3", "--hidden", "48",
                                     "--heads", "4", "--kv-heads", "1", "--head-dim", "16",
                                     "--ffn", "40", "--experts", "8", "--experts-per-tok", "3",
                                     "--vocab", "300", "--seed", "91", "--router-std", "2",
                                     "--sliding-window", "5"],
                                    {"swiglu_limit": 0.8,
                                     "rope_scaling": {"rope_type": "yarn", "factor": 8.0,
                                                      "beta_fast": 16.0, "beta_slow": 2.0,
                                                      "truncate": False,
                                                      "original_max_position_embeddings": 32}}),
    # GLM-4.5 (glm4_moe): layer 0 dense, then 8 experts in 2 groups (1 stays) with sigmoid scores,
    # a random e_score_correction_bias, renormalized top-2 weights times 2.5 and an ungated shared
    # expert; q/k/v biases, q/k norms, partial rotary (half the head).
    "glm4_moe_e8_g2_shared": (["--arch", "glm4_moe", "--layers", "3", "--hidden", "64", "--heads",
                               "4", "--kv-heads", "2", "--head-dim", "16", "--ffn", "96",
                               "--moe-ffn", "32", "--shared-ffn", "32", "--experts", "8",
                               "--experts-per-tok", "2", "--expert-groups", "2",
                               "--topk-groups", "1", "--routed-scaling", "2.5", "--qk-norm",
                               "--attention-bias", "--vocab", "300", "--seed", "81"], {}),
    # Every layer MoE: 8 experts in 4 groups (2 stay), top-2 with the raw sigmoid weights, two
    # shared experts' worth (ffn 48), MQA, no biases or q/k norms.
    "glm4_moe_e8_g4_raw": (["--arch", "glm4_moe", "--layers", "2", "--hidden", "48", "--heads",
                            "4", "--kv-heads", "1", "--head-dim", "16", "--ffn", "64",
                            "--moe-ffn", "24", "--shared-ffn", "48", "--experts", "8",
                            "--experts-per-tok", "2", "--expert-groups", "4", "--topk-groups",
                            "2", "--first-dense", "0", "--norm-topk-prob=false", "--vocab",
                            "300", "--seed", "84"], {}),
}

# Prompt lengths per case: one token, a few, and past the sliding window.
PROMPT_LENGTHS = (1, 7, 40)


def make_model_args(name: str, out: str) -> list[str]:
    """`astr make-model` arguments (after the binary) that write case `name` to folder `out`."""
    flags, _ = CASES[name]
    return ["make-model", *_COMMON, *flags, "--out", out]


def prompt_ids(name: str, length: int, vocab: int) -> list[int]:
    """A deterministic prompt: ids in [3, vocab) from a small LCG seeded by the case and length."""
    state = (sum(ord(c) for c in name) * 1_000_003 + length * 7919) & 0xFFFFFFFF
    ids = []
    for _ in range(length):
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        ids.append(3 + (state >> 8) % (vocab - 3))
    return ids


def apply_overrides(folder: str, overrides: dict) -> None:
    """Merges `overrides` into the folder's config.json."""
    import json
    import os

    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(overrides)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def weight_hashes(folder: str) -> dict[str, str]:
    """SHA-256 of each tensor's bytes in the folder's safetensors files, by tensor name."""
    import glob
    import hashlib
    import json
    import os
    import struct

    out: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            base = 8 + n
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                f.seek(base + begin)
                out[name] = hashlib.sha256(f.read(end - begin)).hexdigest()
    return out
