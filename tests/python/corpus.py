"""A deterministic corpus of varied text for comparing astr's text processing with references.

`varied_corpus(n, seed)` returns n strings (the same ones for the same arguments, on any machine)
that cover what tokenizers meet and what breaks them: prose, code, numbers, whitespace runs of
every kind, many scripts, combining marks, emoji sequences, contractions, special-token
look-alikes, very long runs, random code points from every plane, and the empty string.
Everything is valid Unicode text (no lone surrogates), since Python strings are what the
references accept.
"""

import random

WORDS_EN = (
    "the of and to in is was that for on with as by at from his her they have this which one "
    "you had not but what all were when we there can an your who said each she do how their if "
    "will up other about out many then them these so some would make like him into time has look "
    "two more write go see number no way could people my than first water been call oil its now "
    "find long down day did get come made may part Hello World OpenAI Transformer tokenizer "
    "I John Mary NASA iPhone McDonald JavaScript don't won't it's I'm you're we've they'll she'd"
).split()

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M",
                "'LL", "'D", "'x", "\u2019s", "'", "''", "'ſ", "'K"]

MULTILINGUAL = [
    "你好，世界！这是一个测试。", "機械学習は楽しいです。カタカナとひらがな。", "東京タワー",
    "안녕하세요 세계! 한국어 텍스트입니다.", "مرحبا بالعالم، هذا اختبار.", "السَّلَامُ عَلَيْكُمْ",
    "नमस्ते दुनिया, यह एक परीक्षण है।", "हिन्दी में १२३ अंक", "Привет, мир! Это тест.",
    "Ёжик в тумане", "Γειά σου Κόσμε! Ελληνικά ΣΊΣΥΦΟΣ", "สวัสดีชาวโลก ภาษาไทย๑๒๓",
    "שלום עולם", "Xin chào thế giới, Tiếng Việt", "Zażółć gęślą jaźń", "Straße ẞ groß",
    "Ünïcödé façade naïve café", "ქართული ენა", "Հայերեն լեզու", "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "ꙮ ᚠᚢᚦᚨᚱᚲ",
    "𐐷𐐸𐐹 Deseret", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𝟙𝟚𝟛", "ǅemal ǈubljana ǋ", "İstanbul ıi", "ﬁne ﬂow ﬀ",
    "Ⅻ ⅻ ① ② ⑳ ½ ¾ ²³", "\u00b5 \u212b \u212a \u2126 \u1f7d", "ℌℍℎ",
    "e\u0301 a\u0300 o\u0308\u0304 n\u0303", "\u1100\u1161\u11a8",
]

EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵🇫🇷", "❤️", "✈️", "🧑🏿‍💻", "1️⃣", "#️⃣",
         "🤷‍♀️", "🫠", "👁‍🗨", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]

SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u2029", "\u2003",
          "\u202f", "\u205f", "\u1680", "\u0085", "\u000b", "\u000c", "\u200b", "\ufeff", " \n ",
          "\n\n", "\t\t", " \t\n\r "]

DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "๐๑๒๓",
          "߀߁߂", "𝟎𝟏𝟐", "²³¹", "Ⅳ", "三"]

NUMBERS = ["3.14159", "1,000,000", "2026-11-29", "-42", "+7", "0x1F", "1e-9", "100%", "$19.99",
           "€5", "12:30:45", "v1.2.3", "192.168.0.1", "1234567890123", "٣٫١٤", "１２３"]

SPECIAL = ["<|endoftext|>", "<s>", "</s>", "<|im_start|>user", "<|im_end|>", "<unk>", "[INST]",
           "[/INST]", "<|begin_of_text|>", "<|eot_id|>", "<pad>", "<mask>", "<0x0A>", "▁", "Ġ"]

URLS = ["https://example.com/path?q=1&r=two#frag", "http://localhost:8080/v1/chat/completions",
        "mailto:someone@example.org", "ftp://files.example.net/pub/file.tar.gz",
        "www.example.co.uk/index.html"]

CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    '{"name": "astr", "version": [1, 2, 3], "ok": true, "pi": 3.14}',
    "#include <vector>\nstd::vector<int> v{1, 2, 3};\n",
    "SELECT * FROM users WHERE id = 42;",
    "if (a && b || !c) { x->y = z::w(); }",
    "console.log(`template ${value}`);",
    "lambda x: x if x else None",
    "    indented()\n        more()\n",
    "x=1;y=2;z=x+y",
    "/* comment */ // line\n",
    "<div class=\"a\">Hi</div>",
    "$ ls -la | grep '.py' > out.txt 2>&1",
]

PUNCT = ["!!!", "???", "...", "--", "—", "–", "«»", "“quoted”", "‘single’", "()", "[]", "{}",
         "@#$%^&*", "!?", "…", "¿¡", "、。", "，", "《》", "『』", "•", "§¶", "©®™", "±×÷", "<>",
         "||", "~~", "``", "\\", "/", "_", "__init__", "=>", "->", ":::", ";;"]


