"""astr-worker refuses, at once and naming the key, a model whose config disagrees with its
tensors: a GGUF whose llama.block_count and an HF folder whose num_hidden_layers declare 2^31 - 1
layers (the weights hold 5 and 2) make it exit 1 before it listens. Each run is capped in time and
address space, so a worker that sized its layers from the config fails the test instead of eating
the machine's memory."""

import json
import struct
import subprocess

import harness
from harness import STORIES

NEEDS_BINARIES = [harness.WORKER_BIN, harness.ASTR_BIN]
INT32_MAX = 2**31 - 1
RUN_TIMEOUT_S = 60


def copy_gguf_with_u32(src, dst, key, value):
    """Copies a GGUF file with the u32 value of `key` replaced. A GGUF key is stored as a u64
    length, its bytes, a u32 value type (4 = u32), then the value (GGUF spec)."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    name = key.encode()
    at = data.find(struct.pack("<Q", len(name)) + name)
    assert at >= 0, f"{key} not in {src}"
    at += 8 + len(name)
    assert struct.unpack_from("<I", data, at)[0] == 4, f"{key} is not a u32"
    struct.pack_into("<I", data, at + 4, value)
    with open(dst, "wb") as f:
        f.write(data)


def run_worker(model):
    # sh sets the address-space limit, then execs the worker (same pid, so the timeout kills it).
    argv = ["sh", "-c", 'ulimit -v 4000000; exec "$0" "$@"', harness.WORKER_BIN, "--model", model,
            "--listen", "127.0.0.1:0", "--backend", "cpu", "--threads", "1"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def test_gguf_block_count_past_the_layers_is_refused(tmp_path):
    model = str(tmp_path / "model.gguf")
    copy_gguf_with_u32(STORIES, model, "llama.block_count", INT32_MAX)
    r = run_worker(model)
    assert r.returncode == 1, r.stderr[-2000:]
    # stories260K holds blk.0 .. blk.4 (shared/models/README.md).
    assert "llama.block_count = 2147483647 but the weights hold 5 layers (blk.0 .. blk.4)" in r.stderr
    assert "listening on" not in r.stderr


def test_hf_num_hidden_layers_past_the_layers_is_refused(tmp_path):
    folder = tmp_path / "hf"
    subprocess.run([harness.ASTR_BIN, "make-model", "--format", "hf", "--arch", "llama",
                    "--layers", "2", "--out", str(folder)],
                   check=True, capture_output=True, timeout=RUN_TIMEOUT_S)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["num_hidden_layers"] = INT32_MAX
    config_path.write_text(json.dumps(config))
    r = run_worker(str(folder))
    assert r.returncode == 1, r.stderr[-2000:]
    assert ("config.json: num_hidden_layers = 2147483647 but the weights hold 2 layers "
            "(model.layers.0 .. model.layers.1)") in r.stderr
    assert "listening on" not in r.stderr
