//! Checksums: xxh3 per record and per dense tensor, and a sha256 of the whole source whose running state
//! fits in a checkpoint.

use serde::{Deserialize, Serialize};
use sha2::digest::generic_array::GenericArray;
use xxhash_rust::xxh3::xxh3_64;

/// A record's or tensor's checksum: xxh3-64 over the xxh3-64 hashes of its parts (in layout order), so each
/// part can be hashed when it is written, in whatever order the source delivers the parts.
pub fn combine(part_hashes: &[u64]) -> u64 {
    let bytes: Vec<u8> = part_hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
    xxh3_64(&bytes)
}

/// The hash of one part.
pub fn part_hash(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

const SHA256_INIT: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// SHA-256 whose state can be saved and restored (FIPS 180-4; the block function is the `sha2` crate's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sha256State {
    state: [u32; 8],
    /// Bytes hashed so far, the tail included.
    len: u64,
    /// Bytes not yet forming a whole 64-byte block.
    tail: Vec<u8>,
}

impl Default for Sha256State {
    fn default() -> Self {
        Sha256State { state: SHA256_INIT, len: 0, tail: Vec::new() }
    }
}

impl Sha256State {
    /// Bytes hashed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing has been hashed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Hashes `data`.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if !self.tail.is_empty() {
            let take = (64 - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.tail.len() < 64 {
                return;
            }
            let block = GenericArray::clone_from_slice(&self.tail);
            sha2::compress256(&mut self.state, &[block]);
            self.tail.clear();
        }
        let mut blocks = data.chunks_exact(64);
        for block in &mut blocks {
            sha2::compress256(&mut self.state, std::slice::from_ref(GenericArray::from_slice(block)));
        }
        self.tail.extend_from_slice(blocks.remainder());
    }

    /// The digest as lowercase hex.
    pub fn finish_hex(mut self) -> String {
        let bit_len = self.len * 8;
        let mut pad = vec![0x80u8];
        while (self.tail.len() + pad.len()) % 64 != 56 {
            pad.push(0);
        }
        pad.extend_from_slice(&bit_len.to_be_bytes());
        let len = self.len;
        self.update(&pad);
        self.len = len;
        debug_assert!(self.tail.is_empty());
        self.state.iter().map(|w| format!("{w:08x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn equals_sha2_for_any_split_and_restore() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for cut in [0, 1, 55, 63, 64, 65, 500, 999, 1000] {
            let mut a = Sha256State::default();
            a.update(&data[..cut]);
            let saved: Sha256State = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
            let mut b = saved;
            b.update(&data[cut..]);
            let want: String = Sha256::digest(&data).iter().map(|x| format!("{x:02x}")).collect();
            assert_eq!(b.finish_hex(), want, "cut at {cut}");
        }
        let empty: String = Sha256::digest(b"").iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(Sha256State::default().finish_hex(), empty);
    }
}
