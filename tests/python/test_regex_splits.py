"""astr's Regex (common/text/regex/regex.h) against Hugging Face `tokenizers` (Oniguruma) on real pre-tokenizer
patterns.

For every pattern below and a varied corpus (tests/python/corpus.py) the pieces of
`Split(Regex(pattern), "isolated").pre_tokenize_str(text)` are written, as UTF-8 byte offsets, to a
JSON file that the GoogleTest binary regex_reference_test (tests/common/regex_reference_test.cc)
checks astr's FindAll against; it prints the first mismatches of each pattern.
"""

import json
import os
import subprocess

from tokenizers import Regex, pre_tokenizers

from corpus import varied_corpus

BIN = os.environ.get("ASTR_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
CORPUS_SIZE = 6000
CORPUS_SEED = 1234

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
CONTRACTIONS_I = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
LLAMA3 = (CONTRACTIONS_I + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (CONTRACTIONS_I + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         + CONTRACTIONS_I + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
         r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + CONTRACTIONS_I + r"?|\p{N}{1,3}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek-LLM's cased-letter class. Written with escapes for the code points that have singleton
# canonical decompositions (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A): an NFC-normalized copy
# of the pattern turns e.g. the range U+1F5F-U+1F7D into U+1F5F-U+03CE, which Oniguruma rejects.
DEEPSEEK_LETTERS = (
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚ"
    "Ḁ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ"
    "\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲"
    "𐳀-𐳲𑢠-𑣟𞤀-𞥃]+")

PATTERNS = [
    GPT2,
    LLAMA3,
    QWEN2,
    GPT4O,
    # DeepSeek-LLM (one Split each).
    r"[\r\n]",
    DEEPSEEK_LETTERS,
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}+",
    # DeepSeek-Coder and others.
    r"[\p{P}\$\+<=>\^~\|]+",
    r"\p{N}{1,3}",
    r"\p{N}",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    r"[0-9][0-9][0-9]",
    # Tekken (Mistral), Falcon, BLOOM, and GPT-2 without its last alternative.
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"[\p{P}\$\+<=>\^~\|`]+",
    r" ?[^(\s|.,!?…。，、।۔،)]+",
    GPT2[: -len(r"|\s+")],
    # Engine features: lookaround, possessive and lazy forms, anchors, case folding.
    r"\s++|\S+?",
    r"\p{L}++\p{N}*+|\p{N}+?\p{L}|.",
    r"(?<=\s)\p{L}+|(?<!\p{L})\p{N}{2,}|\p{P}+(?=\s|$)",
    r"(?<=ab|c)\p{L}|\b\w+\b|\B",
    r"^\s*\p{L}+|\p{L}+$|\A.|.\z",
    r"(?i:the|hello|'S)|(?:\p{Lu}\p{Ll}+)+?|[^\s\p{L}]{2,4}?",
    r"(?>\s+|\p{L}+)\p{L}|(?:(?!\s).)+|\s",
]


def expected_ends(splitter, text):
    """UTF-8 byte offsets at which each piece `tokenizers` produces ends."""
    char_ends = [end for _, (_, end) in splitter.pre_tokenize_str(text)]
    byte_at = [0]
    for ch in text:
        byte_at.append(byte_at[-1] + len(ch.encode("utf-8")))
    return [byte_at[e] for e in char_ends]


def test_patterns_split_like_tokenizers(tmp_path):
    binary = os.path.join(BIN, "regex_reference_test")
    assert os.path.exists(binary), f"build the regex_reference_test target first ({binary})"
    texts = varied_corpus(CORPUS_SIZE, CORPUS_SEED)
    assert len(texts) >= 5000
    reference = {"texts": texts, "patterns": []}
    for pattern in PATTERNS:
        splitter = pre_tokenizers.Split(Regex(pattern), "isolated")
        reference["patterns"].append(
            {"pattern": pattern, "ends": [expected_ends(splitter, t) for t in texts]})
    path = tmp_path / "regex_reference.json"
    path.write_text(json.dumps(reference, ensure_ascii=False), encoding="utf-8")

    env = dict(os.environ, ASTR_REGEX_REFERENCE_FILE=str(path))
    proc = subprocess.run([binary], env=env, capture_output=True, text=True, check=False)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-20000:]
    checked = f"checked {len(PATTERNS) * len(texts)} (pattern, text) pairs, 0 mismatched"
    assert checked in report, report[-5000:]
    print(f"\n{len(PATTERNS)} patterns x {len(texts)} texts agree with tokenizers")

