//! Pre-tokenizers: the split of text into pieces that BPE then encodes one by one.
//!
//! Each variant is a hand-written matcher for one regex (the pattern of the model's `tokenizer.json`, which
//! tiktoken and Hugging Face tokenizers run, and which llama.cpp's `llama-vocab.cpp` carries for
//! `LLAMA_VOCAB_PRE_TYPE_QWEN2` / `QWEN35`). It follows the regex's leftmost-first alternation and
//! backtracking step by step (see [`Pieces`]) and is checked against `fancy-regex` on the test corpus and by
//! proptest (`tests/pretokenizer.rs`); `PreTokenizer::split_regex` (feature `regex-reference`) runs the regex
//! itself.

use crate::unicode::{ClassTable, LETTER, MARK, NUMBER, SPACE, classes};
use crate::{Error, Result};

/// The pre-tokenizers this crate implements, named as in GGUF `tokenizer.ggml.pre`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PreTokenizer {
    /// `qwen2`: Qwen2, Qwen2.5, Qwen3 (cl100k-like, digits one by one).
    Qwen2,
    /// `qwen35`: Qwen3.5 and 3.6; like `qwen2` but combining marks (`\p{M}`) belong to words.
    Qwen35,
}

const QWEN2_PATTERN: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|",
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
);
const QWEN35_PATTERN: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|",
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
);

impl PreTokenizer {
    /// The pre-tokenizer a GGUF `tokenizer.ggml.pre` value names.
    ///
    /// # Errors
    /// [`Error::UnsupportedPreTokenizer`] for any name but `qwen2` and `qwen35`: another pre-tokenizer is
    /// never silently used instead.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "qwen2" => Ok(Self::Qwen2),
            "qwen35" => Ok(Self::Qwen35),
            _ => Err(Error::UnsupportedPreTokenizer { pre: name.to_owned() }),
        }
    }

    /// The GGUF `tokenizer.ggml.pre` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen2 => "qwen2",
            Self::Qwen35 => "qwen35",
        }
    }

    /// The split regex, as written in the model's `tokenizer.json` (llama.cpp spells the case-insensitive
    /// contractions `'[sS]|…`, which differs only for `'ſ`: this crate follows the tokenizer.json form).
    pub fn pattern(self) -> &'static str {
        match self {
            Self::Qwen2 => QWEN2_PATTERN,
            Self::Qwen35 => QWEN35_PATTERN,
        }
    }

    /// Splits `text` into pieces; concatenated they give `text` back.
    pub fn split(self, text: &str) -> Pieces<'_> {
        let (word, not_punct) = match self {
            Self::Qwen2 => (LETTER, SPACE | LETTER | NUMBER),
            Self::Qwen35 => (LETTER | MARK, SPACE | LETTER | NUMBER | MARK),
        };
        Pieces { text, pos: 0, word, not_punct, table: classes() }
    }

    /// Splits `text` with the regex itself (`fancy-regex`, feature `regex-reference`): the reference the
    /// hand-written matcher is tested against, about ten times slower.
    ///
    /// # Panics
    /// If `fancy-regex` gives up on its backtracking limit (whitespace runs of about a million characters).
    #[cfg(feature = "regex-reference")]
    pub fn split_regex(self, text: &str) -> Vec<&str> {
        static REGEXES: std::sync::OnceLock<[fancy_regex::Regex; 2]> = std::sync::OnceLock::new();
        let regexes = REGEXES.get_or_init(|| {
            [QWEN2_PATTERN, QWEN35_PATTERN].map(|p| fancy_regex::Regex::new(p).expect("a valid pattern"))
        });
        let re = &regexes[self as usize];
        re.find_iter(text)
            .map(|m| m.expect("no backtrack limit is reached by this pattern").as_str())
            .collect()
    }
}

/// Iterator over the pieces of a text; see [`PreTokenizer::split`].
///
/// At each position the first alternative of the pattern that matches wins (leftmost-first, as in tiktoken's
/// `fancy-regex` and Hugging Face's Oniguruma). Every character starts some alternative, so pieces are
/// contiguous. Alternatives, in order (Qwen3.5 adds `\p{M}` to the letter class and removes it from the
/// punctuation class):
/// 1. `(?i:'s|'t|'re|'ve|'m|'ll|'d)` (case folding also makes `'ſ` a contraction);
/// 2. `[^\r\n\p{L}\p{N}]?\p{L}+`: an optional non-letter, non-number, non-newline, then a run of letters;
/// 3. `\p{N}`: one number character;
/// 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`: optional space, a run of punctuation, trailing newlines;
/// 5. `\s*[\r\n]+`: whitespace up to and including the last `\r`/`\n` of the whitespace run;
/// 6. `\s+(?!\S)`: a whitespace run, less its last character when a non-space follows;
/// 7. `\s+`: a single whitespace character before a non-space.
#[derive(Clone, Debug)]
pub struct Pieces<'a> {
    text: &'a str,
    pos: usize,
    word: u8,
    not_punct: u8,
    table: &'static ClassTable,
}

/// Decodes the character at `p` of valid UTF-8: (code point, length).
#[inline(always)]
fn decode(s: &[u8], p: usize) -> (u32, usize) {
    let b0 = s[p] as u32;
    if b0 < 0x80 {
        (b0, 1)
    } else if b0 < 0xE0 {
        (((b0 & 0x1F) << 6) | (s[p + 1] as u32 & 0x3F), 2)
    } else if b0 < 0xF0 {
        (((b0 & 0x0F) << 12) | ((s[p + 1] as u32 & 0x3F) << 6) | (s[p + 2] as u32 & 0x3F), 3)
    } else {
        let c = ((b0 & 0x07) << 18)
            | ((s[p + 1] as u32 & 0x3F) << 12)
            | ((s[p + 2] as u32 & 0x3F) << 6)
            | (s[p + 3] as u32 & 0x3F);
        (c, 4)
    }
}

