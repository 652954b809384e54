//! K-quant rows (Q2_K to Q6_K) times f32 inputs: each super-block's quants widened to f32 eight at a time
//! (AVX2; Q4_K sixteen on the AVX-512 path) and multiplied as they are unpacked, one scale a sub-block,
//! without writing the dequantised values out; and times Q8_0-quantised inputs with integer dot products
//! (AVX-512 VNNI's `vpdpbusd`, 64 values an instruction; AVX2's `vpmaddubsw`, 32; `k_quant_q8` their
//! reference; Q4_K to Q6_K). The layouts are ggml-common.h's (KQUANTS.md §1.4-§1.8).

use core::arch::x86_64::*;

use diskformer_gguf::q4_k_scale_min;

use super::x86::{f16_at, hsum256};
use crate::matrix::{K_BLOCK, RowRef};
use crate::{BLOCK, Q8Row};

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
        let block = &row.quants[b * bytes..][..bytes];
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (scales, qs) = (&block[4..16], &block[if Q5 { 48 } else { 16 }..]);
        // Safety: a Q5_K block holds 32 bytes of fifth bits at 16 (a Q4_K block, its quants: unused).
        let high = unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) };
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
                let (sc, m) = q4_k_scale_min(sub, scales);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d * f32::from(sc)), qx, acc);
                acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * f32::from(m)), sx, acc);
            }
        }
    }
    hsum256(acc)
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
        let block = &row.quants[b * bytes..][..bytes];
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (scales, qs) = (&block[4..16], &block[16..144]);
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
            let (sc, m) = q4_k_scale_min(sub, scales);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(d * f32::from(sc)), qx, acc);
            acc = _mm512_fnmadd_ps(_mm512_set1_ps(dmin * f32::from(m)), sx, acc);
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// 64 int8 values of `x` from run `r` (32 values a run).
#[target_feature(enable = "avx512f")]
fn load_q8x64(x: &Q8Row, r: usize) -> __m512i {
    let q = &x.quants[r * BLOCK..][..2 * BLOCK];
    // Safety: `q` holds 64 bytes.
    unsafe { _mm512_loadu_si512(q.as_ptr().cast()) }
}

/// `a` in lanes 0..8, `b` in lanes 8..16.
#[target_feature(enable = "avx512f")]
fn halves(a: f32, b: f32) -> __m512 {
    _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b))
}

/// A Q4_K row times a Q8_0-quantised `x` (`vpdpbusd`: the nibbles are the unsigned operand): two sub-blocks
/// a 512-bit register, per sub-block `dx · ((d · sc) · Σ q·xq − (dmin · m) · Σ xq)`, as
/// `k_quant_q8::dot`. `Σ xq` is the input's own (`Q8Row::sums`), so the minimums' term is a few scalars a
/// block; `d` and `dmin` multiply a block's sums once.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q4_k_q8_vnni(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_q8_vnni::<false>(row, x)
}

/// [`dot_q4_k_q8_vnni`] for Q5_K: each quant's fifth bit (bit `sub` of `qh[j]`) added as 16.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q5_k_q8_vnni(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_q8_vnni::<true>(row, x)
}

