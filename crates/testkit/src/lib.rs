//! What the workspace's tests share (a dev-dependency only, never published): a seeded generator and the
//! random test data made with it, temporary directories named for their test, and damage done to a file in
//! place.

use std::path::Path;

use diskformer_gguf::TensorType;

/// SplitMix64: small, fast and fully specified, so seeded test data is the same on every machine.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n` (`n > 0`; the remainder, slightly uneven for large `n`, which test data does not mind).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[lo, hi)`.
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec_f32(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }

    /// `n` values over the whole int8 range, -128 included.
    pub fn vec_i8(&mut self, n: usize) -> Vec<i8> {
        (0..n).map(|_| self.next_u64() as i8).collect()
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// Random bytes for `n_values` values of `ty`, with the f16 scales of Q8_0 and Q4_0 blocks kept finite.
    pub fn blocks(&mut self, ty: TensorType, n_values: u64) -> Vec<u8> {
        let mut out = self.bytes(ty.bytes_for(n_values).expect("whole blocks") as usize);
        if matches!(ty, TensorType::Q8_0 | TensorType::Q4_0) {
            for b in out.chunks_exact_mut(ty.block_bytes() as usize) {
                b[1] &= 0x3B;
            }
        }
        out
    }
}

/// A fresh temporary directory whose name starts with `diskformer-TAG-` (`tempfile`'s, removed on drop).
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A new directory for the test `tag`.
    pub fn new(tag: &str) -> TempDir {
        TempDir(tempfile::Builder::new().prefix(&format!("diskformer-{tag}-")).tempdir().expect("a temp dir"))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Flips a bit of the byte at `at` of `path` in place (the file's inode and length kept: readers and maps
/// open on it see the change).
pub fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("the file to damage");
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).expect("a byte inside the file");
    file.write_all_at(&[byte[0] ^ 0x40], at).expect("written back");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_splitmix64() {
        // SplitMix64's published first outputs for seed 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let q8 = Rng::new(1).blocks(TensorType::Q8_0, 64);
        assert_eq!(q8.len(), 68);
        assert!(q8.chunks(34).all(|b| half_is_finite(b[0], b[1])));
    }

    fn half_is_finite(lo: u8, hi: u8) -> bool {
        (u16::from_le_bytes([lo, hi]) >> 10) & 0x1F != 0x1F
    }

    #[test]
    fn damage_flips_one_bit_in_place() {
        let dir = TempDir::new("testkit");
        let path = dir.path().join("f");
        std::fs::write(&path, [0u8; 8]).unwrap();
        flip(&path, 3);
        assert_eq!(std::fs::read(&path).unwrap(), [0, 0, 0, 0x40, 0, 0, 0, 0]);
        assert!(dir.path().file_name().unwrap().to_string_lossy().starts_with("diskformer-testkit-"));
    }
}
