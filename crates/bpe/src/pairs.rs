//! The merge table: (left token, right token) → (rank, merged token), the lookup BPE makes most.
//!
//! Performance notes: with `std`'s `HashMap` (hashbrown), a lookup in the 500k merges of Qwen3.5 touched two
//! cache lines (control bytes, then the bucket) and BPE spent most of its time on those misses; an
//! open-addressing table of (key, value) slots at load 1/2 touched one line but weighed 16 MiB. Here pairs
//! of ids below 256 (the single-byte tokens of GPT-2-style vocabularies: every first merge of a piece) sit in
//! a dense 512 KiB table, and the others in cache-line buckets of four (key, value) slots filled to 3/4, the
//! bucket count not rounded to a power of two (Lemire's multiply-shift): one line per lookup, hit or miss,
//! and 10 MiB for Qwen3.5, 3 MiB for Qwen3.

use crate::{Rank, TokenId};

/// No merge.
pub(crate) const NO_RANK: Rank = Rank::MAX;

const DENSE: usize = 256;
const EMPTY: u64 = u64::MAX;
const WAYS: usize = 4;

/// Four slots in one cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    keys: [u64; WAYS],
    values: [u64; WAYS],
}

const EMPTY_BUCKET: Bucket = Bucket { keys: [EMPTY; WAYS], values: [EMPTY; WAYS] };

#[derive(Clone)]
pub(crate) struct PairTable {
    /// `DENSE × DENSE` entries (rank << 32 | merged), `EMPTY` where no merge.
    dense: Vec<u64>,
    /// Keys `left << 32 | right` (`EMPTY` when free), values `rank << 32 | merged`.
    buckets: Vec<Bucket>,
    len: usize,
}

impl std::fmt::Debug for PairTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairTable").field("len", &self.len).field("buckets", &self.buckets.len()).finish()
    }
}

#[inline(always)]
fn key(left: TokenId, right: TokenId) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

impl PairTable {
    /// A table for about `n` merges.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self { dense: vec![EMPTY; DENSE * DENSE], buckets: vec![EMPTY_BUCKET; Self::buckets_for(n)], len: 0 }
    }

    fn buckets_for(n: usize) -> usize {
        (n * 4 / 3).div_ceil(WAYS) + 1
    }

    /// The first bucket of a key's probe sequence.
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (key >> 29);
        ((u128::from(h.wrapping_mul(0xBF58_476D_1CE4_E5B9)) * self.buckets.len() as u128) >> 64) as usize
    }

    /// Adds a merge unless the pair already has one (the first, lowest-ranked, stays). Ids are below 2^31.
    pub(crate) fn insert_first(&mut self, left: TokenId, right: TokenId, rank: Rank, merged: TokenId) {
        let value = (u64::from(rank) << 32) | u64::from(merged);
        if (left as usize) < DENSE && (right as usize) < DENSE {
            let slot = &mut self.dense[left as usize * DENSE + right as usize];
            if *slot == EMPTY {
                *slot = value;
            }
            return;
        }
        if (self.len + 1) * 8 > self.buckets.len() * WAYS * 7 {
            self.grow();
        }
        self.insert_sparse(key(left, right), value);
    }

    fn insert_sparse(&mut self, k: u64, value: u64) {
        let n = self.buckets.len();
        let mut b = self.home(k);
        loop {
            let bucket = &mut self.buckets[b];
            for w in 0..WAYS {
                if bucket.keys[w] == k {
                    return;
                }
                if bucket.keys[w] == EMPTY {
                    bucket.keys[w] = k;
                    bucket.values[w] = value;
                    self.len += 1;
                    return;
                }
            }
            b = if b + 1 == n { 0 } else { b + 1 };
        }
    }

    fn grow(&mut self) {
        let old =
            std::mem::replace(&mut self.buckets, vec![EMPTY_BUCKET; Self::buckets_for(self.len * 2 + 16)]);
        self.len = 0;
        for bucket in old {
            for w in 0..WAYS {
                if bucket.keys[w] != EMPTY {
                    self.insert_sparse(bucket.keys[w], bucket.values[w]);
                }
            }
        }
    }

    /// (rank, merged token) of a pair, `(NO_RANK, _)` when no merge joins them.
    #[inline(always)]
    pub(crate) fn get(&self, left: TokenId, right: TokenId) -> (Rank, TokenId) {
        let value = if (left as usize) < DENSE && (right as usize) < DENSE {
            self.dense[left as usize * DENSE + right as usize]
        } else {
            self.get_sparse(key(left, right))
        };
        if value == EMPTY { (NO_RANK, 0) } else { ((value >> 32) as Rank, value as TokenId) }
    }

    #[inline(always)]
    fn get_sparse(&self, k: u64) -> u64 {
        let n = self.buckets.len();
        let mut b = self.home(k);
        loop {
            let bucket = &self.buckets[b];
            for w in 0..WAYS {
                if bucket.keys[w] == k {
                    return bucket.values[w];
                }
            }
            if bucket.keys[WAYS - 1] == EMPTY {
                return EMPTY;
            }
            b = if b + 1 == n { 0 } else { b + 1 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_insert_wins_and_growth_keeps_entries() {
        let mut t = PairTable::with_capacity(1);
        for i in 0..5000u32 {
            t.insert_first(i, i + 7, i, i + 1);
            t.insert_first(i, i + 7, i + 9000, 0);
        }
        for i in 0..5000u32 {
            assert_eq!(t.get(i, i + 7), (i, i + 1));
            assert_eq!(t.get(i + 7, i).0, NO_RANK);
        }
        assert_eq!(t.get(3, 10), (3, 4));
        assert_eq!(t.get(300, 307), (300, 301));
        assert_eq!(t.get(5, 5).0, NO_RANK);
    }
}
