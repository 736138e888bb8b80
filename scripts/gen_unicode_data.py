#!/usr/bin/env python3
"""Writes common/text/unicode/data.cc: the Unicode tables behind common/text/unicode/unicode.h.

Usage: python scripts/gen_unicode_data.py [OUTPUT]   (default: common/text/unicode/data.cc)

The output is deterministic (same inputs, same bytes) and is committed; run this again only to move
to another Unicode version.

Unicode version: 16.0, from the pinned `unicodedata2==16.0.0` package. It is pinned because the
reference the tokenizer must match -- Hugging Face `tokenizers` 0.23.3, whose Regex patterns run on
Oniguruma 6.9.10 -- classifies code points by Unicode 16.0 (checked: every \\p{..} general-category
class agrees with unicodedata2 16.0.0 on all 0x110000 code points), while Python 3.11's own
`unicodedata` is 14.0 and misclassifies the ~10,000 code points assigned since.

Python has no API for case mappings of another Unicode version, so the case tables (regex case
folding, lowercase, cased/case-ignorable for the final-sigma rule) come from this interpreter's
`str` methods (Python 3.11: Unicode 14.0), plus the upper/lower pairs that Unicode 15.0/16.0 added,
found by name ("X CAPITAL LETTER Y" <-> "X SMALL LETTER Y") among the code points this
interpreter does not know. The tests compare against the same sources.

Property definitions that Python does not expose directly:
  White_Space = Zs + Zl + Zp + U+0009..U+000D + U+0085 (the derivation in PropList.txt's header
    comment; it is also exactly what Oniguruma's \\s and Rust's char::is_whitespace accept).
  Oniguruma's \\w = L + M + Nd + Pc + Nl + the extra code points in WORD_EXTRA below (found by
    comparing Oniguruma's \\w with the categories over all code points); outside brackets (and for
    \\b) it also accepts WORD_EXTRA_OUTSIDE_CLASS, inside brackets ([\\w]) it does not.
"""

import sys
import unicodedata

try:
    import unicodedata2 as ud
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("gen_unicode_data.py needs `pip install unicodedata2==16.0.0` (see the docstring)")

EXPECTED_UNICODE = "16.0.0"
MAX_CP = 0x110000

# Order of astr::unicode::Category in common/text/unicode/unicode.h.
CATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
              "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs",
              "Co", "Cn"]
CAT_INDEX = {name: i for i, name in enumerate(CATEGORIES)}

WHITE_SPACE_EXTRA = [(0x09, 0x0D), (0x85, 0x85)]
# Code points in Oniguruma's \w beyond L M Nd Pc Nl: the circled/parenthesized/squared Latin
# letters (Other_Alphabetic symbols); outside brackets also the superscript digits and vulgar
# fractions of Latin-1 (its single-byte fast path classifies them as word characters).
WORD_EXTRA = [(0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189)]
WORD_EXTRA_OUTSIDE_CLASS = [(0xB2, 0xB3), (0xB9, 0xB9), (0xBC, 0xBE)]

HANGUL_S_BASE, HANGUL_S_COUNT = 0xAC00, 11172


def is_surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


def category(cp):
    if is_surrogate(cp):
        return "Cs"
    return ud.category(chr(cp))


def two_level(values, block_bits):
    """Splits a per-code-point list into (stage1 block index per block, deduplicated blocks)."""
    size = 1 << block_bits
    blocks, index, stage1 = [], {}, []
    for start in range(0, MAX_CP, size):
        block = tuple(values[start:start + size])
        if block not in index:
            index[block] = len(blocks)
            blocks.append(block)
        stage1.append(index[block])
    return stage1, blocks


def new_case_pairs():
    """(capital, small) pairs among code points this interpreter's Unicode does not have."""
    pairs = []
    for cp in range(MAX_CP):
        if is_surrogate(cp) or unicodedata.category(chr(cp)) != "Cn":
            continue
        if category(cp) != "Lu":
            continue
        name = ud.name(chr(cp), "")
        if " CAPITAL LETTER " not in name:
            continue
        try:
            small = ord(ud.lookup(name.replace(" CAPITAL LETTER ", " SMALL LETTER ")))
        except KeyError:
            continue
        pairs.append((cp, small))
    return pairs


