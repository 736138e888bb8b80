"""Every quantized GGUF type astr reads dequantizes exactly as the `gguf` package (llama.cpp's
gguf-py, PyPI) does, block for block: a GGUF file is written with stories260K's metadata and
tensors plus one extra tensor per type made of random blocks (valid f16 scales; MXFP4's E8M0
exponents over their finite range), and
`astr inspect --dump` prints astr's f32 values of each, which must equal gguf-py's."""

import json
import os
import subprocess
import tempfile

import gguf
import numpy as np
import pytest
from gguf import quants

from quant_variants import copy_metadata

BIN_DIR = os.environ.get("ASTR_BIN_DIR", "build/bin")
SHARED = os.environ.get("ASTR_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                         "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
Q = gguf.GGMLQuantizationType

# type -> byte offsets of its f16 scale fields within one block (set to finite values so that the
# values stay finite; every other byte is random).
TYPES = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
    Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.MXFP4: [],
}
# type -> byte offsets of its E8M0 exponents (MXFP4: the block scale is 2^(e - 128)), drawn from
# [0, 250]: the subnormal scales of e < 2 included, the largest still finite times 12.
E8M0 = {Q.MXFP4: [0]}
# Odd shapes: rows that are not powers of two, a single block, several rows.
SHAPES = [(1, 1), (3, 2), (7, 3), (5, 40)]  # (rows, blocks per row)


def random_blocks(rng, qtype, count):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(count, block_bytes), dtype=np.uint8)
    for off in TYPES[qtype]:
        scale = (rng.standard_normal(count) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(count, 2)
    for off in E8M0.get(qtype, []):
        raw[:, off] = rng.integers(0, 251, size=count, dtype=np.uint8)
    return raw


def write_model(path, extra):
    reader = gguf.GGUFReader(STORIES)
    writer = gguf.GGUFWriter(path, arch=reader.fields["general.architecture"].contents())
    copy_metadata(reader, writer)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    for name, (qtype, raw, shape) in extra.items():
        writer.add_tensor(name, raw, raw_dtype=qtype)  # byte shape: gguf-py derives elements
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(16)
    extra = {}
    for qtype in TYPES:
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        for rows, blocks in SHAPES:
            raw = random_blocks(rng, qtype, rows * blocks)
            shape = (rows, blocks * block_elems)
            extra[f"test.{qtype.name.lower()}.{rows}x{blocks}"] = (
                qtype, raw.reshape(rows, blocks * block_bytes), shape)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "quants.gguf")
        write_model(path, extra)
        yield path, extra


def dump(path, name):
    r = subprocess.run([os.path.join(BIN_DIR, "astr"), "inspect", path, "--dump", name],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("qtype", list(TYPES), ids=lambda t: t.name)
def test_dequantization_matches_gguf_py(model, qtype):
    path, extra = model
    for name, (t, raw, shape) in extra.items():
        if t != qtype:
            continue
        got = dump(path, name)
        assert got["dtype"] == qtype.name
        assert got["shape"] == list(shape)
        want = quants.dequantize(raw, qtype).reshape(-1).astype(np.float32)
        values = np.array(got["values"], dtype=np.float32)
        assert values.shape == want.shape, name
        # Both compute d * scale * q - dmin * m in f32; allow the last bit of fused arithmetic.
        np.testing.assert_allclose(values, want, rtol=2e-6, atol=1e-7, err_msg=name)


def test_dump_of_an_unknown_tensor_names_it(model):
    path, _ = model
    r = subprocess.run([os.path.join(BIN_DIR, "astr"), "inspect", path, "--dump", "no.such"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "no.such" in r.stderr and "missing tensor" in r.stderr, r.stderr


def test_inspect_lists_each_tensor_type(model):
    path, extra = model
    r = subprocess.run([os.path.join(BIN_DIR, "astr"), "inspect", path, "--tensors", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    listed = {t["file_name"]: t["dtype"] for t in json.loads(r.stdout)["tensors"]}
    for name, (qtype, _, _) in extra.items():
        assert listed.get(name) == qtype.name, name
