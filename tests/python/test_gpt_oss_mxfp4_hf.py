"""gpt-oss's released Hugging Face form: MXFP4 experts as `mlp.experts.{gate_up,down}_proj_blocks`
/ `_scales`, which astr reads as the same model as the GGUF form (llama.cpp's block_mxfp4).

A random gpt-oss GGUF with MXFP4 experts (`astr make-model`) is rewritten as an HF folder the way
the released checkpoints hold it, following transformers' reader (integrations/mxfp4.py,
convert_moe_packed_tensors): blocks [experts, rows, cols / 32, 16] with element 2j of a block in
byte j's low nibble and 2j + 1 in its high one, scales [experts, rows, cols / 32] with value =
FP4[nibble] * 2^(scale - 127), gate_up's rows interleaving gate and up. First the rewrite itself is
checked: that reading of the HF tensors (written here in numpy; found equal, by hand, to
transformers 5.25's convert_moe_packed_tensors on random blocks) gives exactly gguf-py's
dequantization of the GGUF blocks. Then astr must run both forms to the same greedy ids and the
same logprobs, bit for bit (the same MXFP4 values, kept quantized on the bf16 path and dequantized
on the f32 one).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import quants
from safetensors.numpy import save_file

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("ASTR_BIN_DIR") or REPO / "build" / "bin")
ASTR = BIN_DIR / "astr"

FLAGS = ["--arch", "gpt_oss", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
         "--head-dim", "16", "--ffn", "64", "--experts", "4", "--experts-per-tok", "2", "--vocab",
         "300", "--seed", "77", "--init-std", "0.1", "--sliding-window", "8"]
# transformers' FP4 (E2M1) values by nibble.
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)

GGUF_TO_HF = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight", "attn_output.bias": "self_attn.o_proj.bias",
    "attn_sinks.weight": "self_attn.sinks",
    "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
}


def ggml_to_hf_blocks(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml block_mxfp4 bytes [..., groups, 17] -> HF (blocks [..., groups, 16], scales [...,
    groups]): byte j holds elements j (low) and j + 16 (high) in ggml, 2j and 2j + 1 in HF."""
    scales = raw[..., 0]
    qs = raw[..., 1:]
    nib = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # element order 0..31
    blocks = (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)
    return blocks, scales.astype(np.uint8)


def hf_dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """transformers' convert_moe_packed_tensors, less its final transpose: [..., groups * 32]."""
    out = np.empty(blocks.shape[:-1] + (32,), dtype=np.float32)
    out[..., 0::2] = FP4[blocks & 0x0F]
    out[..., 1::2] = FP4[blocks >> 4]
    out = np.ldexp(out, scales.astype(np.int32)[..., None] - 127)
    return out.reshape(blocks.shape[:-2] + (-1,))


