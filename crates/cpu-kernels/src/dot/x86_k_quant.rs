//! K-quant rows (Q2_K to Q6_K) times f32 inputs: each super-block's quants widened to f32 eight at a time
//! (AVX2; Q4_K sixteen on the AVX-512 path) and multiplied as they are unpacked, one scale a sub-block,
//! without writing the dequantised values out; and times Q8_0-quantised inputs with integer dot products
//! (AVX-512 VNNI's `vpdpbusd`, 64 values an instruction; AVX2's `vpmaddubsw`, 32; `k_quant_q8` their
//! reference; Q4_K to Q6_K). The layouts are ggml-common.h's (KQUANTS.md §1.4-§1.8).

use core::arch::x86_64::*;

use super::x86::{f16_at, hsum256};
use crate::matrix::{K_BLOCK, RowRef};
use crate::{BLOCK, Q8Row, Q16Row};

/// How far past the super-block being multiplied its row's bytes are asked for (rows lie one after another
/// in a matrix, so near a row's end this reaches into the next row's).
const PREFETCH_BYTES: usize = 2048;

/// Asks for the lines of the block `PREFETCH_BYTES` past block `b`'s start into L1: a K-quant block spans
/// two to four cache lines, and without it a thread spent about a third of its time waiting on them.
#[inline]
fn prefetch_block(row: &RowRef<'_>, b: usize) {
    let start = row.quants.as_ptr().wrapping_add(b * row.quant_stride + PREFETCH_BYTES);
    let mut at = 0;
    while at < row.quant_stride {
        // Safety: a prefetch reads nothing architecturally and cannot fault; the address may lie past the
        // slice (hence `wrapping_add`).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(at).cast()) };
        at += 64;
    }
    // Safety: as above.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(row.quant_stride - 1).cast()) };
}

/// The 32 bytes of `v` as four groups of 8, each widened to i32.
#[target_feature(enable = "avx2")]
fn widen(v: __m256i) -> [__m256i; 4] {
    let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    [
        _mm256_cvtepu8_epi32(lo),
        _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(lo)),
        _mm256_cvtepu8_epi32(hi),
        _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(hi)),
    ]
}

/// A Q4_K row times `x`: per sub-block `(d · sc) · Σ q·x − (dmin · m) · Σ x`.
// Performance note (2026-12-05, the development machine, `moe-blocks/q[45]_K/f32/avx2/t1`): a block's
// scales and minimums made once in two registers took Q4_K from 4.9 to 6.4 GiB/s and Q5_K from 6.7 to 7.6.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q4_k(row: RowRef<'_>, x: &[f32]) -> f32 {
    dot_q45_k::<false>(row, x)
}

/// A Q5_K row times `x`: as [`dot_q4_k`], each quant's fifth bit (`qh[l] >> sub & 1`, KQUANTS.md §1.7)
/// added as 16.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q5_k(row: RowRef<'_>, x: &[f32]) -> f32 {
    dot_q45_k::<true>(row, x)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q45_k<const Q5: bool>(row: RowRef<'_>, x: &[f32]) -> f32 {
    let bytes = row.quant_stride;
    let mask = _mm256_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let qs = &block[if Q5 { 48 } else { 16 }..];
        // Safety: a Q5_K block holds 32 bytes of fifth bits at 16 (a Q4_K block, its quants: unused).
        let high = unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) };
        let (scales, mins) = q45_k_scales_f32(block);
        let xb = &x[b * K_BLOCK..][..K_BLOCK];
        for chunk in 0..4 {
            // Safety: `qs` holds 128 bytes; this reads 32 at 32 · chunk.
            let q = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * chunk).cast()) };
            let nibbles = [_mm256_and_si256(q, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(q), mask)];
            for (half, nibbles) in nibbles.into_iter().enumerate() {
                let sub = 2 * chunk + half;
                let quants = if Q5 { _mm256_or_si256(nibbles, fifth_bits(high, sub)) } else { nibbles };
                let xs = &xb[32 * sub..][..32];
                let (mut qx, mut sx) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                for (g, q) in widen(quants).into_iter().enumerate() {
                    // Safety: `xs` holds 32 values; this reads 8 at 8 · g.
                    let xv = unsafe { _mm256_loadu_ps(xs.as_ptr().add(8 * g)) };
                    qx = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), xv, qx);
                    sx = _mm256_add_ps(sx, xv);
                }
                let lane = _mm256_set1_epi32(sub as i32);
                acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(scales, lane), qx, acc);
                acc = _mm256_fnmadd_ps(_mm256_permutevar8x32_ps(mins, lane), sx, acc);
            }
        }
    }
    hsum256(acc)
}

