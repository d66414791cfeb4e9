#!/usr/bin/python3
"""Writes tests/engine/data/pretokenizer_tekken_gpt4o.json: reference splits
for hearth's hand-written `tekken` and `gpt-4o` pre-tokenizers.

How the data is made: the two Hugging Face pre-tokenizer regexes below (copied
from the models' tokenizer.json files, where they are a Split pre-tokenizer
with behavior "isolated") are run with the third-party `regex` module (Debian's
python3-regex; its \\p{..} classes and `(?i)` case folding are its own Unicode
implementation, independent of hearth's tables) over a corpus of tricky
strings (hand-written cases, then seeded random mixes of tricky characters).
A string's words are the matches and the unmatched text between
them, in order, which is what "isolated" splitting keeps.

Run it with Debian's Python (3.11, whose `unicodedata` is Unicode 14.0.0, the
version of engine/unicode_tables.cc):

    /usr/bin/python3 tests/support/make_pretokenizer_reference.py

The `regex` module may know a newer Unicode version than 14.0.0. So that the
reference never depends on a category that changed after 14.0.0, the script
checks every code point of the corpus: its general category from
`unicodedata` must be what the regex module's \\p{..} says, and its
White_Space property must agree too, or the script fails. The output records
both versions.
"""

import json
import os
import random
import sys
import unicodedata

import regex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "engine"))
# The White_Space list hearth's tables are generated from (a stdlib-only module).
from gen_unicode_tables import WHITESPACE  # noqa: E402

TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PATTERNS = {"tekken": TEKKEN, "gpt-4o": GPT4O}

