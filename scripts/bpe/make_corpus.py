#!/usr/bin/env python3
"""Assemble the tokenizer exactness corpus: crates/bpe/tests/data/corpus.jsonl, one JSON string per line.

Deterministic for a given Faker version and Python standard library (seeded; both are recorded in the first
document's comment of the golden file). Documents, each 1-4 KB:
  - Faker text, addresses and names in many locales (CJK, Thai, Devanagari, Arabic, Persian, Hebrew, Cyrillic,
    Greek, Latin with diacritics, Vietnamese, ...);
  - code: slices of the Python standard library, plus Rust / C / JSON written here;
  - adversarial text: emoji with ZWJ sequences and modifiers, combining marks (NFD, Zalgo), long whitespace runs
    of every kind, CRLF, digit runs, contractions in upper and lower case, special-token text and near misses,
    Unicode spaces, controls, random code points from many blocks.
Usage (the committed corpus was made with Faker 40.63.0 on Python 3.11):
  .venv/bin/pip install faker==40.63.0
  .venv/bin/python scripts/bpe/make_corpus.py crates/bpe/tests/data/corpus.jsonl
then regenerate the goldens (make_goldens.py), which record the corpus sha256.
"""

import argparse
import json
import os
import random
import sys
import sysconfig
import unicodedata

from faker import Faker

LOCALES = [
    "zh_CN", "zh_TW", "ja_JP", "ko_KR", "th_TH", "hi_IN", "ar_AA", "ar_SA", "fa_IR", "he_IL", "ru_RU", "uk_UA",
    "bg_BG", "el_GR", "fr_FR", "de_DE", "es_ES", "pt_BR", "it_IT", "pl_PL", "cs_CZ", "tr_TR", "vi_VN", "hu_HU",
    "ro_RO", "sv_SE", "da_DK", "fi_FI", "hr_HR", "sk_SK", "lv_LV", "lt_LT", "et_EE", "sl_SI", "en_US", "bn_BD",
    "ta_IN", "ne_NP", "hy_AM", "ka_GE", "az_AZ", "id_ID", "tl_PH",
]

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|box_end|>", "<|vision_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|repo_name|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<tts_pad>",
]
NEAR_MISSES = ["<|im_start", "im_end|>", "<|im_start |>", "< think>", "<think >", "<|endoftext||>", "<<|im_end|>>",
               "<|IM_START|>", "</think", "<|extra_0|>", "<|endof text|>"]

EMOJI = [
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "👍🏿", "❤️‍🔥", "🧑🏻‍🤝‍🧑🏾", "🇯🇵", "🇺🇸🇬🇧", "😀", "🙏🏼", "1️⃣", "#️⃣",
    "👁️‍🗨️", "🐈‍⬛", "🫠", "🤌🏽", "⚕️", "🧔‍♀️", "💁🏻‍♂️",
]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE", "'VE", "'M", "'LL",
                "'Ll", "'D", "’s", "’ll", "'x", "''s", "'", "'ſ"]
WORDS = ["don", "it", "they", "we", "I", "you", "she", "DON", "IT", "THEY", "He", "o", "rock", "n", "ma"]
SPACES = [" ", "\t", "\u00a0", "\u2003", "\u3000", "\u2009", "\u202f", "\u205f", "\u1680", "\u2028", "\u2029",
          "\u0085", "\u000b", "\u000c", "\u200b", "\ufeff", "\u180e"]
BLOCKS = [
    (0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
    (0x900, 0x97F), (0x980, 0x9FF), (0xB80, 0xBFF), (0xE00, 0xE7F), (0x10A0, 0x10FF), (0x1100, 0x11FF),
    (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF),
    (0x2500, 0x257F), (0x3000, 0x303F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF),
    (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0x1D400, 0x1D7FF), (0x20000, 0x2A6DF), (0x0, 0x1F),
]
CODE_RUST = r'''
/// Returns the sum of `xs`, or an error when it overflows.
pub fn checked_sum(xs: &[u64]) -> Result<u64, Error> {
    let mut acc: u64 = 0;
    for (i, &x) in xs.iter().enumerate() {
        acc = acc.checked_add(x).ok_or(Error::Overflow { index: i })?;
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sums() { assert_eq!(super::checked_sum(&[1, 2, 3]).unwrap(), 6); }
}
'''
CODE_C = r'''
#include <stdio.h>
static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int main(int argc, char **argv) {
	for (int i = 0; i < 40; ++i) {
		printf("%d: %d\r\n", i, fib(i));   /* CRLF on purpose */
	}
	return 0x7FFFFFFF & argc;
}
'''
CODE_JSON = '{"model": "qwen3moe", "layers": 48, "experts": [128, 8], "eps": 1e-06, "name": "Qwen3-30B-A3B",\n' \
            '  "nested": {"a": [1, 2, {"b": null}], "unicode": "caf\\u00e9 \u00e9t\u00e9 \u65e5\u672c"}}\n'


def faker_doc(rng, fk, target, native):
    parts = []
    n = 0
    while n < target:
        # Locales whose lorem is Latin placeholder text contribute names and addresses only.
        k = rng.random() if native else 0.55 + 0.35 * rng.random()
        if k < 0.55:
            s = fk.text(max_nb_chars=rng.choice([100, 200, 400]))
        elif k < 0.7:
            s = fk.address()
        elif k < 0.8:
            s = fk.name() + ", " + fk.job() if hasattr(fk, "job") else fk.name()
        elif k < 0.9:
            s = fk.sentence(nb_words=rng.randint(3, 15))
        else:
            s = fk.catch_phrase() if rng.random() < 0.5 else fk.company()
        parts.append(s)
        parts.append(rng.choice(["\n", "\n\n", " ", "\r\n", "  ", "\n\t"]))
        n += len(s.encode())
    return "".join(parts)


def stdlib_docs(rng, count, size):
    lib = sysconfig.get_paths()["stdlib"]
    names = ["json/decoder.py", "textwrap.py", "string.py", "heapq.py", "fractions.py", "difflib.py", "shlex.py",
             "csv.py", "calendar.py", "html/parser.py", "email/utils.py", "ipaddress.py", "statistics.py",
             "pprint.py", "base64.py", "gettext.py", "argparse.py", "enum.py", "dataclasses.py", "tokenize.py"]
    docs = []
    for i in range(count):
        path = os.path.join(lib, names[i % len(names)])
        with open(path, encoding="utf-8") as f:
            src = f.read()
        start = rng.randrange(0, max(1, len(src) - size))
        docs.append(src[start : start + size])
    return docs


def rand_block_char(rng):
    lo, hi = rng.choice(BLOCKS)
    while True:
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) not in ("Cs", "Cn"):
            return c