/// A Q4_K or Q5_K block's eight `d · sc` and eight `dmin · m`, one register each.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn q45_k_scales_f32(block: &[u8]) -> (__m256, __m256) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let (sc, m) = q4_k_scales_and_mins(&block[4..16]);
    (_mm256_mul_ps(bytes_as_f32(sc), _mm256_set1_ps(d)), _mm256_mul_ps(bytes_as_f32(m), _mm256_set1_ps(dmin)))
}

/// Q3_K's sixteen signed 6-bit scales (KQUANTS.md §1.5): low four bits from bytes 0..8, high two from
/// bytes 8..12, minus 32.
fn q3_k_scales(s: &[u8]) -> [f32; 16] {
    std::array::from_fn(|j| {
        let low4 = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let hi2 = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        f32::from(low4 | (hi2 << 4)) - 32.0
    })
}

/// 32 f32 values of `x` times 32 quants `q` (u8), as two sums of 16 (each 16 values' own scale).
#[target_feature(enable = "avx2,fma")]
fn sums_of_16(q: __m256i, xs: &[f32]) -> [__m256; 2] {
    let mut sums = [_mm256_setzero_ps(); 2];
    for (g, q) in widen(q).into_iter().enumerate() {
        // Safety: `xs` holds 32 values (checked by the slice below); this reads 8 at 8 · g.
        let xv = unsafe { _mm256_loadu_ps(xs[..32].as_ptr().add(8 * g)) };
        sums[g / 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), xv, sums[g / 2]);
    }
    sums
}

/// The sum of 16 values of `x` from `at`.
fn sum16(x: &[f32], at: usize) -> f32 {
    x[at..at + 16].iter().sum()
}

/// A Q3_K row times `x`: per 16 values `(d · s) · (Σ u·x − 4 · Σ x)`, where `u` = the low two bits | the
/// high-mask bit << 2 (0..7) and `q = u − 4` (KQUANTS.md §1.5).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q3_k(row: RowRef<'_>, x: &[f32]) -> f32 {
    let bytes = row.quant_stride;
    let (low2, one) = (_mm256_set1_epi8(0x03), _mm256_set1_epi8(1));
    let (mut acc, mut offsets) = (_mm256_setzero_ps(), 0f32);
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let (hmask, qs, d) = (&block[..32], &block[32..96], f16_at(block, 108));
        let scales = q3_k_scales(&block[96..108]);
        let xb = &x[b * K_BLOCK..][..K_BLOCK];
        // Safety: `hmask` holds 32 bytes.
        let high = unsafe { _mm256_loadu_si256(hmask.as_ptr().cast()) };
        for half in 0..2 {
            // Safety: `qs` holds 64 bytes; this reads 32 at 32 · half.
            let packed = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * half).cast()) };
            for k in 0..4 {
                let low = _mm256_and_si256(_mm256_srl_epi16(packed, _mm_cvtsi32_si128(2 * k as i32)), low2);
                let bit =
                    _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128((4 * half + k) as i32)), one);
                let u = _mm256_or_si256(low, _mm256_slli_epi16::<2>(bit));
                let at = 128 * half + 32 * k;
                let sums = sums_of_16(u, &xb[at..]);
                for (i, s) in sums.into_iter().enumerate() {
                    let scale = d * scales[8 * half + 2 * k + i];
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), s, acc);
                    offsets += 4.0 * scale * sum16(xb, at + 16 * i);
                }
            }
        }
    }
    hsum256(acc) - offsets
}

