//! The x86-64 paths: AVX2 (`vpmaddubsw` on |w| and x·sign(w), as ggml's `mul_sum_i8_pairs`) and AVX-512 VNNI
//! (`vpdpbusd`, two blocks a 512-bit register). Each reads a block's quants with unaligned loads, so a GGUF's
//! 34- and 18-byte blocks and a store's planes go through the same code.

use core::arch::x86_64::*;

use crate::matrix::{RowRef, WeightType};
use crate::{BLOCK, Input};

/// How far ahead of the block being multiplied its row's quants are prefetched (0: none).
const PREFETCH_BYTES: usize = 512;

/// Asks for the quants `PREFETCH_BYTES` past block `b`'s into L1 (rows lie one after another in a
/// matrix, so near a row's end this reaches into the next row's).
#[inline(always)]
fn prefetch_ahead(row: &RowRef<'_>, b: usize) {
    if PREFETCH_BYTES > 0 {
        // Safety: a prefetch reads nothing architecturally and cannot fault; the address may lie past the
        // slice (hence `wrapping_add`).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(
                row.quants.as_ptr().wrapping_add(b * row.quant_stride + PREFETCH_BYTES).cast(),
            )
        };
    }
}

/// The f16 at byte `at` of `b` as f32.
#[target_feature(enable = "f16c")]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// An f16 scale as f32.
#[target_feature(enable = "f16c")]
pub(super) fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Block `b`'s 32 weights as int8 (Q4_0's offset removed): value j in byte j.
#[target_feature(enable = "avx2")]
fn load_weights(ty: WeightType, row: &RowRef<'_>, b: usize) -> __m256i {
    match ty {
        WeightType::Q8_0 => {
            let q = row.block_quants(b, 32);
            // Safety: `q` holds 32 bytes.
            unsafe { _mm256_loadu_si256(q.as_ptr().cast()) }
        }
        WeightType::Q4_0 => {
            let q = row.block_quants(b, 16);
            // Safety: `q` holds 16 bytes.
            let q = unsafe { _mm_loadu_si128(q.as_ptr().cast()) };
            let m = _mm_set1_epi8(0x0f);
            let lo = _mm_and_si128(q, m);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m);
            _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8))
        }
        WeightType::Dequantised(_) => unreachable!("dequantised types take dot::dequantised"),
    }
}

#[target_feature(enable = "avx2")]
pub(super) fn hsum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// `w · x` for one block of f32 input, 8 lanes.
#[target_feature(enable = "avx2,fma")]
fn block_f32_avx2(w: __m256i, x: &[f32]) -> __m256 {
    let x = &x[..BLOCK];
    let halves = [_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w)];
    let mut inner = _mm256_setzero_ps();
    for (h, half) in halves.into_iter().enumerate() {
        for (i, part) in [half, _mm_srli_si128::<8>(half)].into_iter().enumerate() {
            let wf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
            // Safety: `x` holds 32 values; this reads 8 at 16·h + 8·i.
            let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(16 * h + 8 * i)) };
            inner = _mm256_fmadd_ps(wf, xv, inner);
        }
    }
    inner
}

/// AVX2 `row · x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_avx2(ty: WeightType, row: RowRef<'_>, x: Input<'_>) -> f32 {
    let mut acc = _mm256_setzero_ps();
    match x {
        Input::F32(x) => {
            for b in 0..row.blocks {
                prefetch_ahead(&row, b);
                let inner = block_f32_avx2(load_weights(ty, &row, b), &x[b * BLOCK..]);
                acc = _mm256_fmadd_ps(inner, _mm256_set1_ps(f16_to_f32(row.scale_bits(b))), acc);
            }
        }
        Input::Q16(_) => unreachable!("dot::dot takes a Q16 input's halves apart"),
        Input::Q8(x) => {
            let ones = _mm256_set1_epi16(1);
            for b in 0..row.blocks {
                prefetch_ahead(&row, b);
                let w = load_weights(ty, &row, b);
                let xq = &x.quants[b * BLOCK..][..BLOCK];
                // Safety: `xq` holds 32 bytes.
                let xv = unsafe { _mm256_loadu_si256(xq.as_ptr().cast()) };
                // |w| as u8 (|-128| = 128) times x·sign(w): pairs sum to at most 2·128·127, no i16 saturation.
                let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
                let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                let d = f16_to_f32(row.scale_bits(b)) * x.scales[b];
                acc = _mm256_fmadd_ps(sums, _mm256_set1_ps(d), acc);
            }
        }
    }
    hsum256(acc)
}

/// x negated where w is negative, and |w| as u8: `vpdpbusd`'s unsigned × signed operands for w · x.
#[target_feature(enable = "avx512f,avx512bw")]
fn signed_pair512(w: __m512i, x: __m512i) -> (__m512i, __m512i) {
    let negative = _mm512_movepi8_mask(w);
    (_mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x))
}

/// AVX-512 VNNI `row · x`: two blocks a register, the odd last one with 256-bit VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_avx512(ty: WeightType, row: RowRef<'_>, x: Input<'_>) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let pairs = row.blocks / 2;
    match x {
        Input::F32(x) => {
            for b in 0..row.blocks {
                prefetch_ahead(&row, b);
                let w = load_weights(ty, &row, b);
                let xb = &x[b * BLOCK..][..BLOCK];
                let mut inner = _mm512_setzero_ps();
                for (h, half) in
                    [_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w)].into_iter().enumerate()
                {
                    let wf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(half));
                    // Safety: `xb` holds 32 values; this reads 16 at 16·h.
                    let xv = unsafe { _mm512_loadu_ps(xb.as_ptr().add(16 * h)) };
                    inner = _mm512_fmadd_ps(wf, xv, inner);
                }
                acc = _mm512_fmadd_ps(inner, _mm512_set1_ps(f16_to_f32(row.scale_bits(b))), acc);
            }
        }
        Input::Q16(_) => unreachable!("dot::dot takes a Q16 input's halves apart"),
        Input::Q8(x) => {
            for p in 0..pairs {
                let b = 2 * p;
                prefetch_ahead(&row, b);
                let w = _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(load_weights(ty, &row, b)),
                    load_weights(ty, &row, b + 1),
                );
                let xq = &x.quants[b * BLOCK..][..2 * BLOCK];
                // Safety: `xq` holds 64 bytes.
                let xv = unsafe { _mm512_loadu_si512(xq.as_ptr().cast()) };
                let (uw, sx) = signed_pair512(w, xv);
                let sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), uw, sx));
                let d0 = f16_to_f32(row.scale_bits(b)) * x.scales[b];
                let d1 = f16_to_f32(row.scale_bits(b + 1)) * x.scales[b + 1];
                let d = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
                acc = _mm512_fmadd_ps(sums, d, acc);
            }
            if row.blocks % 2 == 1 {
                let b = row.blocks - 1;
                let w = load_weights(ty, &row, b);
                let xq = &x.quants[b * BLOCK..][..BLOCK];
                // Safety: `xq` holds 32 bytes.
                let xv = unsafe { _mm256_loadu_si256(xq.as_ptr().cast()) };
                let sums = _mm256_dpbusd_epi32(
                    _mm256_setzero_si256(),
                    _mm256_sign_epi8(w, w),
                    _mm256_sign_epi8(xv, w),
                );
                let d = f16_to_f32(row.scale_bits(b)) * x.scales[b];
                let tail = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(d));
                acc = _mm512_add_ps(acc, _mm512_zextps256_ps512(tail));
            }
        }
    }
    _mm512_reduce_add_ps(acc)
}
