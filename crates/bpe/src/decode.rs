//! Streaming decode: text out as soon as it is complete UTF-8.

use crate::{TokenId, Tokenizer};

/// Turns generated tokens into text, holding back the bytes of a character split across tokens.
///
/// ```
/// # fn demo(tok: &diskformer_bpe::Tokenizer, ids: &[u32]) {
/// let mut stream = tok.decode_stream();
/// for &id in ids {
///     if let Some(text) = stream.step(id) {
///         print!("{text}");
///     }
/// }
/// print!("{}", stream.flush().unwrap_or_default());
/// # }
/// ```
#[derive(Debug)]
pub struct DecodeStream<'a> {
    tokenizer: &'a Tokenizer,
    text: Utf8Stream,
}

impl<'a> DecodeStream<'a> {
    pub(crate) fn new(tokenizer: &'a Tokenizer) -> Self {
        Self { tokenizer, text: Utf8Stream::default() }
    }

    /// Adds a token; returns the text completed so far, if any. Bytes that can never become valid UTF-8 come
    /// out as U+FFFD; a character still incomplete waits for the next tokens.
    pub fn step(&mut self, id: TokenId) -> Option<String> {
        self.text.push(self.tokenizer.token_to_piece(id).unwrap_or_default())
    }

    /// Bytes held back (an incomplete character), if any.
    pub fn pending(&self) -> &[u8] {
        self.text.pending()
    }

    /// Ends the stream: what is held back, lossily (U+FFFD for the incomplete character).
    pub fn flush(&mut self) -> Option<String> {
        self.text.flush()
    }
}

/// The byte side of [`DecodeStream`], for callers that hold the tokenizer elsewhere (an engine that owns it
/// while generating): bytes in, complete UTF-8 text out.
#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds bytes (a token's piece); returns the text completed so far, if any, as [`DecodeStream::step`].
    pub fn push(&mut self, bytes: &[u8]) -> Option<String> {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("checked valid"));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &tail[bad..];
                        }
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        self.pending.drain(..self.pending.len() - keep);
        (!out.is_empty()).then_some(out)
    }

    /// Bytes held back (an incomplete character), if any.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: what is held back, lossily (U+FFFD for the incomplete character).
    pub fn flush(&mut self) -> Option<String> {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        (!out.is_empty()).then_some(out)
    }
}
