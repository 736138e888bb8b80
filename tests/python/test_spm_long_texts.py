"""astr's SentencePiece (GGUF "llama") encoding of long texts against an independent Python
implementation of llama.cpp's SPM tokenizer (llm_tokenizer_spm) that merges each text whole.

astr merges a long text in chunks, cut where two bytes are adjacent in no vocabulary piece (no
merge can span such a cut); this checks that the chunks give exactly the ids of the whole-text
merge, on texts of tens of kilobytes. The reference itself is first checked against llama.cpp's
own test vectors (NAME.gguf.inp / .out).
"""

import heapq
import json
import os
import subprocess

import gguf
import pytest

from corpus import varied_corpus

SHARED = os.environ.get("ASTR_SHARED_DIR", os.path.join(os.path.dirname(__file__), "../../../shared"))
BIN = os.environ.get("ASTR_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
MODELS = {
    "llama-spm": os.path.join(SHARED, "tokenizers", "gguf", "ggml-vocab-llama-spm.gguf"),
    "stories260K": os.path.join(SHARED, "models", "stories260K.gguf"),
}
SPACE = "\u2581"


class ReferenceSpm:
    """llama.cpp's SPM: U+2581 for spaces (and a prefix), one symbol per UTF-8 character, merge the
    adjacent pair whose concatenation is a piece with the highest score (leftmost on ties), then
    pieces to ids and other symbols to <0xXX> byte tokens (or unk)."""

    def __init__(self, path):
        reader = gguf.GGUFReader(path)

        def array(key):
            f = reader.fields[key]
            return [f.parts[i] for i in f.data]

        self.pieces = [bytes(p) for p in array("tokenizer.ggml.tokens")]
        self.scores = [float(p[0]) for p in array("tokenizer.ggml.scores")]
        self.ids = {}
        for i, p in enumerate(self.pieces):
            self.ids[p] = i  # a duplicated piece maps to its last id
        unk = reader.fields.get("tokenizer.ggml.unknown_token_id")
        self.unk = int(unk.parts[unk.data[0]][0]) if unk else -1
        prefix = reader.fields.get("tokenizer.ggml.add_space_prefix")
        self.add_prefix = bool(prefix.parts[prefix.data[0]][0]) if prefix else True

    @staticmethod
    def _char_len(lead):
        """llama.cpp's utf8_len: from the lead byte; a stray continuation byte counts as 1."""
        return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]

    def encode(self, text):
        if not text:
            return []
        data = ((SPACE if self.add_prefix else "") + text.replace(" ", SPACE)).encode("utf-8")
        starts, lens = [], []
        i = 0
        while i < len(data):
            n = min(self._char_len(data[i]), len(data) - i)
            starts.append(i)
            lens.append(n)
            i += n
        count = len(starts)
        prev = list(range(-1, count - 1))
        nxt = list(range(1, count)) + [-1]
        heap = []

        def push(left, right):
            if left < 0 or right < 0:
                return
            joined = data[starts[left]:starts[left] + lens[left] + lens[right]]
            pid = self.ids.get(joined)
            if pid is not None:
                heapq.heappush(heap, (-self.scores[pid], left, right, len(joined)))

        for k in range(1, count):
            push(k - 1, k)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if lens[left] == 0 or lens[right] == 0 or lens[left] + lens[right] != size:
                continue
            lens[left] += lens[right]
            lens[right] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])
        out = []
        k = 0
        while k != -1:
            piece = data[starts[k]:starts[k] + lens[k]]
            pid = self.ids.get(piece)
            if pid is not None:
                out.append(pid)
            else:
                for b in piece:
                    byte_id = self.ids.get(b"<0x%02X>" % b, self.ids.get(bytes([b]), self.unk))
                    if byte_id >= 0:
                        out.append(byte_id)
            k = nxt[k]
        return out


def astr_tokenize(path, texts, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    argv = [os.path.join(BIN, "astr"), "tokenize", "--model", path, "--no-add-special", "--jsonl",
            str(src)]
    proc = subprocess.run(argv, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return [json.loads(x) for x in proc.stdout.decode("utf-8").split("\n")[:-1]]


def long_texts(count, seed):
    """Texts of 10-40 KB: varied corpus strings joined by spaces and newlines."""
    parts = varied_corpus(count * 200, seed=seed)
    texts = []
    for k in range(count):
        chunk = parts[k * 200:(k + 1) * 200]
        texts.append("".join(p + (" " if i % 3 else "\n") for i, p in enumerate(chunk)))
    return texts


def first_difference(a, b):
    return next(i for i, (x, y) in enumerate(zip(a + [None], b + [None])) if x != y)


def test_reference_matches_llama_cpp_vectors():
    path = MODELS["llama-spm"]
    if not os.path.exists(path + ".inp"):
        pytest.skip(f"missing {path}.inp")
    ref = ReferenceSpm(path)
    inputs = open(path + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    outputs = open(path + ".out", encoding="utf-8").read().split("\n")
    checked = 0
    for text, want in zip(inputs, outputs):
        assert ref.encode(text) == [int(x) for x in want.split()], text
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("name", sorted(MODELS))
def test_long_texts_match_the_whole_text_merge(name, tmp_path):
    path = MODELS[name]
    if not os.path.exists(path):
        pytest.skip(f"missing {path}")
    ref = ReferenceSpm(path)
    texts = long_texts(12, seed=99) + ["a" * 30000, "\u2581" * 5000 + "x", "ab " * 8000]
    got = astr_tokenize(path, texts, tmp_path)
    for text, ids in zip(texts, got):
        want = ref.encode(text)
        assert ids == want, f"{len(text)} chars, first difference at id {first_difference(ids, want)}"
