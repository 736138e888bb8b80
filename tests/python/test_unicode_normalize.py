"""astr's Unicode normalization and lowercasing (common/text/unicode/unicode.h) against Python.

Texts: the varied corpus (tests/python/corpus.py), every assigned code point in runs of 24, and
every combining mark after a few bases. Expected values, written to a JSON file that the GoogleTest
binary unicode_reference_test (tests/common/unicode_reference_test.cc) checks:
  * NFC / NFD / NFKC / NFKD from `unicodedata2` 16.0, the Unicode version of astr's tables (and of
    the Oniguruma inside `tokenizers`); Python 3.11's own `unicodedata` is 14.0.
  * ToLower from str.lower() and ToLowerChars from per-character str.lower(). Python's case data
    is its own Unicode version's, so texts holding code points assigned after it are not compared
    for these two.
"""

import json
import os
import subprocess
import unicodedata

import pytest

from corpus import varied_corpus

ud = pytest.importorskip("unicodedata2", reason="pip install unicodedata2==16.0.0")

BIN = os.environ.get("ASTR_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
CORPUS_SIZE = 6000
CORPUS_SEED = 99
RUN = 24


def codepoint_runs():
    """Every assigned, non-private-use code point, in runs of RUN consecutive ones."""
    cps = [cp for cp in range(0x110000)
           if not 0xD800 <= cp <= 0xDFFF and ud.category(chr(cp)) not in ("Cn", "Co")]
    return ["".join(chr(c) for c in cps[i:i + RUN]) for i in range(0, len(cps), RUN)]


def mark_sequences():
    """Each combining mark after bases that compose with many marks, and in pairs of classes."""
    marks = [chr(cp) for cp in range(0x110000)
             if not 0xD800 <= cp <= 0xDFFF and ud.combining(chr(cp)) != 0]
    out = []
    for i, m in enumerate(marks):
        base = "aeouAEOU\u03b1\u0391\u0430\u1100\u3046\u0915"[i % 14]
        out.append(base + m + marks[(i * 7) % len(marks)] + m)
    return out


def new_in_reference(text):
    """True if text holds a code point Python's own unicodedata does not know but unicodedata2 does."""
    return any(unicodedata.category(c) == "Cn" and ud.category(c) != "Cn" for c in text)


def test_normalize_and_lower_match_python(tmp_path):
    assert ud.unidata_version == "16.0.0", ud.unidata_version
    binary = os.path.join(BIN, "unicode_reference_test")
    assert os.path.exists(binary), f"build the unicode_reference_test target first ({binary})"
    texts = varied_corpus(CORPUS_SIZE, CORPUS_SEED) + codepoint_runs() + mark_sequences()
    reference = {"texts": texts}
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        reference[form.lower()] = [ud.normalize(form, t) for t in texts]
    comparable = [not new_in_reference(t) for t in texts]
    reference["lower"] = [t.lower() if ok else None for t, ok in zip(texts, comparable)]
    reference["lower_chars"] = ["".join(c.lower() for c in t) if ok else None
                                for t, ok in zip(texts, comparable)]
    path = tmp_path / "unicode_reference.json"
    path.write_text(json.dumps(reference, ensure_ascii=False), encoding="utf-8")

    env = dict(os.environ, ASTR_UNICODE_REFERENCE_FILE=str(path))
    proc = subprocess.run([binary], env=env, capture_output=True, text=True, check=False)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-20000:]
    assert ", 0 mismatched" in report, report[-5000:]
    print(f"\n{len(texts)} texts ({sum(comparable)} for lowercasing) agree with Python")