/// Bit `sub` of each of the 32 bytes `high`, as 16 (a 16-bit shift moves each byte's bit `sub` to its bit 0).
#[target_feature(enable = "avx2")]
fn fifth_bits(high: __m256i, sub: usize) -> __m256i {
    let bits = _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128(sub as i32)), _mm256_set1_epi8(1));
    _mm256_slli_epi16::<4>(bits)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn dot_q45_k_q8_vnni<const Q5: bool>(row: RowRef<'_>, x: &Q8Row) -> f32 {
    let bytes = row.quant_stride;
    let mask = _mm256_set1_epi8(0x0F);
    let (mut acc, mut mins) = (_mm512_setzero_ps(), 0f32);
    for b in 0..row.blocks {
        let block = &row.quants[b * bytes..][..bytes];
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (scales, qs) = (&block[4..16], &block[if Q5 { 48 } else { 16 }..]);
        // Safety: a Q5_K block holds 32 bytes of fifth bits at 16 (a Q4_K block, its quants: unused).
        let high = unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) };
        let (mut block_acc, mut block_mins) = (_mm512_setzero_ps(), 0f32);
        for chunk in 0..4 {
            // Safety: `qs` holds 128 bytes; this reads 32 at 32 · chunk.
            let q = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * chunk).cast()) };
            let (mut lo, mut hi) =
                (_mm256_and_si256(q, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(q), mask));
            if Q5 {
                lo = _mm256_or_si256(lo, fifth_bits(high, 2 * chunk));
                hi = _mm256_or_si256(hi, fifth_bits(high, 2 * chunk + 1));
            }
            let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
            let r = 8 * b + 2 * chunk;
            let qx = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, load_q8x64(x, r)));
            let (sc0, m0) = q4_k_scale_min(2 * chunk, scales);
            let (sc1, m1) = q4_k_scale_min(2 * chunk + 1, scales);
            let (dx0, dx1) = (x.scales[r], x.scales[r + 1]);
            block_acc = _mm512_fmadd_ps(qx, halves(dx0 * f32::from(sc0), dx1 * f32::from(sc1)), block_acc);
            let sx = |r: usize| (x.sums[2 * r] + x.sums[2 * r + 1]) as f32;
            block_mins += dx0 * f32::from(m0) * sx(r) + dx1 * f32::from(m1) * sx(r + 1);
        }
        acc = _mm512_fmadd_ps(block_acc, _mm512_set1_ps(d), acc);
        mins += dmin * block_mins;
    }
    _mm512_reduce_add_ps(acc) - mins
}

/// A Q6_K row times a Q8_0-quantised `x` (`vpdpbusd` on the unsigned 6-bit quants, then 32 · Σ xq taken
/// off): two runs of 32 a 512-bit register, each lane of four values under one of the four 16-value scales,
/// per 16 values `dx · (d · sc) · Σ (q − 32)·xq`, as `k_quant_q8::dot`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_q6_k_q8_vnni(row: RowRef<'_>, x: &Q8Row) -> f32 {
    let bytes = row.quant_stride;
    let ones = _mm512_set1_epi8(1);
    // Lane i of a register (values 4i .. 4i + 4 of its 64) takes scale i / 4 of its four.
    let scale_of_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    let mut acc = _mm512_setzero_ps();
    for b in 0..row.blocks {
        let block = &row.quants[b * bytes..][..bytes];
        let d = f16_at(block, 208);
        let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
        for half in 0..2 {
            // Safety: `qh` holds 64 bytes; this reads 32 at 32 · half.
            let high = unsafe { _mm256_loadu_si256(qh.as_ptr().add(32 * half).cast()) };
            for k in [0, 2] {
                let (w0, w1) = (q6_quants(ql, high, half, k), q6_quants(ql, high, half, k + 1));
                let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(w0), w1);
                let r = 8 * b + 4 * half + k;
                let xv = load_q8x64(x, r);
                let qx = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xv);
                let sx = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xv);
                let sums = _mm512_cvtepi32_ps(_mm512_sub_epi32(qx, _mm512_slli_epi32::<5>(sx)));
                let s = &scales[8 * half + 2 * k..][..4];
                let (dx0, dx1) = (d * x.scales[r], d * x.scales[r + 1]);
                let four = _mm_set_ps(
                    dx1 * f32::from(s[3] as i8),
                    dx1 * f32::from(s[2] as i8),
                    dx0 * f32::from(s[1] as i8),
                    dx0 * f32::from(s[0] as i8),
                );
                let scale = _mm512_permutexvar_ps(scale_of_lane, _mm512_castps128_ps512(four));
                acc = _mm512_fmadd_ps(sums, scale, acc);
            }
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// The int32 sums of four consecutive products of unsigned `w` (at most 63) and signed `x`, eight lanes:
/// `vpmaddubsw` pairs (at most 2 · 63 · 128, no i16 saturation) then `vpmaddwd` by ones.
#[target_feature(enable = "avx2")]
fn dot_u8_i8_by_4(w: __m256i, x: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
}

/// 32 int8 values of `x` from run `r`.
#[target_feature(enable = "avx2")]
fn load_q8x32(x: &Q8Row, r: usize) -> __m256i {
    let q = &x.quants[r * BLOCK..][..BLOCK];
    // Safety: `q` holds 32 bytes.
    unsafe { _mm256_loadu_si256(q.as_ptr().cast()) }
}