/// A Q2_K row times `x`: per 16 values `(d · (sc & 15)) · Σ q·x − (dmin · (sc >> 4)) · Σ x`, `q` two bits
/// (KQUANTS.md §1.4).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q2_k(row: RowRef<'_>, x: &[f32]) -> f32 {
    let bytes = row.quant_stride;
    let low2 = _mm256_set1_epi8(0x03);
    let (mut acc, mut mins) = (_mm256_setzero_ps(), 0f32);
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let (scales, qs, d, dmin) = (&block[..16], &block[16..80], f16_at(block, 80), f16_at(block, 82));
        let xb = &x[b * K_BLOCK..][..K_BLOCK];
        for half in 0..2 {
            // Safety: `qs` holds 64 bytes; this reads 32 at 32 · half.
            let packed = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * half).cast()) };
            for k in 0..4 {
                let q = _mm256_and_si256(_mm256_srl_epi16(packed, _mm_cvtsi32_si128(2 * k as i32)), low2);
                let at = 128 * half + 32 * k;
                let sums = sums_of_16(q, &xb[at..]);
                for (i, s) in sums.into_iter().enumerate() {
                    let sc = scales[8 * half + 2 * k + i];
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d * f32::from(sc & 0xF)), s, acc);
                    mins += dmin * f32::from(sc >> 4) * sum16(xb, at + 16 * i);
                }
            }
        }
    }
    hsum256(acc) - mins
}

/// Q6_K's unsigned 6-bit quants (0..63) of values `128 · half + 32 · k ..` (32 of them): the low nibble of
/// `ql[64 · half + 32 · (k & 1) + l]` (k < 2) or its high one, and bits `2k, 2k + 1` of `qh[32 · half + l]`
/// (`high`, those 32 bytes) on top.
#[inline]
#[target_feature(enable = "avx2")]
fn q6_quants(ql: &[u8], high: __m256i, half: usize, k: usize) -> __m256i {
    let ql = &ql[64 * half + 32 * (k & 1)..][..32];
    // Safety: `ql` holds 32 bytes.
    let low = unsafe { _mm256_loadu_si256(ql.as_ptr().cast()) };
    let low = if k < 2 { low } else { _mm256_srli_epi16::<4>(low) };
    let up =
        _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * k as i32)), _mm256_set1_epi8(0x03));
    _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi8(0x0F)), _mm256_slli_epi16::<4>(up))
}

/// A Q6_K row times `x`: per 16 values `(d · sc) · Σ (q − 32)·x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q6_k(row: RowRef<'_>, x: &[f32]) -> f32 {
    let bytes = row.quant_stride;
    let offset = _mm256_set1_epi32(32);
    let mut acc = _mm256_setzero_ps();
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let d = f16_at(block, 208);
        let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
        let xb = &x[b * K_BLOCK..][..K_BLOCK];
        for half in 0..2 {
            // Safety: `qh` holds 64 bytes; this reads 32 at 32 · half.
            let high = unsafe { _mm256_loadu_si256(qh.as_ptr().add(32 * half).cast()) };
            for k in 0..4 {
                let q = q6_quants(ql, high, half, k);
                let xs = &xb[128 * half + 32 * k..][..32];
                let mut sums = [_mm256_setzero_ps(); 2];
                for (g, q) in widen(q).into_iter().enumerate() {
                    // Safety: `xs` holds 32 values; this reads 8 at 8 · g.
                    let xv = unsafe { _mm256_loadu_ps(xs.as_ptr().add(8 * g)) };
                    let q = _mm256_cvtepi32_ps(_mm256_sub_epi32(q, offset));
                    sums[g / 2] = _mm256_fmadd_ps(q, xv, sums[g / 2]);
                }
                for (i, s) in sums.into_iter().enumerate() {
                    let sc = scales[8 * half + 2 * k + i] as i8;
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d * f32::from(sc)), s, acc);
                }
            }
        }
    }
    hsum256(acc)
}

/// 16 bytes at `at` of `b`.
#[target_feature(enable = "avx2")]
fn load16(b: &[u8], at: usize) -> __m128i {
    assert!(at + 16 <= b.len());
    // Safety: checked above.
    unsafe { _mm_loadu_si128(b.as_ptr().add(at).cast()) }
}

/// 16 values of `x` from `at`.
#[target_feature(enable = "avx512f")]
fn load_x16(x: &[f32], at: usize) -> __m512 {
    assert!(at + 16 <= x.len());
    // Safety: checked above.
    unsafe { _mm512_loadu_ps(x.as_ptr().add(at)) }
}