def adversarial_doc(rng, fake_words, target):
    out = []
    n = 0
    while n < target:
        k = rng.randrange(14)
        if k == 0:
            s = "".join(rng.choice(EMOJI) + rng.choice(["", " ", "", "\u200d", "x"]) for _ in range(rng.randint(1, 8)))
        elif k == 1:
            w = rng.choice(fake_words)
            s = unicodedata.normalize("NFD", w) + " " + "".join(
                c + "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(0, 4))) for c in w[:8]
            )
        elif k == 2:
            s = "".join(rng.choice(SPACES + ["\n", "\r\n", "\r", "  ", "    "]) for _ in range(rng.randint(1, 40)))
            s += rng.choice(["x", "", "1", ".", "\n", "é", "日"]) + " " * rng.randint(0, 300)
        elif k == 3:
            s = "line one\r\nline two\r\n\r\n  indented\r\n\tTAB\r\n" * rng.randint(1, 3)
        elif k == 4:
            s = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 60)))
            s += rng.choice([" ", ".", ",", "e-7", "%", "€", "٣٤٥", "१२३", "一二三", "Ⅻ", "½", "²"])
        elif k == 5:
            s = rng.choice(WORDS) + rng.choice(CONTRACTIONS) + rng.choice([" ", "", "s", "t ", "ve", "."])
        elif k == 6:
            s = rng.choice(["", " ", "x", "\n", "日本"]) + rng.choice(SPECIALS) + rng.choice(["", " ", "\n", "a"])
        elif k == 7:
            s = rng.choice(NEAR_MISSES) + rng.choice([" ", "", "\n"])
        elif k == 8:
            s = "".join(rand_block_char(rng) for _ in range(rng.randint(1, 30)))
        elif k == 9:
            s = rng.choice([CODE_RUST, CODE_C, CODE_JSON])
        elif k == 10:
            s = rng.choice(fake_words) + rng.choice([".", "!", "?!", "...", "——", "。", "、", "؟", "।", "-", "_"])
        elif k == 11:
            # scripts with combining marks that are letters' parts in Qwen3.5's pattern
            s = rng.choice(["नमस्ते दुनिया", "क्षत्रिय", "สวัสดีครับ", "ภาษาไทย", "שָׁלוֹם", "مَرْحَبًا", "ত্রিপুরা",
                            "தமிழ்நாடு", "ສະບາຍດີ", "ཀྲུང་ཧྭ", "e\u0301te\u0301", "n\u0303o", "Å\u030a", "a\u20dd",
                            "\u0301x", " \u0301", "\u0301\u0302", "1\u0301", "'\u0301s"])
        elif k == 12:
            s = rng.choice(["$", "@", "#", "(", "[[", "{{", "->", "=>", "::", "/*", "*/", "<>", "&&", "||"]) * rng.randint(1, 9)
            s += rng.choice(["\n", "\r\n\r\n", " ", "a", "1"])
        else:
            s = rng.choice(fake_words).upper() + "'" + rng.choice(["S", "LL", "VE", "D", "T", "M", "RE"]) + " "
        out.append(s)
        out.append(rng.choice(["", " ", "\n", " ", ""]))
        n += len(s.encode())
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--kb", type=int, default=600)
    args = ap.parse_args()
    rng = random.Random(20261129)
    docs = []
    words = []
    for i, loc in enumerate(LOCALES):
        fk = Faker(loc)
        fk.seed_instance(1000 + i)
        sample = fk.text(max_nb_chars=300)
        native = sum(ord(c) > 127 for c in sample) > len(sample) / 2 or loc == "vi_VN"
        for j in range(5 if native and not loc.startswith("en") else 2):
            d = faker_doc(rng, fk, rng.randint(1500, 4000), native)
            docs.append(d)
        words.extend(w for w in fk.words(40) if w.strip())
    docs.extend(stdlib_docs(rng, 30, 3000))
    while sum(len(d.encode()) for d in docs) < args.kb * 1024:
        docs.append(adversarial_doc(rng, words, rng.randint(1000, 3000)))
    rng.shuffle(docs)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    total = sum(len(d.encode()) for d in docs)
    print(f"{len(docs)} documents, {total} bytes of UTF-8 -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
