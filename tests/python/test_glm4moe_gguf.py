"""GLM-4.5 GGUF files as llama.cpp's converter writes them hold their multi-token-prediction
(NextN) layer as one more block: block_count counts it, glm4moe.nextn_predict_layers says how many
of the last blocks are NextN layers, and those blocks carry a whole layer's tensors plus
nextn.{eh_proj, embed_tokens, enorm, hnorm, shared_head_head, shared_head_norm}. llama.cpp skips
them in the forward pass; so must astr: the file with such a block (written here with gguf-py
from make-model's file, random values in the extra block) must give exactly the outputs of the
file without it. And a file whose nextn_predict_layers leaves no layer is refused, naming the key.
"""

import json
import os
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

from quant_variants import copy_metadata

BIN = Path(os.environ.get("ASTR_BIN_DIR", Path(__file__).resolve().parents[2] / "build" / "bin"))
ASTR = BIN / "astr"

LAYERS = 3
HIDDEN = 64
VOCAB = 300
FLAGS = ["--arch", "glm4_moe", "--format", "gguf", "--dtype", "f32", "--layers", str(LAYERS),
         "--hidden", str(HIDDEN), "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
         "--ffn", "96", "--moe-ffn", "32", "--shared-ffn", "32", "--experts", "8",
         "--experts-per-tok", "2", "--routed-scaling", "2.5", "--qk-norm", "--attention-bias",
         "--vocab", str(VOCAB), "--seed", "93", "--init-std", "0.1", "--router-std", "0.5"]


def with_nextn_block(src: Path, dst: Path, nextn: int, seed: int = 5,
                     claimed: int | None = None, gating: int = 2) -> None:
    """A copy of `src` with `nextn` NextN blocks after its layers (the last layer's tensors with
    random values, plus the nextn.* tensors), block_count to match, nextn_predict_layers
    `claimed` (default: `nextn`) and expert_gating_func `gating`."""
    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), "glm4moe")
    copy_metadata(reader, writer, skip=("glm4moe.block_count", "glm4moe.nextn_predict_layers",
                                        "glm4moe.expert_gating_func"))
    writer.add_uint32("glm4moe.block_count", LAYERS + nextn)
    writer.add_uint32("glm4moe.nextn_predict_layers", nextn if claimed is None else claimed)
    writer.add_uint32("glm4moe.expert_gating_func", gating)
    rng = np.random.default_rng(seed)
    last = f"blk.{LAYERS - 1}."
    extra = []
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        data = np.asarray(t.data).reshape(shape)
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
        if t.name.startswith(last):
            extra.append((t.name[len(last):], shape, t.tensor_type))
    for b in range(LAYERS, LAYERS + nextn):
        for rest, shape, dtype in extra:
            values = rng.normal(0.0, 0.5, size=shape).astype(np.float32)
            writer.add_tensor(f"blk.{b}.{rest}", values, raw_dtype=dtype)
        for rest, shape in (("eh_proj", [HIDDEN, 2 * HIDDEN]), ("embed_tokens", [VOCAB, HIDDEN]),
                            ("enorm", [HIDDEN]), ("hnorm", [HIDDEN]),
                            ("shared_head_head", [VOCAB, HIDDEN]), ("shared_head_norm", [HIDDEN])):
            values = rng.normal(0.0, 0.5, size=shape).astype(np.float32)
            writer.add_tensor(f"blk.{b}.nextn.{rest}.weight", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def run(model: Path) -> dict:
    proc = subprocess.run([str(ASTR), "run", "--model", str(model), "--prompt-ids",
                           "5,17,33,100,7,250,3", "--max-tokens", "12", "--json", "--logprobs",
                           "3", "--ignore-eos", "--dtype", "f32", "--threads", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("glm4moe") / "plain.gguf"
    subprocess.run([str(ASTR), "make-model", *FLAGS, "--out", str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return path


def test_nextn_blocks_are_skipped(plain: Path, tmp_path: Path) -> None:
    want = run(plain)
    for nextn in (1, 2):
        mtp = tmp_path / f"nextn{nextn}.gguf"
        with_nextn_block(plain, mtp, nextn)
        reader = gguf.GGUFReader(str(mtp))
        assert any(t.name == f"blk.{LAYERS}.nextn.eh_proj.weight" for t in reader.tensors)
        got = run(mtp)
        assert got["token_ids"] == want["token_ids"], nextn
        assert got["logprobs"] == want["logprobs"], nextn
        assert got["top_logprobs"] == want["top_logprobs"], nextn


def test_inspect_counts_the_served_layers(plain: Path, tmp_path: Path) -> None:
    mtp = tmp_path / "nextn.gguf"
    with_nextn_block(plain, mtp, 1)
    proc = subprocess.run([str(ASTR), "inspect", str(mtp)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.strip().startswith("num_layers"))
    assert line.split()[-1] == str(LAYERS), line


def test_nextn_leaving_no_layer_is_refused(plain: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    with_nextn_block(plain, bad, 1, claimed=LAYERS + 1)
    proc = subprocess.run([str(ASTR), "inspect", str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "nextn_predict_layers" in proc.stderr, proc.stderr


def test_softmax_gating_is_refused_naming_the_key(plain: Path, tmp_path: Path) -> None:
    bad = tmp_path / "softmax.gguf"
    with_nextn_block(plain, bad, 1, gating=1)  # llama.cpp's softmax gating
    proc = subprocess.run([str(ASTR), "inspect", str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "expert_gating_func" in proc.stderr and "sigmoid" in proc.stderr, proc.stderr


def test_make_model_refuses_a_gguf_without_attention_biases(tmp_path: Path) -> None:
    flags = [f for f in FLAGS if f != "--attention-bias"]
    proc = subprocess.run([str(ASTR), "make-model", *flags, "--out", str(tmp_path / "m.gguf")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "q/k/v biases" in proc.stderr, proc.stderr
    assert not (tmp_path / "m.gguf").exists()
