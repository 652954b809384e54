//! Matching the text of special tokens (control, user-defined, unknown) in the input.
//!
//! Semantics of llama.cpp's `tokenizer_st_partition`: special tokens are taken longest first (ties: lower
//! id); each splits the text not yet claimed at its leftmost non-overlapping occurrences. Control and unknown
//! tokens take part only when special text is parsed; user-defined tokens always do.

use crate::TokenId;
use crate::TokenType;

/// The special tokens of a vocabulary, longest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct Specials {
    /// (id, text, always matched), longest text first, then lower id.
    tokens: Vec<(TokenId, Box<[u8]>, bool)>,
    /// Indices into `tokens` by first byte, in `tokens` order.
    by_first_byte: Vec<Vec<u32>>,
}

impl Specials {
    pub(crate) fn new(texts: &[String], types: &[TokenType]) -> Self {
        let mut tokens: Vec<(TokenId, Box<[u8]>, bool)> = texts
            .iter()
            .zip(types)
            .enumerate()
            .filter(|(_, (text, _))| !text.is_empty())
            .filter_map(|(i, (text, ty))| match ty {
                TokenType::Control | TokenType::Unknown => {
                    Some((i as TokenId, text.as_bytes().into(), false))
                }
                TokenType::UserDefined => Some((i as TokenId, text.as_bytes().into(), true)),
                _ => None,
            })
            .collect();
        tokens.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut by_first_byte = vec![Vec::new(); 256];
        for (i, (_, text, _)) in tokens.iter().enumerate() {
            by_first_byte[text[0] as usize].push(i as u32);
        }
        Self { tokens, by_first_byte }
    }

    /// The id of the special token with exactly this text.
    pub(crate) fn id_of(&self, text: &[u8]) -> Option<TokenId> {
        self.tokens.iter().find(|(_, t, _)| &**t == text).map(|(id, _, _)| *id)
    }

    /// The special tokens found in `text`: (start, end, id), in text order.
    pub(crate) fn find(&self, text: &[u8], parse_special: bool) -> Vec<(usize, usize, TokenId)> {
        if self.tokens.is_empty() {
            return Vec::new();
        }
        // Every occurrence of every enabled token: (order, start).
        let mut found: Vec<(u32, usize)> = Vec::new();
        for (start, &b) in text.iter().enumerate() {
            for &k in &self.by_first_byte[b as usize] {
                let (_, t, always) = &self.tokens[k as usize];
                if (parse_special || *always) && text[start..].starts_with(t) {
                    found.push((k, start));
                }
            }
        }
        if found.is_empty() {
            return Vec::new();
        }
        found.sort_unstable();
        // Longest first: accept an occurrence if it overlaps nothing accepted (by longer tokens, or earlier
        // by the same token).
        let mut accepted: Vec<(usize, usize, TokenId)> = Vec::new();
        for (k, start) in found {
            let (id, t, _) = &self.tokens[k as usize];
            let end = start + t.len();
            let at = accepted.partition_point(|a| a.0 < start);
            let clear_left = at == 0 || accepted[at - 1].1 <= start;
            let clear_right = at == accepted.len() || accepted[at].0 >= end;
            if clear_left && clear_right {
                accepted.insert(at, (start, end, *id));
            }
        }
        accepted
    }
}
