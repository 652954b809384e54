//! IQ4_NL and IQ4_XS rows times f32 inputs (AVX2): each 16 bytes of nibbles looked up in the 16-entry
//! codebook with one `vpshufb`, the int8 values widened to f32 eight at a time and multiplied as they are
//! unpacked, one scale a 32-value block. The layouts are ggml-common.h's (KQUANTS.md §1.9, §1.10).

use core::arch::x86_64::*;

use diskformer_gguf::IQ4_VALUES;

use super::x86::{f16_at, hsum256};
use crate::matrix::{K_BLOCK, RowRef};

/// The codebook in both 128-bit lanes, for `vpshufb`.
#[target_feature(enable = "avx2")]
fn codebook() -> __m256i {
    let mut table = [0i8; 32];
    table[..16].copy_from_slice(&IQ4_VALUES);
    table[16..].copy_from_slice(&IQ4_VALUES);
    // Safety: `table` holds 32 bytes.
    unsafe { _mm256_loadu_si256(table.as_ptr().cast()) }
}

/// Σ codebook[nibble] · x over 32 values: the 16 bytes at `q` give values 0..16 (low nibbles) and 16..32
/// (high nibbles).
#[target_feature(enable = "avx2,fma")]
fn dot32(table: __m256i, q: &[u8], xs: &[f32]) -> f32 {
    let (q, xs) = (&q[..16], &xs[..32]);
    // Safety: `q` holds 16 bytes.
    let q = unsafe { _mm_loadu_si128(q.as_ptr().cast()) };
    let mask = _mm_set1_epi8(0x0F);
    let index = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(q), mask), _mm_and_si128(q, mask));
    let v = _mm256_shuffle_epi8(table, index);
    let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let mut sum = _mm256_setzero_ps();
    for (g, part) in [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)].into_iter().enumerate() {
        // Safety: `xs` holds 32 values; this reads 8 at 8 · g.
        let xv = unsafe { _mm256_loadu_ps(xs.as_ptr().add(8 * g)) };
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), xv, sum);
    }
    hsum256(sum)
}

/// An IQ4_NL row times `x`: per 32-value block `d · Σ codebook[q]·x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_iq4_nl(row: RowRef<'_>, x: &[f32]) -> f32 {
    let table = codebook();
    let mut sum = 0f32;
    for b in 0..row.blocks {
        let block = &row.quants[b * row.quant_stride..][..18];
        sum += f16_at(block, 0) * dot32(table, &block[2..18], &x[32 * b..]);
    }
    sum
}

/// An IQ4_XS row times `x`: per 32-value sub-block `d · (ls − 32) · Σ codebook[q]·x`, `ls` six bits from
/// `scales_l` and `scales_h`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_iq4_xs(row: RowRef<'_>, x: &[f32]) -> f32 {
    let table = codebook();
    let mut sum = 0f32;
    for b in 0..row.blocks {
        let block = &row.quants[b * row.quant_stride..][..136];
        let (d, high) = (f16_at(block, 0), u16::from_le_bytes([block[2], block[3]]));
        let (low, qs) = (&block[4..8], &block[8..136]);
        let xb = &x[b * K_BLOCK..][..K_BLOCK];
        for ib in 0..8 {
            let ls = ((low[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((((high >> (2 * ib)) & 3) as u8) << 4);
            sum += d * (f32::from(ls) - 32.0) * dot32(table, &qs[16 * ib..], &xb[32 * ib..]);
        }
    }
    sum
}
