//! GPT-2's reversible map between bytes and printable characters, in which byte-level BPE vocabularies (and
//! GGUF `tokenizer.ggml.tokens` for `model = gpt2`) are written.
//!
//! Origin: openai/gpt-2 `encoder.py` `bytes_to_unicode`: the printable bytes `!`..`~`, `¡`..`¬`, `®`..`ÿ` map
//! to themselves, the other 68 bytes, in order, to U+0100 onwards (so the space 0x20 is `Ġ` U+0120).

/// The character that stands for each byte.
pub(crate) fn byte_to_char(b: u8) -> char {
    let table = &TABLE.0;
    table[b as usize]
}

/// The byte a character stands for, if it is in the alphabet.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x144 { TABLE.1[cp as usize] } else { None }
}

/// Turns byte-level text into the bytes it stands for, or returns the first character outside the alphabet.
pub(crate) fn decode_text(text: &str) -> Result<Vec<u8>, char> {
    text.chars().map(|c| char_to_byte(c).ok_or(c)).collect()
}

/// Writes bytes as byte-level text.
pub(crate) fn encode_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char(b)).collect()
}

const fn printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

#[allow(clippy::type_complexity)]
static TABLE: ([char; 256], [Option<u8>; 0x144]) = {
    let mut to_char = ['\0'; 256];
    let mut to_byte = [None; 0x144];
    let mut n = 0u32;
    let mut b = 0usize;
    while b < 256 {
        let cp = if printable(b as u8) {
            b as u32
        } else {
            n += 1;
            255 + n
        };
        to_char[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => panic!("byte-level table"),
        };
        to_byte[cp as usize] = Some(b as u8);
        b += 1;
    }
    (to_char, to_byte)
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_table() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        assert_eq!(byte_to_char(0), 'Ā');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(decode_text("ĠhelloĊ"), Ok(b" hello\n".to_vec()));
        assert_eq!(decode_text("a b"), Err(' '));
        assert_eq!(encode_bytes("é".as_bytes()), "Ã©");
    }
}