# (name, text). Names are unique; the C++ test reports failures by name.
CORPUS = [
    # ASCII words, spaces and case.
    ("ascii_sentence", "Hello world, this is a test."),
    ("ascii_lower_run", "lowercase words only"),
    ("ascii_upper_run", "ALL CAPS SHOUTING"),
    ("single_upper", "A"),
    ("single_lower", "a"),
    ("camel_http", "HTTPServerError"),
    ("camel_iphone", "iPhone"),
    ("camel_mcdonalds", "McDonald's"),
    ("camel_lower_upper", "getHTTPResponseCode"),
    ("upper_then_lower", "ABc"),
    ("upper_pair", "AB"),
    ("snake_case", "snake_case_name __init__"),
    # Contractions, both cases, and lookalikes.
    ("contraction_dont", "don't"),
    ("contraction_im_upper", "I'M"),
    ("contraction_theyre_mixed", "they'RE"),
    ("contraction_all", "it's can't we're you've I'm we'll he'd"),
    ("contraction_all_upper", "IT'S CAN'T WE'RE YOU'VE I'M WE'LL HE'D"),
    ("contraction_mixed_case", "She'Ll They'Ve it'S"),
    ("contraction_then_letters", "they'REally don'tcha"),
    ("contraction_alone", "'s 't 're 've"),
    ("contraction_after_space", "rock 'n' roll"),
    ("contraction_after_digit", "1990's"),
    ("contraction_long_s", "it'\u017f"),  # U+017F folds to s under (?i)
    ("contraction_curly_quote", "don\u2019t"),
    ("contraction_double", "o'clock''s"),
    # Numbers.
    ("digits_run", "12345"),
    ("digits_pi", "3.14159"),
    ("digits_mixed", "abc123def 4567890"),
    ("digits_non_ascii", "\u0663\u0664\u0665\u0666 \u00bd\u2167"),
    ("digits_space", "in 2024, 10,000 people"),
    # Punctuation, line breaks and slashes.
    ("punct_slashes_newline", "foo//bar\n"),
    ("punct_crlf", "a, b;\r\n"),
    ("punct_newline_slash", "a;\n/b"),
    ("punct_url", "https://example.com/path?q=1&r=2"),
    ("punct_run", "!!! ??? ... ---"),
    ("punct_code", "if (x) { return y[0]; }\n"),
    ("punct_space_before", "a ,b . c"),
    ("punct_then_crcrlf", "end.\r\r\n\nnext"),
    ("punct_slash_newlines", "x/\n/\n/y"),
    ("punct_quote_word", "\"quoted\" 'single'"),
    # Whitespace.
    ("ws_tab", "\tindented\tline"),
    ("ws_multiple_spaces", "a    b"),
    ("ws_trailing", "trailing   "),
    ("ws_newlines", "\n\n\n"),
    ("ws_space_newline_space", " \n "),
    ("ws_leading_spaces", "   leading"),
    ("ws_mixed_breaks", "line1\n  line2\r\n\tline3"),
    ("ws_only_spaces", "     "),
    ("ws_nbsp", "a\u00a0b \u00a0c"),
    ("ws_nel", "a\u0085b"),
    ("ws_ideographic", "\u3000word"),
    ("ws_before_digits", "  42"),
    # Accented Latin and titlecase.
    ("latin_accents", "\u00c9lodie \u00c9COLE \u00e9cole"),
    ("latin_decomposed", "E\u0301cole e\u0301cole"),
    ("latin_eszett", "Stra\u00dfe STRASSE"),
    ("titlecase_dz", "\u01c5ungla \u01c4UNGLA \u01c6ungla"),
    ("titlecase_greek", "\u1f88\u03b9 \u1f88"),
    # Modifier letters.
    ("modifier_h", "k\u02b0at"),
    ("modifier_alone", "\u02b0\u02b0 x\u02b0"),
    ("modifier_after_upper", "A\u02b0B"),
    ("iteration_mark", "\u4eba\u3005"),
    # Other scripts.
    ("cjk", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"),
    ("cjk_with_ascii", "\u65e5\u672cJapan\u65e5\u672c"),
    ("cjk_punct", "\u4f60\u597d\uff0c\u4e16\u754c\u3002"),
    ("hangul", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8"),
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645"),
    ("arabic_harakat", "\u0643\u064e\u062a\u064e\u0628\u064e"),
    ("devanagari", "\u0939\u093f\u0928\u094d\u0926\u0940"),
    ("devanagari_sentence", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
    ("cyrillic", "\u041f\u0440\u0438\u0432\u0435\u0442 \u041c\u0418\u0420"),
    ("greek", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u039a\u039f\u03a3\u039c\u0395"),
    ("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35"),
    ("mixed_scripts", "English\u65e5\u672c\u0420\u0443\u0441\u0441\u043a\u0438\u0439"),
    # Standalone combining marks.
    ("mark_after_space", "a \u0301b"),
    ("mark_after_punct", "!\u0301x"),
    ("mark_at_start", "\u0301abc"),
    ("mark_before_upper_pair", "\u0301AB"),
    ("mark_alone", "\u0301"),
    ("mark_after_digit", "1\u0301 2\u0301a"),
    ("mark_after_space_upper", " \u0301AB"),
    ("mark_after_newline", "\n\u0301a"),
    ("marks_between_upper", "A\u0301B\u0301c"),
    ("mark_then_space", "x \u0301 y"),
    # Emoji and symbols.
    ("emoji", "I \u2764\ufe0f llamas \U0001f999\U0001f999!"),
    ("emoji_zwj", "\U0001f468\u200d\U0001f469\u200d\U0001f467 family"),
    ("emoji_before_word", "\U0001f600hello"),
    ("symbols", "$100 + 5% = \u20ac105 <tag> a|b ~c ^d `e`"),
    ("symbol_then_upper", "#HashTag @Mention"),
    # Mixed.
    ("mixed_everything", "Hi!\n\n  Caf\u00e9's 3 \u65e5\u672c\u8a9e\tTEST123abc\r\n"),
    ("markdown", "# Title\n\n- item one\n- item two\n"),
    ("json", "{\"key\": [1, 2, 3], \"x\": null}"),
    ("path", "/usr/local/bin/python3.11"),
    ("empty_like", " "),
]

# Pieces for the seeded random mixes appended to the corpus: one or more
# characters of every class the patterns tell apart (Lu Ll Lt Lm Lo, marks,
# numbers, punctuation and symbols, each kind of space and line break, the
# contraction letters and the apostrophe, the long s).
RANDOM_PIECES = [
    "A", "Z", "\u00c9", "\u0416", "a", "z", "\u00e9", "\u00df", "\u01c5", "\u1f88", "\u02b0",
    "\u3005", "\u65e5", "\ud55c", "\u0939", "\u0627", "\u0301", "\u093f", "\u064e", "\u20dd",
    "0", "7", "\u0663", "\u00bd", "\u2167", "!", ".", ",", "/", "_", "$", "+", "\U0001f999",
    "\ufe0f", "\u200d", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u0085", "\u3000",
    "'", "s", "S", "t", "T", "re", "RE", "ve", "m", "ll", "LL", "d", "\u017f", "'s", "'T", "'re",
    "'Ve", "'ll", "'D",
]
RANDOM_CASES = 300
RANDOM_SEED = 20241203


def random_corpus():
    rng = random.Random(RANDOM_SEED)
    out = []
    for i in range(RANDOM_CASES):
        n = rng.randint(1, 12)
        out.append((f"random_{i:03d}", "".join(rng.choice(RANDOM_PIECES) for _ in range(n))))
    return out


def check_categories(text):
    """Fails unless the regex module and Unicode 14.0.0 agree on every code
    point of `text` for every class the patterns use."""
    subcats = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No"]
    for ch in text:
        ucat = unicodedata.category(ch)
        for cat in subcats:
            if bool(regex.fullmatch(r"\p{%s}" % cat, ch)) != (ucat == cat):
                sys.exit(f"U+{ord(ch):04X}: unicodedata {unicodedata.unidata_version} says {ucat}, "
                         f"regex {regex.__version__} disagrees on \\p{{{cat}}}")
        white = any(a <= ord(ch) <= b for a, b in WHITESPACE)
        if bool(regex.fullmatch(r"\s", ch)) != white:
            sys.exit(f"U+{ord(ch):04X}: regex's \\s and White_Space disagree")
        if ucat == "Cn":
            sys.exit(f"U+{ord(ch):04X} is unassigned in Unicode {unicodedata.unidata_version}")


def split(pattern, text):
    words = []
    pos = 0
    for m in regex.finditer(pattern, text):
        assert m.end() > m.start(), "the patterns never match empty"
        if m.start() > pos:
            words.append(text[pos:m.start()])
        words.append(m.group())
        pos = m.end()
    if pos < len(text):
        words.append(text[pos:])
    assert "".join(words) == text
    return words


def main():
    corpus = CORPUS + random_corpus()
    names = [n for n, _ in corpus]
    assert len(names) == len(set(names)), "case names must be unique"
    cases = []
    for name, text in corpus:
        check_categories(text)
        case = {"name": name, "text": text}
        for pre, pattern in PATTERNS.items():
            case[pre] = split(pattern, text)
        cases.append(case)
    doc = {
        "generator": "tests/support/make_pretokenizer_reference.py",
        "regex_module": regex.__version__,
        "unicode_version": unicodedata.unidata_version,
        "patterns": PATTERNS,
        "cases": cases,
    }
    path = os.path.join(ROOT, "tests/engine/data/pretokenizer_tekken_gpt4o.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases, regex {regex.__version__}, "
          f"Unicode {unicodedata.unidata_version}")


if __name__ == "__main__":
    main()
