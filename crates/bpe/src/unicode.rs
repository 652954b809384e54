//! Character classes of the pre-tokenizer patterns, looked up in O(1).
//!
//! The sets come from `regex-syntax`, the crate that compiles `fancy-regex` patterns, so the hand-written
//! pre-tokenizer and the regex it replaces agree on every code point (same Unicode version).

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

/// `\p{L}`: letters.
pub(crate) const LETTER: u8 = 1;
/// `\p{N}`: numbers.
pub(crate) const NUMBER: u8 = 2;
/// `\p{M}`: combining marks.
pub(crate) const MARK: u8 = 4;
/// `\s`: Unicode `White_Space`.
pub(crate) const SPACE: u8 = 8;

const BLOCK: usize = 256;
const N_BLOCKS: usize = 0x11_0000 / BLOCK;

/// A two-level table: block index per 256 code points, deduplicated blocks of class bits.
pub(crate) struct ClassTable {
    index: Vec<u16>,
    blocks: Vec<[u8; BLOCK]>,
}

impl std::fmt::Debug for ClassTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassTable").field("blocks", &self.blocks.len()).finish()
    }
}

impl ClassTable {
    /// The class bits of `c`.
    #[inline(always)]
    pub(crate) fn class(&self, c: u32) -> u8 {
        let block = self.index[(c as usize) / BLOCK] as usize;
        self.blocks[block][(c as usize) % BLOCK]
    }

    fn build() -> Self {
        let mut flat = vec![0u8; 0x11_0000];
        for (pattern, bit) in [(r"\p{L}", LETTER), (r"\p{N}", NUMBER), (r"\p{M}", MARK), (r"\s", SPACE)] {
            let hir = regex_syntax::Parser::new().parse(pattern).expect("a valid Unicode class");
            let HirKind::Class(Class::Unicode(class)) = hir.kind() else {
                unreachable!("{pattern} is a Unicode class")
            };
            for r in class.ranges() {
                for class in &mut flat[r.start() as usize..=r.end() as usize] {
                    *class |= bit;
                }
            }
        }
        let mut blocks: Vec<[u8; BLOCK]> = Vec::new();
        let mut index = Vec::with_capacity(N_BLOCKS);
        for chunk in flat.chunks_exact(BLOCK) {
            let block: [u8; BLOCK] = chunk.try_into().expect("a whole block");
            let i = match blocks.iter().position(|b| *b == block) {
                Some(i) => i,
                None => {
                    blocks.push(block);
                    blocks.len() - 1
                }
            };
            index.push(u16::try_from(i).expect("fewer than 65536 distinct blocks"));
        }
        Self { index, blocks }
    }
}

/// The process-wide table, built on first use (a few milliseconds).
pub(crate) fn classes() -> &'static ClassTable {
    static TABLE: OnceLock<ClassTable> = OnceLock::new();
    TABLE.get_or_init(ClassTable::build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_agree_with_std_where_std_has_them() {
        // std's tables may be of a newer Unicode version (numbers in blocks added since differ), so compare
        // White_Space everywhere and numbers in the long-assigned planes only.
        let t = classes();
        for cp in 0..0x11_0000u32 {
            let Some(c) = char::from_u32(cp) else { continue };
            let k = t.class(cp);
            assert_eq!(k & SPACE != 0, c.is_whitespace(), "{cp:#x}");
            if cp < 0x800 {
                assert_eq!(k & NUMBER != 0, c.is_numeric(), "{cp:#x}");
            }
        }
        assert_eq!(t.class('a' as u32), LETTER);
        assert_eq!(t.class('日' as u32), LETTER);
        assert_eq!(t.class(0x301), MARK);
        assert_eq!(t.class(0x93F), MARK); // DEVANAGARI VOWEL SIGN I (Mc)
        assert_eq!(t.class('٣' as u32), NUMBER);
        assert_eq!(t.class(0x200B), 0); // ZERO WIDTH SPACE is not White_Space
        assert_eq!(t.class(0x3000), SPACE);
    }
}