/// [`dot_q4_k`] sixteen values a step (the AVX-512 path): per sub-block `(d · sc) · Σ q·x − (dmin · m) · Σ x`,
/// its quants widened from 16 nibbles at a time.
// Performance note (2026-12-04, the 2-core development machine, `moe-blocks/…/t1`): 8.97 GiB/s against the
// AVX2 kernel's 8.45; a Q6_K kernel written the same way ran at 9.69 against 11.5 and was dropped.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(super) fn dot_q4_k_512(row: RowRef<'_>, x: &[f32]) -> f32 {
    let bytes = row.quant_stride;
    let mask = _mm_set1_epi8(0x0F);
    let mut acc = _mm512_setzero_ps();
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let qs = &block[16..144];
        let (scales, mins) = q45_k_scales_f32(block);
        let (scales, mins) = (_mm512_castps256_ps512(scales), _mm512_castps256_ps512(mins));
        let xb = &x[b * K_BLOCK..][..K_BLOCK];
        for sub in 0..8 {
            // Sub-block `sub`: the low (even) or high (odd) nibbles of chunk sub / 2's 32 bytes.
            let (mut qx, mut sx) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            for half in 0..2 {
                let q = load16(qs, 32 * (sub / 2) + 16 * half);
                let q = if sub % 2 == 0 { q } else { _mm_srli_epi16::<4>(q) };
                let q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, mask)));
                let xv = load_x16(xb, 32 * sub + 16 * half);
                qx = _mm512_fmadd_ps(q, xv, qx);
                sx = _mm512_add_ps(sx, xv);
            }
            let lane = _mm512_set1_epi32(sub as i32);
            acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(lane, scales), qx, acc);
            acc = _mm512_fnmadd_ps(_mm512_permutexvar_ps(lane, mins), sx, acc);
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// 64 int8 values of `x` from run `r` (32 values a run).
#[inline]
#[target_feature(enable = "avx512f")]
fn load_q8x64(x: &Q8Row, r: usize) -> __m512i {
    let q = &x.quants[r * BLOCK..][..2 * BLOCK];
    // Safety: `q` holds 64 bytes.
    unsafe { _mm512_loadu_si512(q.as_ptr().cast()) }
}

/// A Q4_K row times a Q8_0-quantised `x` (`vpdpbusd`: the nibbles are the unsigned operand): two sub-blocks
/// a 512-bit register, per sub-block `dx · ((d · sc) · Σ q·xq − (dmin · m) · Σ xq)`, as
/// `k_quant_q8::dot`. A block's eight `d · sc · dx` are made once in one register (each sub-block's taken
/// from it by a permute); `Σ xq` is the input's own (`Q8Row::sums`), so the minimums' term is eight lanes
/// a block.
// Performance note (2026-12-05, the development machine's AVX2 twin, `moe-blocks/q4_K/q8/avx2/t1`): 9.8
// GiB/s against 5.1 with each sub-block's scale and minimum unpacked and multiplied in scalars.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q4_k_q8_vnni(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_vnni::<false, false>(row, x, x, &[])
}

/// [`dot_q4_k_q8_vnni`] for Q5_K: each quant's fifth bit (bit `sub` of `qh[j]`) added as 16.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q5_k_q8_vnni(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_vnni::<true, false>(row, x, x, &[])
}

/// A Q4_K row times a [`Q16Row`]: per 64 values `256 · Σ q·hi + Σ q·lo` in integers (a second `vpdpbusd`
/// onto the first's sum shifted by 8), scaled by the low halves' `dx = d / 256`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q4_k_q16_vnni(row: RowRef<'_>, x: &Q16Row) -> f32 {
    dot_q45_k_vnni::<false, true>(row, &x.hi, &x.lo, &x.totals)
}

/// [`dot_q4_k_q16_vnni`] for Q5_K.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q5_k_q16_vnni(row: RowRef<'_>, x: &Q16Row) -> f32 {
    dot_q45_k_vnni::<true, true>(row, &x.hi, &x.lo, &x.totals)
}