/// Length of the contraction after an apostrophe: `s|t|re|ve|m|ll|d`, any case (ASCII case, and `ſ` U+017F,
/// which simple case folding equates with `s`).
#[inline]
fn contraction(s: &[u8]) -> Option<usize> {
    let lower = |i: usize| s.get(i).map(|b| b | 0x20);
    match lower(0)? {
        b's' | b't' | b'm' | b'd' => Some(1),
        b'r' | b'v' if lower(1) == Some(b'e') => Some(2),
        b'l' if lower(1) == Some(b'l') => Some(2),
        _ if s.starts_with("ſ".as_bytes()) => Some(2),
        _ => None,
    }
}

impl<'a> Pieces<'a> {
    #[inline(always)]
    fn class(&self, c: u32) -> u8 {
        self.table.class(c)
    }

    /// End of the run of characters whose class meets `mask`, from `p`.
    #[inline(always)]
    fn run(&self, s: &[u8], mut p: usize, mask: u8) -> usize {
        while p < s.len() {
            let (c, l) = decode(s, p);
            if self.class(c) & mask == 0 {
                break;
            }
            p += l;
        }
        p
    }

    /// End of the run of characters whose class misses `mask`, from `p`.
    #[inline(always)]
    fn run_not(&self, s: &[u8], mut p: usize, mask: u8) -> usize {
        while p < s.len() {
            let (c, l) = decode(s, p);
            if self.class(c) & mask != 0 {
                break;
            }
            p += l;
        }
        p
    }

    /// End of the piece that starts at `p < s.len()`.
    #[inline]
    fn piece_end(&self, s: &[u8], p: usize) -> usize {
        let n = s.len();
        let (c0, l0) = decode(s, p);
        let k0 = self.class(c0);
        let q = p + l0;
        // 1. contractions
        if c0 == u32::from(b'\'')
            && let Some(len) = contraction(&s[q..])
        {
            return q + len;
        }
        // 2. optional prefix, then a word
        if k0 & self.word != 0 {
            return self.run(s, q, self.word);
        }
        if k0 & (LETTER | NUMBER) == 0 && c0 != u32::from(b'\r') && c0 != u32::from(b'\n') && q < n {
            let (c1, l1) = decode(s, q);
            if self.class(c1) & self.word != 0 {
                return self.run(s, q + l1, self.word);
            }
        }
        // 3. one number
        if k0 & NUMBER != 0 {
            return q;
        }
        // 4. optional space, punctuation, newlines
        let start = if c0 == u32::from(b' ') { q } else { p };
        if start < n {
            let (c, l) = decode(s, start);
            if self.class(c) & self.not_punct == 0 {
                let mut e = self.run_not(s, start + l, self.not_punct);
                while e < n && (s[e] == b'\r' || s[e] == b'\n') {
                    e += 1;
                }
                return e;
            }
        }
        // 5-7. whitespace (every other character was taken above)
        debug_assert!(k0 & SPACE != 0);
        let mut e = p;
        let mut last = p;
        let mut after_newline = None;
        while e < n {
            let (c, l) = decode(s, e);
            if self.class(c) & SPACE == 0 {
                break;
            }
            if c == u32::from(b'\r') || c == u32::from(b'\n') {
                after_newline = Some(e + 1);
            }
            last = e;
            e += l;
        }
        match after_newline {
            Some(end) => end,
            None if e == n || last == p => e,
            None => last,
        }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let s = self.text.as_bytes();
        if self.pos >= s.len() {
            return None;
        }
        let start = self.pos;
        let end = self.piece_end(s, start);
        self.pos = end;
        Some(&self.text[start..end])
    }
}

impl std::iter::FusedIterator for Pieces<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(pre: PreTokenizer, text: &str) -> Vec<&str> {
        let ours: Vec<&str> = pre.split(text).collect();
        assert_eq!(ours, pre.split_regex(text), "{text:?}");
        ours
    }

    #[test]
    fn examples() {
        let p = PreTokenizer::Qwen2;
        assert_eq!(both(p, "Hello world"), ["Hello", " world"]);
        assert_eq!(both(p, "I'm DON'T 'sa"), ["I", "'m", " DON", "'T", " '", "sa"]);
        assert_eq!(both(p, "x  \n\n  y"), ["x", "  \n\n", " ", " y"]);
        assert_eq!(both(p, "a   b   "), ["a", "  ", " b", "   "]);
        assert_eq!(both(p, "12345"), ["1", "2", "3", "4", "5"]);
        assert_eq!(both(p, "foo.bar()\r\n"), ["foo", ".bar", "()\r\n"]);
        assert_eq!(both(p, " ?!\n\tx"), [" ?!\n", "\tx"]);
        assert_eq!(both(p, "e\u{301}t\u{301}e"), ["e", "\u{301}t", "\u{301}e"]);
        assert_eq!(both(PreTokenizer::Qwen35, "e\u{301}t\u{301}e"), ["e\u{301}t\u{301}e"]);
        assert_eq!(both(p, "'ſ 'S"), ["'ſ", " '", "S"]);
    }

    #[test]
    fn names() {
        assert_eq!(PreTokenizer::from_name("qwen35").unwrap(), PreTokenizer::Qwen35);
        assert!(matches!(
            PreTokenizer::from_name("llama3"),
            Err(Error::UnsupportedPreTokenizer { pre }) if pre == "llama3"
        ));
    }
}
