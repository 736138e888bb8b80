"""astr's tokenizer against Hugging Face `tokenizers` on every tokenizer.json in shared/tokenizers/hf.

For each tokenizer and a varied corpus (tests/python/corpus.py, >= 5,000 strings) the ids must be
identical with and without the post-processor's special tokens and with special-token parsing on and
off; decoding (skip_special on and off) must give the same text as `tokenizers`, also for random
id sequences; decode(encode(x)) == x wherever `tokenizers` itself round-trips; and streaming
detokenization must concatenate to the full decode with every chunk valid UTF-8.
"""

import json
import os
import random
import subprocess

import pytest
from tokenizers import Tokenizer

from corpus import varied_corpus

SHARED = os.environ.get("ASTR_SHARED_DIR", os.path.join(os.path.dirname(__file__), "../../../shared"))
BIN = os.environ.get("ASTR_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
HF = os.path.join(SHARED, "tokenizers", "hf")
NAMES = ["gpt2", "smollm2-135m-instruct", "tinyllama-1.1b-chat-v1.0", "mistral-7b-v0.1",
         "phi-3-mini-instruct"]
CORPUS_SIZE = 5000


def model_dir(name):
    path = os.path.join(HF, name)
    if not os.path.exists(os.path.join(path, "tokenizer.json")):
        pytest.skip(f"shared tokenizer missing: {path}")
    return path


def run_astr(args, tmp_path, lines):
    """Runs `astr <args> --jsonl FILE` over JSON lines and returns the parsed output lines."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    proc = subprocess.run([os.path.join(BIN, "astr"), *args, "--jsonl", str(src)],
                          capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    # Only "\n" ends a line: the output may hold U+2028 or U+0085 inside a JSON string.
    out = proc.stdout.decode("utf-8").split("\n")[:-1]
    assert len(out) == len(lines)
    return [json.loads(x) for x in out]


@pytest.fixture(scope="module")
def corpus():
    texts = varied_corpus(CORPUS_SIZE, seed=1234)
    assert len(texts) >= CORPUS_SIZE
    return texts


def first_mismatch(texts, want, got):
    for text, w, g in zip(texts, want, got):
        if w != g:
            return f"text={text!r}\nwant={w}\ngot ={g}"
    return None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("add_special", [True, False])
@pytest.mark.parametrize("parse_special", [True, False])
def test_encode_matches_tokenizers(name, add_special, parse_special, corpus, tmp_path):
    path = model_dir(name)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    tok.encode_special_tokens = not parse_special
    want = [e.ids for e in tok.encode_batch(corpus, add_special_tokens=add_special)]
    args = ["tokenize", "--model", path]
    if not add_special:
        args.append("--no-add-special")
    if parse_special:
        args.append("--parse-special")
    got = run_astr(args, tmp_path, corpus)
    bad = sum(w != g for w, g in zip(want, got))
    assert bad == 0, f"{bad}/{len(corpus)} strings differ; first:\n" + first_mismatch(corpus, want, got)


def long_texts(count, seed):
    """Texts of 10-40 KB: corpus strings joined by spaces and newlines, plus long runs. astr streams
    the pipeline and cuts long words where no merge can span; `tokenizers` holds the whole text."""
    parts = varied_corpus(count * 200, seed=seed)
    texts = []
    for k in range(count):
        chunk = parts[k * 200:(k + 1) * 200]
        texts.append("".join(p + (" " if i % 3 else "\n") for i, p in enumerate(chunk)))
    return texts + ["a" * 20000, "ab " * 7000, "\u2581" * 3000 + "x", "é" * 9000, "<s>" * 3000]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("parse_special", [True, False])
def test_long_texts_match_tokenizers(name, parse_special, tmp_path):
    path = model_dir(name)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    tok.encode_special_tokens = not parse_special
    texts = long_texts(8, seed=4321)
    want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    got = run_astr(["tokenize", "--model", path] + (["--parse-special"] if parse_special else []),
                   tmp_path, texts)
    bad = [i for i, (w, g) in enumerate(zip(want, got)) if w != g]
    assert not bad, f"{len(bad)}/{len(texts)} long texts differ; first: {len(texts[bad[0]])} characters"


def random_id_sequences(tok, count, seed):
    """Random ids, biased towards the tokens that make decoding interesting."""
    rng = random.Random(seed)
    vocab = tok.get_vocab(with_added_tokens=True)
    size = max(vocab.values()) + 1
    byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x") and t.endswith(">")]
    special = [i for i, t in tok.get_added_tokens_decoder().items() if t.special]
    space_ids = [i for t, i in vocab.items() if t in ("\u2581", "\u2581\u2581", "Ġ", "ĠĠ", "Ċ")]
    seqs = []
    for _ in range(count):
        n = rng.randint(0, 24)
        seq = []
        for _ in range(n):
            r = rng.random()
            if r < 0.3 and byte_ids:
                seq.append(rng.choice(byte_ids))
            elif r < 0.4 and special:
                seq.append(rng.choice(special))
            elif r < 0.5 and space_ids:
                seq.append(rng.choice(space_ids))
            else:
                seq.append(rng.randrange(size))
        seqs.append(seq)
    return seqs


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("skip_special", [True, False])
def test_decode_matches_tokenizers(name, skip_special, corpus, tmp_path):
    path = model_dir(name)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    seqs = [e.ids for e in tok.encode_batch(corpus[:2000])] + random_id_sequences(tok, 2000, 7)
    want = tok.decode_batch(seqs, skip_special_tokens=skip_special)
    args = ["detokenize", "--model", path] + ([] if skip_special else ["--keep-special"])
    got = run_astr(args, tmp_path, seqs)
    bad = [(s, w, g) for s, w, g in zip(seqs, want, got) if w != g]
    assert not bad, f"{len(bad)}/{len(seqs)} differ; first: ids={bad[0][0]}\nwant={bad[0][1]!r}\ngot ={bad[0][2]!r}"


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_where_tokenizers_is_lossless(name, corpus, tmp_path):
    path = model_dir(name)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    tok.encode_special_tokens = True
    ids = run_astr(["tokenize", "--model", path, "--no-add-special"], tmp_path, corpus)
    text = run_astr(["detokenize", "--model", path, "--keep-special"], tmp_path, ids)
    hf_text = tok.decode_batch([e.ids for e in tok.encode_batch(corpus, add_special_tokens=False)],
                               skip_special_tokens=False)
    lossless = [i for i, x in enumerate(corpus) if hf_text[i] == x]
    # Byte-level and byte-fallback tokenizers lose nothing on almost every string.
    assert len(lossless) >= 0.9 * len(corpus), f"tokenizers round-trips only {len(lossless)}"
    bad = [corpus[i] for i in lossless if text[i] != corpus[i]]
    assert not bad, f"{len(bad)} strings do not round-trip; first: {bad[0]!r}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("skip_special", [True, False])
def test_streaming_detokenizer(name, skip_special, corpus, tmp_path):
    path = model_dir(name)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    seqs = [e.ids for e in tok.encode_batch(corpus[:1000])] + random_id_sequences(tok, 2000, 11)
    keep = [] if skip_special else ["--keep-special"]
    full = run_astr(["detokenize", "--model", path, *keep], tmp_path, seqs)
    chunks = run_astr(["detokenize", "--model", path, "--stream", *keep], tmp_path, seqs)
    for ids, text, parts in zip(seqs, full, chunks):
        assert "".join(parts) == text, f"ids={ids}: chunks {parts!r} != {text!r}"
        for p in parts:
            # A chunk that ends inside a character would show up as U+FFFD at a chunk edge
            # that the full text does not have there.
            assert p.encode("utf-8", "strict").decode("utf-8") == p
    assert any(len(p) > 1 for p in chunks)


# ---------------------------------------------------------------------------------------------
# Pipelines of tokenizers we have no file for (Llama-3, Qwen2, ...) and the remaining components:
# tokenizer.json variants built from the shared files by swapping normalizer / pre-tokenizer /
# model options / added tokens, each compared with `tokenizers` loading the same JSON.

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def split(regex, behavior="Isolated", invert=False):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": invert}


def added(content, id_, special=True, **flags):
    token = {"id": id_, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": not special, "special": special}
    token.update(flags)
    return token


def variant_gpt2_llama3(j):
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(LLAMA3_REGEX), byte_level(False)]}
    j["model"]["ignore_merges"] = True
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<|endoftext|>": {
                               "id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}}}


def variant_gpt2_qwen2(j):
    j["normalizer"] = {"type": "NFC"}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(QWEN2_REGEX), byte_level(False)]}


def variant_gpt2_word_splitters(j):
    j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                                           {"type": "Strip", "strip_left": True,
                                                            "strip_right": False}]}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False},
        {"type": "Punctuation", "behavior": "Contiguous"},
        split(r"\s+", "MergedWithNext"),
        byte_level(True)]}


def variant_gpt2_whitespace(j):
    j["normalizer"] = {"type": "NFD"}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Whitespace"}, split(r"[aeiou]", "MergedWithPrevious"),
        split(r"x", "Removed", invert=True), byte_level(False)]}


def variant_gpt2_added_flags(j):
    j["added_tokens"] = [
        added("<|endoftext|>", 50256),
        added("<tool>", 50257, lstrip=True, rstrip=True),
        added("word", 50258, special=False, single_word=True),
        added("</tool>", 50259, rstrip=True),
        added("ing", 50260, special=False),
    ]


def variant_mistral_metaspace_split(j):
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                          "split": True}
    j["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                    "split": True}
    j["added_tokens"].append(added("[INST]", 3, special=True, lstrip=True))


def variant_tinyllama_no_fallback(j):
    j["model"]["byte_fallback"] = False
    j["model"]["fuse_unk"] = False
    j["normalizer"]["normalizers"].insert(0, {"type": "NFKD"})


VARIANTS = {
    "gpt2-as-llama3": ("gpt2", variant_gpt2_llama3),
    "gpt2-as-qwen2": ("gpt2", variant_gpt2_qwen2),
    "gpt2-word-splitters": ("gpt2", variant_gpt2_word_splitters),
    "gpt2-whitespace": ("gpt2", variant_gpt2_whitespace),
    "gpt2-added-flags": ("gpt2", variant_gpt2_added_flags),
    "mistral-metaspace-split": ("mistral-7b-v0.1", variant_mistral_metaspace_split),
    "tinyllama-unk": ("tinyllama-1.1b-chat-v1.0", variant_tinyllama_no_fallback),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pipeline_variants_match_tokenizers(variant, corpus, tmp_path):
    base, edit = VARIANTS[variant]
    with open(os.path.join(model_dir(base), "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    edit(j)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(j), encoding="utf-8")
    tok = Tokenizer.from_file(str(path))
    texts = corpus[:2000] + [
        "a <tool>  call </tool>  done", "word words sword word.", "<tool>x</tool>", " <tool> ",
        "singing ringing", "[INST] hi [/INST]", "  [INST]x", "ΑΣ ΣΟΦΟΣ Ὀδυσσεύς", "ﬁne ①②", "x",
    ]
    for parse_special in (True, False):
        tok.encode_special_tokens = not parse_special
        want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
        args = ["tokenize", "--model", str(path)] + (["--parse-special"] if parse_special else [])
        got = run_astr(args, tmp_path, texts)
        mismatch = first_mismatch(texts, want, got)
        assert mismatch is None, f"parse_special={parse_special}:\n{mismatch}"
    seqs = [e.ids for e in tok.encode_batch(texts[:500])] + random_id_sequences(tok, 500, 3)
    for skip in (True, False):
        want = tok.decode_batch(seqs, skip_special_tokens=skip)
        got = run_astr(["detokenize", "--model", str(path)] + ([] if skip else ["--keep-special"]),
                       tmp_path, seqs)
        bad = [(s, w, g) for s, w, g in zip(seqs, want, got) if w != g]
        assert not bad, f"skip={skip}: {len(bad)} differ; first ids={bad[0][0]}\nwant={bad[0][1]!r}\ngot ={bad[0][2]!r}"
