"""Greedy output of block-quantized stories260K variants equals llama.cpp's.

The variants are written here with the `gguf` package (quant_variants.py); llama.cpp
(llama-server 4df29be, CPU, AVX2, temperature 0) ran once on the very same files, and its greedy
continuations of "Once upon a time" ([1, 403, 407, 261, 378]) are kept below as facts with the
files' sha256. Q4_0 and Q5_1 leave the F32 model's golden at token 24, so each type is checked
against its own. Q5_1 is compared up to token 16 only: llama.cpp's margin between its first two
choices there is 0.016 nats (0.008 at token 24), too thin to demand across CPUs. astr runs on its
AVX2 path (ASTR_CPU_ISA=avx2: the same bits on every CPU with AVX2), as test_chat_run.py says why;
these answers also held on the scalar path.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from quant_variants import write_variant

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ASTR_SHARED_DIR", ROOT.parent / "shared"))
BIN = Path(os.environ.get("ASTR_BIN_DIR", ROOT / "build" / "bin"))
STORIES = SHARED / "models/stories260K.gguf"
PROMPT = [1, 403, 407, 261, 378]

F32_GOLDEN = [432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410,
              408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394]
LLAMA_CPP = {
    "Q8_0": ("c516f01283cf88a40e4bb20c332a28732c7a044497c119780bb305296b086e41", F32_GOLDEN),
    "Q4_0": ("d36e921d848b19c206015724a8728182102cff1daada8384187b28149101feea",
             F32_GOLDEN[:23] + [262, 379, 426, 385, 328, 432, 358, 272, 277]),
    "Q4_1": ("9414582ed21fbad5050a4c92fe593152db619e30215469cf813c3347f2a3fd66", F32_GOLDEN),
    "Q5_0": ("51559667cfb5f00bfd95b9a337f27e9a72a00a6ee926683db804fef2c751620f", F32_GOLDEN),
    "Q5_1": ("dd5098e1add7db07d368e60e790d40e7ad8e7c8bf235bbfeb50ef2b37782f885",
             F32_GOLDEN[:16]),
}


@pytest.mark.parametrize("qtype", sorted(LLAMA_CPP))
def test_greedy_equals_llama_cpp(qtype, tmp_path):
    if not STORIES.exists():
        pytest.skip("shared stories260K.gguf missing")
    path = tmp_path / f"stories260K-{qtype}.gguf"
    write_variant(str(STORIES), str(path), qtype)
    digest, want = LLAMA_CPP[qtype]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, (
        "the gguf package wrote other bytes than the file llama.cpp's golden was taken on")
    inspect = subprocess.run([str(BIN / "astr"), "inspect", str(path)], capture_output=True,
                             text=True, check=True).stdout
    assert qtype in inspect  # the 2-D weights are stored quantized
    if "avx2" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("the goldens are checked on the AVX2 path")
    out = subprocess.run([str(BIN / "astr"), "run", "--model", str(path), "--prompt-ids",
                          ",".join(map(str, PROMPT)), "--max-tokens", str(len(want)), "--json"],
                         capture_output=True, check=False, env={**os.environ, "ASTR_CPU_ISA": "avx2"})
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert json.loads(out.stdout)["token_ids"] == want