/// [`dot_q4_k_q8_vnni`] on AVX2: a sub-block a 256-bit register.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q4_k_q8_avx2(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_q8_avx2::<false>(row, x)
}

/// [`dot_q5_k_q8_vnni`] on AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q5_k_q8_avx2(row: RowRef<'_>, x: &Q8Row) -> f32 {
    dot_q45_k_q8_avx2::<true>(row, x)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q45_k_q8_avx2<const Q5: bool>(row: RowRef<'_>, x: &Q8Row) -> f32 {
    let bytes = row.quant_stride;
    let mask = _mm256_set1_epi8(0x0F);
    let (mut acc, mut mins) = (_mm256_setzero_ps(), 0f32);
    for b in 0..row.blocks {
        let block = &row.quants[b * bytes..][..bytes];
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (scales, qs) = (&block[4..16], &block[if Q5 { 48 } else { 16 }..]);
        // Safety: a Q5_K block holds 32 bytes of fifth bits at 16 (a Q4_K block, its quants: unused).
        let high = unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) };
        let (mut block_acc, mut block_mins) = (_mm256_setzero_ps(), 0f32);
        for chunk in 0..4 {
            // Safety: `qs` holds 128 bytes; this reads 32 at 32 · chunk.
            let q = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * chunk).cast()) };
            let nibbles = [_mm256_and_si256(q, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(q), mask)];
            for (half, w) in nibbles.into_iter().enumerate() {
                let sub = 2 * chunk + half;
                let w = if Q5 { _mm256_or_si256(w, fifth_bits(high, sub)) } else { w };
                let r = 8 * b + sub;
                let qx = _mm256_cvtepi32_ps(dot_u8_i8_by_4(w, load_q8x32(x, r)));
                let (sc, m) = q4_k_scale_min(sub, scales);
                block_acc = _mm256_fmadd_ps(qx, _mm256_set1_ps(x.scales[r] * f32::from(sc)), block_acc);
                block_mins += x.scales[r] * f32::from(m) * (x.sums[2 * r] + x.sums[2 * r + 1]) as f32;
            }
        }
        acc = _mm256_fmadd_ps(block_acc, _mm256_set1_ps(d), acc);
        mins += dmin * block_mins;
    }
    hsum256(acc) - mins
}

/// [`dot_q6_k_q8_vnni`] on AVX2: a run of 32 a 256-bit register, lanes 0..4 under its first 16-value scale
/// and 4..8 under its second; the 32 · Σ xq offsets from the input's sums, in scalars.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q6_k_q8_avx2(row: RowRef<'_>, x: &Q8Row) -> f32 {
    let bytes = row.quant_stride;
    let (mut acc, mut offsets) = (_mm256_setzero_ps(), 0f32);
    for b in 0..row.blocks {
        let block = &row.quants[b * bytes..][..bytes];
        let d = f16_at(block, 208);
        let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
        let (mut block_acc, mut block_offsets) = (_mm256_setzero_ps(), 0f32);
        for half in 0..2 {
            // Safety: `qh` holds 64 bytes; this reads 32 at 32 · half.
            let high = unsafe { _mm256_loadu_si256(qh.as_ptr().add(32 * half).cast()) };
            for k in 0..4 {
                let q = q6_quants(ql, high, half, k);
                let r = 8 * b + 4 * half + k;
                let qx = _mm256_cvtepi32_ps(dot_u8_i8_by_4(q, load_q8x32(x, r)));
                let (s0, s1) = (
                    f32::from(scales[8 * half + 2 * k] as i8),
                    f32::from(scales[8 * half + 2 * k + 1] as i8),
                );
                let dx = x.scales[r];
                let scale = _mm256_set_m128(_mm_set1_ps(dx * s1), _mm_set1_ps(dx * s0));
                block_acc = _mm256_fmadd_ps(qx, scale, block_acc);
                block_offsets += dx * 32.0 * (s0 * x.sums[2 * r] as f32 + s1 * x.sums[2 * r + 1] as f32);
            }
        }
        acc = _mm256_fmadd_ps(block_acc, _mm256_set1_ps(d), acc);
        offsets += d * block_offsets;
    }
    hsum256(acc) - offsets
}