/// Bit `sub` of each of the 32 bytes `high`, as 16 (a 16-bit shift moves each byte's bit `sub` to its bit 0).
#[inline]
#[target_feature(enable = "avx2")]
fn fifth_bits(high: __m256i, sub: usize) -> __m256i {
    let bits = _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128(sub as i32)), _mm256_set1_epi8(1));
    _mm256_slli_epi16::<4>(bits)
}

/// A Q4_K or Q5_K block's eight sub-block scales and eight minimums from its 12 packed bytes, byte `j` of
/// each `u64` sub-block `j`'s (llama.cpp's unpacking with `kmask1..3`; `q4_k_scale_min` one at a time).
fn q4_k_scales_and_mins(packed: &[u8]) -> (u64, u64) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let word = |i: usize| {
        u32::from_le_bytes([packed[4 * i], packed[4 * i + 1], packed[4 * i + 2], packed[4 * i + 3]])
    };
    let (u0, u1, u2) = (word(0), word(1), word(2));
    // Sub-blocks 0..4: the low 6 bits of bytes 0..4 (scales) and 4..8 (minimums); 4..8: the nibbles of bytes
    // 8..12 with the top 2 bits of bytes 0..4 (scales) or 4..8 (minimums) above them.
    let scales = u64::from(u0 & LOW6) | u64::from((u2 & LOW4) | (((u0 >> 6) & LOW2) << 4)) << 32;
    let mins = u64::from(u1 & LOW6) | u64::from(((u2 >> 4) & LOW4) | (((u1 >> 6) & LOW2) << 4)) << 32;
    (scales, mins)
}

/// The eight bytes of `v` as f32.
#[inline]
#[target_feature(enable = "avx2")]
fn bytes_as_f32(v: u64) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)))
}

/// `Σ xq` of the eight 32-value runs of `x`'s super-block `b`, as f32 (from its sums of 16).
#[inline]
#[target_feature(enable = "avx2")]
fn run_sums(x: &Q8Row, b: usize) -> __m256 {
    let s = &x.sums[16 * b..][..16];
    // Safety: `s` holds 16 i32; these read 8 at 0 and at 8.
    let (lo, hi) =
        unsafe { (_mm256_loadu_si256(s.as_ptr().cast()), _mm256_loadu_si256(s.as_ptr().add(8).cast())) };
    // hadd pairs within 128-bit lanes: [lo01 lo23 hi01 hi23 | lo45 lo67 hi45 hi67]; then in order.
    let pairs = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(lo, hi));
    _mm256_cvtepi32_ps(pairs)
}

/// The eight run scales of `x`'s super-block `b`.
#[inline]
#[target_feature(enable = "avx2")]
fn run_scales(x: &Q8Row, b: usize) -> __m256 {
    let s = &x.scales[8 * b..][..8];
    // Safety: `s` holds 8 f32.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// A block's eight `d · sc` (`scales`) times the runs' `dx` of `x`'s super-block `b`, and the minimums' term
/// `dmin · Σ_j m_j · dx_j · Σ xq_j` (`block_mins` the eight `dmin · m`) added into `mins` (eight lanes): no
/// scalar work a sub-block.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn q45_k_run_scales(scales: __m256, block_mins: __m256, x: &Q8Row, b: usize, mins: &mut __m256) -> __m256 {
    let dx = run_scales(x, b);
    *mins = _mm256_fmadd_ps(block_mins, _mm256_mul_ps(run_sums(x, b), dx), *mins);
    _mm256_mul_ps(scales, dx)
}

/// A block's scales for its integer sums over `hi` (one half) or, with `TWO`, over `256 · hi + lo`: those of
/// `lo` (whose `dx` is `hi`'s over 256); the minimums' terms of both halves go into `mins`. A macro, so that
/// it lies inside each kernel: as a function of its own it was not inlined, and its calls cost a third of
/// the Q16 kernel's time (development machine, one thread).
/// With `TWO` the minimums' term takes the row's own run totals ([`Q16Row::totals`]), made once for it.
macro_rules! q45_k_block_scales {
    ($two:expr, $block:expr, $hi:expr, $lo:expr, $totals:expr, $b:expr, $mins:expr) => {{
        let (scales, block_mins) = q45_k_scales_f32($block);
        if $two {
            let totals: &[f32] = &$totals[8 * $b..][..8];
            // Safety: `totals` holds 8 f32.
            *$mins = _mm256_fmadd_ps(block_mins, unsafe { _mm256_loadu_ps(totals.as_ptr()) }, *$mins);
            _mm256_mul_ps(scales, run_scales($lo, $b))
        } else {
            q45_k_run_scales(scales, block_mins, $hi, $b, $mins)
        }
    }};
}