def _random_codepoint(rng):
    """A code point from any plane, never a surrogate."""
    plane = rng.choice([0, 0, 0, 0, 1, 1, 2, 3, 14, 15, 16])
    while True:
        cp = plane * 0x10000 + rng.randrange(0x10000)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def _random_bmp_letterish(rng):
    ranges = [(0x41, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF),
              (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x300, 0x36F), (0x1F300, 0x1F64F),
              (0x2000, 0x206F), (0xFF00, 0xFFEF)]
    lo, hi = rng.choice(ranges)
    return chr(rng.randint(lo, hi))


def _fragment(rng):
    kind = rng.randrange(16)
    if kind == 0:
        return " ".join(rng.choice(WORDS_EN) for _ in range(rng.randint(1, 12)))
    if kind == 1:
        return rng.choice(WORDS_EN) + rng.choice(CONTRACTIONS)
    if kind == 2:
        return rng.choice(MULTILINGUAL)
    if kind == 3:
        return rng.choice(EMOJI) * rng.randint(1, 3)
    if kind == 4:
        return rng.choice(SPACES) * rng.randint(1, 4)
    if kind == 5:
        d = rng.choice(DIGITS)
        return "".join(rng.choice(d) for _ in range(rng.randint(1, 9)))
    if kind == 6:
        return rng.choice(NUMBERS)
    if kind == 7:
        return rng.choice(SPECIAL)
    if kind == 8:
        return rng.choice(URLS)
    if kind == 9:
        return rng.choice(CODE)
    if kind == 10:
        return rng.choice(PUNCT)
    if kind == 11:
        return "".join(_random_codepoint(rng) for _ in range(rng.randint(1, 6)))
    if kind == 12:
        return "".join(_random_bmp_letterish(rng) for _ in range(rng.randint(1, 10)))
    if kind == 13:
        return rng.choice(WORDS_EN).upper() + rng.choice(CONTRACTIONS).upper()
    if kind == 14:
        word = rng.choice(WORDS_EN)
        return word[0].upper() + word[1:] + rng.choice([".", ",", "!", "?", ":", ";", ""])
    return "".join(rng.choice(" \t\n\r'\"!?.,:;-_()[]{}<>/\\|@#$%^&*+=~`aZ09") for _ in
                   range(rng.randint(1, 8)))


def _composite(rng):
    """Several fragments joined by nothing, a space, or a random separator."""
    parts = [_fragment(rng) for _ in range(rng.randint(1, 6))]
    out = parts[0]
    for part in parts[1:]:
        out += rng.choice(["", " ", " ", " ", "\n", "  ", "\t", rng.choice(SPACES)]) + part
    if rng.random() < 0.15:
        out = rng.choice(SPACES) + out
    if rng.random() < 0.15:
        out = out + rng.choice(SPACES)
    return out


def _fixed_cases():
    """Hand-picked edge cases, always first in the corpus."""
    cases = ["", " ", "a", "A", "1", "'", "\n", "\t", "\r\n", "\u00a0", "\u3000", "😀", "é",
             "e\u0301", "中", "'s", "'S", "I'm", "DON'T", "they'RE", "x'll've", "don’t",
             " " * 300, "a" * 500, "!" * 400, "1" * 50, "\n" * 30, " \n" * 40, "\t" * 20,
             "ab" * 200, "a " * 200, "   leading", "trailing   ", "  both  ",
             "Hello world", " Hello world", "Hello  world", "Hello\nworld", "Hello \n world",
             "Hello,world!", "<|endoftext|>Hello<|endoftext|>", "<s>[INST] hi [/INST]</s>",
             "<|im_start|>user\nhi<|im_end|>", "3.14159 1,000,000 2026-11-29",
             "123456789", "١٢٣٤٥", "１２３４５", "ABCdef GHIjkl", "HTTPServer", "iPhone15Pro",
             "  \n\n  \n", "\r\n\r\n", "a\r\nb", "word   \n", "x\u2028y\u2029z", "\u0085",
             "👨‍👩‍👧‍👦👨‍👩‍👧‍👦", "🇺🇸🇬🇧", "ΣΊΣΥΦΟΣ", "ΌΣΟΣ σ", "a'b'c", "''''", "'''s", "'sss",
             "\u00a0\u00a0x", "x\u00a0", "\u3000\u3000中文\u3000", " 'll", "\t'd", "ǅ'S",
             "def main():\n\tprint('hi')\n", "https://example.com/a?b=c", "$$$", "a$", "a\n",
             "\n\na", " a", "a b c ", "  a\n  b\n"]
    return cases


def varied_corpus(n, seed=0):
    """Returns n varied strings, deterministic in (n, seed)."""
    rng = random.Random(seed)
    out = _fixed_cases()[:n]
    while len(out) < n:
        r = rng.random()
        if r < 0.05:
            s = rng.choice([" ", "a", "!", "\n", "1", "é", "\u3000"]) * rng.randint(50, 600)
        elif r < 0.10:
            s = _fragment(rng)
        else:
            s = _composite(rng)
        out.append(s)
    return out