def interleave_rows(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[E, f, ...] twice -> [E, 2f, ...] with row 2j from gate, 2j + 1 from up."""
    out = np.empty((gate.shape[0], 2 * gate.shape[1]) + gate.shape[2:], dtype=gate.dtype)
    out[:, 0::2], out[:, 1::2] = gate, up
    return out


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    if not ASTR.exists():
        pytest.fail(f"astr binary not found at {ASTR} (build it, or set ASTR_BIN_DIR)")
    root = tmp_path_factory.mktemp("gpt_oss_mxfp4")
    gguf_path = root / "model.gguf"
    subprocess.run([str(ASTR), "make-model", *FLAGS, "--format", "gguf", "--dtype", "f32",
                    "--dtype-of", "experts.=mxfp4", "--out", str(gguf_path)], check=True,
                   stdout=subprocess.DEVNULL)
    hf = root / "hf"
    # The same architecture's config.json (its f32 weights are not used), as released: with the
    # quantization_config that says the experts are MXFP4.
    subprocess.run([str(ASTR), "make-model", *FLAGS, "--format", "hf", "--dtype", "f32", "--out",
                    str(hf)], check=True, stdout=subprocess.DEVNULL)
    config = json.loads((hf / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4",
                                     "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                "model.layers.*.mlp.router",
                                                                "model.embed_tokens", "lm_head"]}
    (hf / "config.json").write_text(json.dumps(config, indent=2))
    reader = gguf.GGUFReader(str(gguf_path))
    t = {x.name: x for x in reader.tensors}
    tensors: dict[str, np.ndarray] = {}
    checked = 0
    for name, x in t.items():
        data = np.array(x.data)
        if name == "token_embd.weight":
            tensors["model.embed_tokens.weight"] = data
        elif name == "output_norm.weight":
            tensors["model.norm.weight"] = data
        elif name == "output.weight":
            tensors["lm_head.weight"] = data
        else:
            layer, rest = name.split(".", 2)[1], name.split(".", 2)[2]
            p = f"model.layers.{layer}."
            if rest in GGUF_TO_HF:
                tensors[p + GGUF_TO_HF[rest]] = data
            elif rest == "ffn_gate_exps.bias":
                tensors[p + "mlp.experts.gate_up_proj_bias"] = interleave_rows(
                    data, np.array(t[f"blk.{layer}.ffn_up_exps.bias"].data))
            elif rest == "ffn_down_exps.bias":
                tensors[p + "mlp.experts.down_proj_bias"] = data
            elif rest in ("ffn_gate_exps.weight", "ffn_down_exps.weight"):
                assert x.tensor_type == gguf.GGMLQuantizationType.MXFP4, name
                def split(raw):  # [E, rows, groups * 17] bytes -> [E, rows, groups, 17]
                    return raw.reshape(raw.shape[0], raw.shape[1], -1, 17)
                base = "gate_up_proj" if "gate" in rest else "down_proj"
                raw = split(data)
                if base == "gate_up_proj":
                    raw = interleave_rows(raw, split(np.array(t[f"blk.{layer}.ffn_up_exps.weight"]
                                                             .data)))
                blocks, scales = ggml_to_hf_blocks(raw)
                # The rewrite, read as transformers reads it, is gguf-py's dequantization.
                want = quants.dequantize(raw.reshape(-1, raw.shape[-2] * 17),
                                         gguf.GGMLQuantizationType.MXFP4)
                got = hf_dequantize(blocks, scales).reshape(want.shape)
                np.testing.assert_array_equal(got, want, err_msg=name)
                checked += 1
                tensors[p + f"mlp.experts.{base}_blocks"] = blocks
                tensors[p + f"mlp.experts.{base}_scales"] = scales
    assert checked == 4  # gate_up and down of two layers
    save_file(tensors, str(hf / "model.safetensors"), metadata={"format": "pt"})
    return gguf_path, hf


def run(model: Path, dtype: str) -> dict:
    proc = subprocess.run([str(ASTR), "run", "--model", str(model), "--prompt-ids",
                           "5,17,33,101,7,250,3,44,90,12,13,14", "--max-tokens", "16", "--json",
                           "--dtype", dtype, "--threads", "1", "--ignore-eos"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_hf_mxfp4_experts_run_as_the_gguf_form(forms, dtype: str) -> None:
    gguf_path, hf = forms
    a, b = run(gguf_path, dtype), run(hf, dtype)
    assert a["token_ids"] == b["token_ids"]
    assert a["logprobs"] == b["logprobs"]


def test_inspect_lists_the_hf_experts_as_mxfp4(forms) -> None:
    _, hf = forms
    proc = subprocess.run([str(ASTR), "inspect", str(hf), "--tensors", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = {t["name"]: t for t in json.loads(proc.stdout)["tensors"]}
    e = listed["layers.1.experts.3.up_proj"]
    assert e["dtype"] == "MXFP4" and e["shape"] == [64, 64], e


def run_on_edited_copy(hf: Path, tmp_path: Path, edit) -> subprocess.CompletedProcess:
    """`astr run` on a copy of folder `hf` whose tensors `edit` (name -> array dict) changed."""
    from safetensors.numpy import load_file
    tensors = load_file(str(hf / "model.safetensors"))
    edit(tensors)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((hf / "config.json").read_text())
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    return subprocess.run([str(ASTR), "run", "--model", str(bad), "--prompt-ids", "5",
                           "--max-tokens", "1"], capture_output=True, text=True, timeout=60)


def test_hf_mxfp4_experts_with_a_wrong_shape_are_refused(forms, tmp_path: Path) -> None:
    _, hf = forms

    def cut(tensors):
        name = "model.layers.0.mlp.experts.down_proj_scales"
        tensors[name] = tensors[name][:, :-1]
    proc = run_on_edited_copy(hf, tmp_path, cut)
    assert proc.returncode != 0
    assert "down_proj" in proc.stderr and "MXFP4" in proc.stderr, proc.stderr


def test_hf_mxfp4_experts_of_another_dtype_are_refused(forms, tmp_path: Path) -> None:
    _, hf = forms

    def signed(tensors):
        name = "model.layers.1.mlp.experts.gate_up_proj_blocks"
        tensors[name] = tensors[name].view(np.int8)  # I8, not U8
    proc = run_on_edited_copy(hf, tmp_path, signed)
    assert proc.returncode != 0
    assert "gate_up_proj" in proc.stderr and "must be U8" in proc.stderr, proc.stderr