def case_tables():
    """Returns (simple case fold map, full lowercase map, case kinds), keyed by code point."""
    fold, lower, kind = {}, {}, {}
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        c = chr(cp)
        f = c.casefold()
        if len(f) != 1:  # a full (multi-char) fold; the simple fold is the one-char lowercase
            f = c.lower() if len(c.lower()) == 1 else c
        if f != c:
            fold[cp] = ord(f)
        if c.lower() != c:
            lower[cp] = [ord(x) for x in c.lower()]
        # Final-sigma context classes, probed through str.lower's own rule (see unicode.cc).
        if (c + "\u03a3").lower()[-1] == "\u03c2":
            kind[cp] = 1  # cased
        elif ("A" + c + "\u03a3").lower()[-1] == "\u03c2":
            kind[cp] = 2  # case-ignorable
    for capital, small in new_case_pairs():
        fold[capital] = small
        lower[capital] = [small]
    for cp in range(MAX_CP):
        if is_surrogate(cp) or unicodedata.category(chr(cp)) != "Cn" or cp in kind:
            continue
        cat = category(cp)
        if cat in ("Lu", "Ll", "Lt"):
            kind[cp] = 1
        elif cat in ("Mn", "Me", "Cf", "Lm", "Sk"):
            kind[cp] = 2
    return fold, lower, kind


def normalization_tables():
    """Full canonical / compatibility decompositions, combining classes and composition pairs."""
    canon, compat, ccc, compose = {}, {}, [0] * MAX_CP, {}
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        c = chr(cp)
        ccc[cp] = ud.combining(c)
        if HANGUL_S_BASE <= cp < HANGUL_S_BASE + HANGUL_S_COUNT:
            continue  # algorithmic
        nfd = ud.normalize("NFD", c)
        nfkd = ud.normalize("NFKD", c)
        if nfd != c:
            canon[cp] = [ord(x) for x in nfd]
        if nfkd != nfd:
            compat[cp] = [ord(x) for x in nfkd]
        decomp = ud.decomposition(c)
        if decomp and not decomp.startswith("<"):
            parts = [int(x, 16) for x in decomp.split()]
            # A primary composite: a two-code-point canonical mapping that NFC recomposes.
            if len(parts) == 2 and ud.normalize("NFC", chr(parts[0]) + chr(parts[1])) == c:
                compose[(parts[0], parts[1])] = cp
    return canon, compat, ccc, compose


def ranges_of(predicate):
    out = []
    for cp in range(MAX_CP):
        if predicate(cp):
            if out and out[-1][1] == cp - 1:
                out[-1][1] = cp
            else:
                out.append([cp, cp])
    return out


class Writer:
    def __init__(self):
        self.lines = []

    def line(self, text=""):
        self.lines.append(text)

    def array(self, ctype, name, values, per_line, fmt="{}", comment=None):
        if comment:
            self.line(f"// {comment}")
        self.line(f"extern const {ctype} {name}[{len(values)}] = {{")
        for i in range(0, len(values), per_line):
            self.line("    " + ", ".join(fmt.format(v) for v in values[i:i + per_line]) + ",")
        self.line("};")
        self.line(f"extern const size_t {name}Size = {len(values)};")
        self.line()


def write_two_level(w, values, block_bits, name, ctype, per_line, comment):
    stage1, blocks = two_level(values, block_bits)
    assert len(blocks) <= 256, "stage 1 entries are uint8_t"
    w.array("uint8_t", f"{name}Stage1", stage1, 19, comment=f"{comment}: block of cp >> "
            f"{block_bits}")
    flat = [v for block in blocks for v in block]
    w.array(ctype, f"{name}Stage2", flat, per_line, comment=f"{comment}: {len(blocks)} blocks")