/// Q4_K or Q5_K times a Q8_0 row (`hi`; `lo` unused) or, with `TWO`, a [`Q16Row`]'s halves.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn dot_q45_k_vnni<const Q5: bool, const TWO: bool>(
    row: RowRef<'_>,
    hi: &Q8Row,
    lo: &Q8Row,
    totals: &[f32],
) -> f32 {
    let bytes = row.quant_stride;
    let mask = _mm256_set1_epi8(0x0F);
    // Lanes 0..8 take sub-block 2c's scale, 8..16 sub-block 2c + 1's.
    let lanes = |c: i32| _mm512_mask_set1_epi32(_mm512_set1_epi32(2 * c), 0xff00, 2 * c + 1);
    let chunk_lanes = [lanes(0), lanes(1), lanes(2), lanes(3)];
    let (mut acc, mut mins) = (_mm512_setzero_ps(), _mm256_setzero_ps());
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let qs = &block[if Q5 { 48 } else { 16 }..];
        // Safety: a Q5_K block holds 32 bytes of fifth bits at 16 (a Q4_K block, its quants: unused).
        let high = unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) };
        let scales = _mm512_castps256_ps512(q45_k_block_scales!(TWO, block, hi, lo, totals, b, &mut mins));
        for (chunk, lanes) in chunk_lanes.iter().enumerate() {
            // Safety: `qs` holds 128 bytes; this reads 32 at 32 · chunk.
            let q = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * chunk).cast()) };
            let (mut even, mut odd) =
                (_mm256_and_si256(q, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(q), mask));
            if Q5 {
                even = _mm256_or_si256(even, fifth_bits(high, 2 * chunk));
                odd = _mm256_or_si256(odd, fifth_bits(high, 2 * chunk + 1));
            }
            let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(even), odd);
            let run = 8 * b + 2 * chunk;
            let mut sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, load_q8x64(hi, run));
            if TWO {
                // At most 4 · 31 · 127 · 256 + 4 · 31 · 128 a lane: no overflow.
                sums = _mm512_dpbusd_epi32(_mm512_slli_epi32::<8>(sums), w, load_q8x64(lo, run));
            }
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_permutexvar_ps(*lanes, scales), acc);
        }
    }
    _mm512_reduce_add_ps(acc) - hsum256(mins)
}

/// A Q6_K block's sixteen 16-value scales times `d` and their runs' `dx` (scale `j` under run `j / 2`):
/// scales 0..8 in the first register, 8..16 in the second.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_block_scales(block: &[u8], x: &Q8Row, b: usize) -> [__m256; 2] {
    let d = _mm256_set1_ps(f16_at(block, 208));
    // Safety: a Q6_K block holds 16 scale bytes at 192.
    let sc = unsafe { _mm_loadu_si128(block.as_ptr().add(192).cast()) };
    let (lo, hi) = (_mm256_cvtepi8_epi32(sc), _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(sc)));
    let dx = run_scales(x, b);
    let dx_lo = _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    let dx_hi = _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
    [
        _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(lo), dx_lo), d),
        _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hi), dx_hi), d),
    ]
}

/// A Q6_K row times a Q8_0-quantised `x` (`vpdpbusd` on the unsigned 6-bit quants, then 32 · Σ xq taken
/// off): two runs of 32 a 512-bit register, each lane of four values under one of the four 16-value scales,
/// per 16 values `dx · (d · sc) · Σ (q − 32)·xq`, as `k_quant_q8::dot`; a block's scales made once.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q6_k_q8_vnni(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q6_k_vnni::<false>(row, x, x)
}

