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