def write_decompositions(w, name, table):
    """Sorted code points, with offset/length into one pool of code points."""
    keys = sorted(table)
    pool, index = [], []
    for cp in keys:
        index.append((cp, len(pool), len(table[cp])))
        pool.extend(table[cp])
    w.array("uint32_t", f"{name}Keys", keys, 10, fmt="0x{:05X}")
    # offset << 5 | length: lengths are at most 18 (U+FDFA).
    assert max(n for _, _, n in index) < 32
    w.array("uint32_t", f"{name}Spans", [(off << 5) | n for _, off, n in index], 10, fmt="0x{:05X}")
    w.array("uint32_t", f"{name}Pool", pool, 10, fmt="0x{:05X}")


def main():
    if ud.unidata_version != EXPECTED_UNICODE:
        sys.exit(f"unicodedata2 is Unicode {ud.unidata_version}, expected {EXPECTED_UNICODE}")
    out_path = sys.argv[1] if len(sys.argv) > 1 else "common/text/unicode/data.cc"
    cats = [CAT_INDEX[category(cp)] for cp in range(MAX_CP)]
    fold, lower, kind = case_tables()
    canon, compat, ccc, compose = normalization_tables()
    white = ranges_of(lambda cp: category(cp) in ("Zs", "Zl", "Zp") or
                      any(lo <= cp <= hi for lo, hi in WHITE_SPACE_EXTRA))

    w = Writer()
    w.line("// Generated by scripts/gen_unicode_data.py. Do not edit.")
    w.line(f"// Unicode {ud.unidata_version} (unicodedata2); case data from Python "
           f"{sys.version_info.major}.{sys.version_info.minor} (see the script).")
    w.line("// clang-format off")
    w.line('#include "common/text/unicode/data.h"')
    w.line()
    w.line("namespace astr::unicode::internal {")
    w.line()
    w.line(f'extern const char kUnicodeVersion[] = "{ud.unidata_version}";')
    w.line()
    write_two_level(w, cats, 8, "kCategory", "uint8_t", 24, "General_Category")
    w.array("uint32_t", "kWhiteSpaceRanges", [v for r in white for v in r], 8, fmt="0x{:05X}",
            comment="White_Space as inclusive [lo, hi] pairs")
    w.array("uint32_t", "kWordExtraRanges", [v for r in WORD_EXTRA for v in r], 8,
            fmt="0x{:05X}", comment="Oniguruma's \\w beyond L M Nd Pc Nl, as [lo, hi] pairs")
    w.array("uint32_t", "kWordExtraOutsideClassRanges",
            [v for r in WORD_EXTRA_OUTSIDE_CLASS for v in r], 8, fmt="0x{:05X}",
            comment="...and in \\w outside brackets (and \\b) only")
    fold_keys = sorted(fold)
    w.array("uint32_t", "kFoldKeys", fold_keys, 10, fmt="0x{:05X}",
            comment="Simple case folding: code point -> folded code point")
    w.array("uint32_t", "kFoldValues", [fold[k] for k in fold_keys], 10, fmt="0x{:05X}")
    write_decompositions(w, "kLower", lower)
    kind_ranges = []
    for cp in range(MAX_CP):
        k = kind.get(cp, 0)
        if kind_ranges and kind_ranges[-1][2] == k and kind_ranges[-1][1] == cp - 1:
            kind_ranges[-1][1] = cp
        else:
            kind_ranges.append([cp, cp, k])
    kind_ranges = [r for r in kind_ranges if r[2]]
    w.array("uint32_t", "kCaseKindRanges", [v for r in kind_ranges for v in r], 9, fmt="0x{:05X}",
            comment="[lo, hi, kind] with kind 1 = Cased, 2 = Case_Ignorable (final-sigma rule)")
    write_two_level(w, ccc, 8, "kCombiningClass", "uint8_t", 19, "Canonical_Combining_Class")
    write_decompositions(w, "kCanonical", canon)
    write_decompositions(w, "kCompat", compat)
    pairs = sorted(compose)
    w.array("uint64_t", "kComposePairs", [(a << 21) | b for a, b in pairs], 6, fmt="0x{:011X}",
            comment="Primary composites: (first << 21 | second), sorted")
    w.array("uint32_t", "kComposeResults", [compose[p] for p in pairs], 10, fmt="0x{:05X}")
    w.line("}  // namespace astr::unicode::internal")
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(w.lines) + "\n")


if __name__ == "__main__":
    main()