/// A Q6_K row times a [`Q16Row`]: as [`dot_q4_k_q16_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q6_k_q16_vnni(row: RowRef<'_>, x: &Q16Row) -> f32 {
    dot_q6_k_vnni::<true>(row, &x.hi, &x.lo)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn dot_q6_k_vnni<const TWO: bool>(row: RowRef<'_>, hi: &Q8Row, lo: &Q8Row) -> f32 {
    let bytes = row.quant_stride;
    let ones = _mm512_set1_epi8(1);
    // Lane i of the register of runs r, r + 1 (values 4i .. 4i + 4 of its 64) takes scale 2r + i / 4.
    let lanes = |r: i32| {
        _mm512_add_epi32(
            _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
            _mm512_set1_epi32(2 * r),
        )
    };
    let run_lanes = [lanes(0), lanes(2), lanes(4), lanes(6)];
    let mut acc = _mm512_setzero_ps();
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let (ql, qh) = (&block[..128], &block[128..192]);
        let [first, second] = q6_k_block_scales(block, if TWO { lo } else { hi }, b);
        // (`vinsertf64x4`: AVX-512F; the f32x8 form needs DQ.)
        let scales = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(first)),
            _mm256_castps_pd(second),
        ));
        for half in 0..2 {
            // Safety: `qh` holds 64 bytes; this reads 32 at 32 · half.
            let high = unsafe { _mm256_loadu_si256(qh.as_ptr().add(32 * half).cast()) };
            for k in [0, 2] {
                let (w0, w1) = (q6_quants(ql, high, half, k), q6_quants(ql, high, half, k + 1));
                let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(w0), w1);
                let run = 8 * b + 4 * half + k;
                let xv = load_q8x64(hi, run);
                let mut qx = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xv);
                let mut sx = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xv);
                if TWO {
                    // At most 4 · 63 · 127 · 256 + 4 · 63 · 128 a lane: no overflow.
                    let xl = load_q8x64(lo, run);
                    qx = _mm512_dpbusd_epi32(_mm512_slli_epi32::<8>(qx), w, xl);
                    sx = _mm512_dpbusd_epi32(_mm512_slli_epi32::<8>(sx), ones, xl);
                }
                let sums = _mm512_cvtepi32_ps(_mm512_sub_epi32(qx, _mm512_slli_epi32::<5>(sx)));
                let scale = _mm512_permutexvar_ps(run_lanes[2 * half + k / 2], scales);
                acc = _mm512_fmadd_ps(sums, scale, acc);
            }
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// The int32 sums of four consecutive products of unsigned `w` (at most 63) and signed `x`, eight lanes:
/// `vpmaddubsw` pairs (at most 2 · 63 · 128, no i16 saturation) then `vpmaddwd` by ones.
#[inline]
#[target_feature(enable = "avx2")]
fn dot_u8_i8_by_4(w: __m256i, x: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
}

/// 32 int8 values of `x` from run `r`.
#[inline]
#[target_feature(enable = "avx2")]
fn load_q8x32(x: &Q8Row, r: usize) -> __m256i {
    let q = &x.quants[r * BLOCK..][..BLOCK];
    // Safety: `q` holds 32 bytes.
    unsafe { _mm256_loadu_si256(q.as_ptr().cast()) }
}

/// [`dot_q4_k_q8_vnni`] on AVX2: a sub-block a 256-bit register.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q4_k_q8_avx2(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_avx2::<false, false>(row, x, x, &[])
}

/// [`dot_q5_k_q8_vnni`] on AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q5_k_q8_avx2(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_avx2::<true, false>(row, x, x, &[])
}

/// [`dot_q4_k_q16_vnni`] on AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q4_k_q16_avx2(row: RowRef<'_>, x: &Q16Row) -> f32 {
    dot_q45_k_avx2::<false, true>(row, &x.hi, &x.lo, &x.totals)
}

/// [`dot_q5_k_q16_vnni`] on AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q5_k_q16_avx2(row: RowRef<'_>, x: &Q16Row) -> f32 {
    dot_q45_k_avx2::<true, true>(row, &x.hi, &x.lo, &x.totals)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q45_k_avx2<const Q5: bool, const TWO: bool>(
    row: RowRef<'_>,
    hi: &Q8Row,
    lo: &Q8Row,
    totals: &[f32],
) -> f32 {
    let bytes = row.quant_stride;
    let mask = _mm256_set1_epi8(0x0F);
    let (mut acc, mut mins) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let qs = &block[if Q5 { 48 } else { 16 }..];
        // Safety: a Q5_K block holds 32 bytes of fifth bits at 16 (a Q4_K block, its quants: unused).
        let high = unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) };
        let scales = q45_k_block_scales!(TWO, block, hi, lo, totals, b, &mut mins);
        for chunk in 0..4 {
            // Safety: `qs` holds 128 bytes; this reads 32 at 32 · chunk.
            let q = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * chunk).cast()) };
            let nibbles = [_mm256_and_si256(q, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(q), mask)];
            for (half, w) in nibbles.into_iter().enumerate() {
                let sub = 2 * chunk + half;
                let w = if Q5 { _mm256_or_si256(w, fifth_bits(high, sub)) } else { w };
                let mut sums = dot_u8_i8_by_4(w, load_q8x32(hi, 8 * b + sub));
                if TWO {
                    let low = dot_u8_i8_by_4(w, load_q8x32(lo, 8 * b + sub));
                    sums = _mm256_add_epi32(_mm256_slli_epi32::<8>(sums), low);
                }
                let scale = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(sub as i32));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
            }
        }
    }
    hsum256(acc) - hsum256(mins)
}

/// [`dot_q6_k_q8_vnni`] on AVX2: a run of 32 a 256-bit register, lanes 0..4 under its first 16-value scale
/// and 4..8 under its second; the 32 · Σ xq offsets from the input's sums, eight lanes a block.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q6_k_q8_avx2(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q6_k_avx2::<false>(row, x, x)
}

/// [`dot_q6_k_q16_vnni`] on AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q6_k_q16_avx2(row: RowRef<'_>, x: &Q16Row) -> f32 {
    dot_q6_k_avx2::<true>(row, &x.hi, &x.lo)
}

/// The 32 · Σ xq offsets of `x`'s super-block `b` under its Q6_K block's `scales`, added into `offsets`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn q6_k_offsets(scales: &[__m256; 2], x: &Q8Row, b: usize, offsets: &mut __m256) {
    // Safety: `x.sums` holds 16 sums of 16 a super-block.
    let sums = unsafe {
        let s = x.sums[16 * b..][..16].as_ptr();
        [_mm256_loadu_si256(s.cast()), _mm256_loadu_si256(s.add(8).cast())]
    };
    for (s, sum) in scales.iter().zip(sums) {
        *offsets = _mm256_fmadd_ps(*s, _mm256_cvtepi32_ps(sum), *offsets);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q6_k_avx2<const TWO: bool>(row: RowRef<'_>, hi: &Q8Row, lo: &Q8Row) -> f32 {
    let bytes = row.quant_stride;
    let (mut acc, mut offsets) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..row.blocks {
        prefetch_block(&row, b);
        let block = &row.quants[b * bytes..][..bytes];
        let (ql, qh) = (&block[..128], &block[128..192]);
        let mut scales = q6_k_block_scales(block, hi, b);
        q6_k_offsets(&scales, hi, b, &mut offsets);
        if TWO {
            scales = q6_k_block_scales(block, lo, b);
            q6_k_offsets(&scales, lo, b, &mut offsets);
        }
        for (half, half_scales) in scales.into_iter().enumerate() {
            // Safety: `qh` holds 64 bytes; this reads 32 at 32 · half.
            let high = unsafe { _mm256_loadu_si256(qh.as_ptr().add(32 * half).cast()) };
            for k in 0..4 {
                let q = q6_quants(ql, high, half, k);
                let run = 8 * b + 4 * half + k;
                let mut sums = dot_u8_i8_by_4(q, load_q8x32(hi, run));
                if TWO {
                    sums = _mm256_add_epi32(
                        _mm256_slli_epi32::<8>(sums),
                        dot_u8_i8_by_4(q, load_q8x32(lo, run)),
                    );
                }
                // Run 4 · half + k's two scales: 2k and 2k + 1 of the half's register.
                let at = 2 * k as i32;
                let lanes = _mm256_setr_epi32(at, at, at, at, at + 1, at + 1, at + 1, at + 1);
                acc = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(sums),
                    _mm256_permutevar8x32_ps(half_scales, lanes),
                    acc,
                );
            }
        }
    }
    hsum256(acc) - 32.0 * hsum256(offsets)
}
