//! CPU dequantisation to f32, bit-for-bit as ggml's `dequantize_row_*` (ggml-quants.c) computes it: the same
//! operations on f32 in the same order.

use half::f16;

use crate::{Error, Result, TensorType};

/// Dequantises `data` (whole blocks of `ty`) into `out`, which must hold exactly the values it encodes.
/// Supported: the types [`TensorType::dequantizable`] lists (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
/// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
///
/// # Errors
/// [`Error::UnsupportedType`] for other types; [`Error::BadLength`] when the sizes disagree.
pub fn dequantize(ty: TensorType, data: &[u8], out: &mut [f32]) -> Result<()> {
    let expected = ty.bytes_for(out.len() as u64);
    if expected != Some(data.len() as u64) {
        return Err(Error::BadLength {
            what: format!("{ty} data for {} values", out.len()),
            expected: expected.unwrap_or(0),
            got: data.len() as u64,
        });
    }
    let bb = ty.block_bytes() as usize;
    let bs = ty.block_size() as usize;
    let blocks = data.chunks_exact(bb).zip(out.chunks_exact_mut(bs));
    match ty {
        TensorType::F32 => blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        TensorType::F16 => blocks.for_each(|(b, y)| y[0] = f16_at(b, 0)),
        TensorType::BF16 => {
            blocks.for_each(|(b, y)| y[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
        }
        TensorType::Q8_0 => blocks.for_each(|(b, y)| q8_0_block(f16_at(b, 0), &b[2..], y)),
        TensorType::Q4_0 => blocks.for_each(|(b, y)| q4_0_block(f16_at(b, 0), &b[2..], y)),
        TensorType::Q4_1 => blocks.for_each(|(b, y)| q4_1_block(b, y)),
        TensorType::Q5_0 => blocks.for_each(|(b, y)| q5_block(b, false, y)),
        TensorType::Q5_1 => blocks.for_each(|(b, y)| q5_block(b, true, y)),
        TensorType::Q2K => blocks.for_each(|(b, y)| q2_k_block(b, y)),
        TensorType::Q3K => blocks.for_each(|(b, y)| q3_k_block(b, y)),
        TensorType::Q4K => blocks.for_each(|(b, y)| q4_k_block(b, y)),
        TensorType::Q5K => blocks.for_each(|(b, y)| q5_k_block(b, y)),
        TensorType::Q6K => blocks.for_each(|(b, y)| q6_k_block(b, y)),
        TensorType::IQ4NL => blocks.for_each(|(b, y)| iq4_nl_block(b, y)),
        TensorType::IQ4XS => blocks.for_each(|(b, y)| iq4_xs_block(b, y)),
        _ => return Err(Error::UnsupportedType { operation: "dequantize", ty }),
    }
    Ok(())
}

/// Dequantises Q8_0 or Q4_0 data held as planes (see [`crate::split_planes`]); equal to [`dequantize`] of
/// the joined blocks.
///
/// # Errors
/// [`Error::UnsupportedType`] for other types; [`Error::BadLength`] when the sizes disagree.
pub fn dequantize_planes(ty: TensorType, quants: &[u8], scales: &[u8], out: &mut [f32]) -> Result<()> {
    let (q, _) = crate::plane_sizes(ty, 1)?;
    let n_blocks = out.len() / 32;
    if !out.len().is_multiple_of(32) || quants.len() != n_blocks * q || scales.len() != n_blocks * 2 {
        return Err(Error::BadLength {
            what: format!(
                "{ty} planes for {} values (quants {}, scales {})",
                out.len(),
                quants.len(),
                scales.len()
            ),
            expected: (n_blocks * (q + 2)) as u64,
            got: (quants.len() + scales.len()) as u64,
        });
    }
    for ((qs, d), y) in quants.chunks_exact(q).zip(scales.chunks_exact(2)).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(d, 0);
        match ty {
            TensorType::Q8_0 => q8_0_block(d, qs, y),
            _ => q4_0_block(d, qs, y),
        }
    }
    Ok(())
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

fn q8_0_block(d: f32, qs: &[u8], y: &mut [f32]) {
    for (y, &q) in y.iter_mut().zip(qs) {
        *y = f32::from(q as i8) * d;
    }
}

fn q4_0_block(d: f32, qs: &[u8], y: &mut [f32]) {
    for (j, &q) in qs.iter().enumerate() {
        y[j] = (i32::from(q & 0x0F) - 8) as f32 * d;
        y[j + 16] = (i32::from(q >> 4) - 8) as f32 * d;
    }
}

/// `block_q4_1 { ggml_half d, m; uint8_t qs[16]; }`: `q · d + m`, low nibbles the first 16 values.
fn q4_1_block(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        y[j] = f32::from(q & 0xF) * d + m;
        y[j + 16] = f32::from(q >> 4) * d + m;
    }
}

/// `block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }` (`(q - 16) · d`) and `block_q5_1 { ggml_half
/// d, m; uint8_t qh[4]; uint8_t qs[16]; }` (`q · d + m`, `with_min`): bit k of the little-endian `qh` is
/// value k's fifth bit.
fn q5_block(b: &[u8], with_min: bool, y: &mut [f32]) {
    let d = f16_at(b, 0);
    let (m, rest) = if with_min { (f16_at(b, 2), &b[4..]) } else { (0.0, &b[2..]) };
    let qh = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    for (j, &q) in rest[4..20].iter().enumerate() {
        let x0 = u32::from(q & 0xF) | ((qh >> j) & 1) << 4;
        let x1 = u32::from(q >> 4) | ((qh >> (j + 16)) & 1) << 4;
        if with_min {
            y[j] = x0 as f32 * d + m;
            y[j + 16] = x1 as f32 * d + m;
        } else {
            y[j] = (x0 as i32 - 16) as f32 * d;
            y[j + 16] = (x1 as i32 - 16) as f32 * d;
        }
    }
}

/// `block_q2_K { uint8_t scales[16]; uint8_t qs[64]; ggml_half d, dmin; }`: 16 sub-blocks of 16, each
/// scale byte a 4-bit scale (low) and min (high); `(d · sc) · q - dmin · m`.
fn q2_k_block(b: &[u8], y: &mut [f32]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (v, y) in y.iter_mut().enumerate() {
        let (h, k, l) = (v / 128, (v % 128) / 32, v % 32);
        let q = (qs[32 * h + l] >> (2 * k)) & 3;
        let sc = scales[v / 16];
        let (dl, ml) = (d * f32::from(sc & 0xF), dmin * f32::from(sc >> 4));
        *y = dl * f32::from(q) - ml;
    }
}

/// `block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; ggml_half d; }`: a 2-bit quant,
/// its high bit in `hmask` (set: no -4), and 16 signed 6-bit scales; `(d · s) · q`.
fn q3_k_block(b: &[u8], y: &mut [f32]) {
    let (hmask, qs, scales) = (&b[..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    let scale = |j: usize| {
        let low = if j < 8 { scales[j] & 0xF } else { scales[j - 8] >> 4 };
        let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        i32::from(low | high << 4) - 32
    };
    for (v, y) in y.iter_mut().enumerate() {
        let (h, k, l) = (v / 128, (v % 128) / 32, v % 32);
        let low = i32::from((qs[32 * h + l] >> (2 * k)) & 3);
        let high = (hmask[l] >> (v / 32)) & 1;
        let q = low - if high == 1 { 0 } else { 4 };
        *y = (d * scale(v / 16) as f32) * q as f32;
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of a Q4_K or Q5_K block, packed
/// in its 12 scale bytes `q` (for kernels that unpack those blocks themselves).
pub fn q4_k_scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// `block_q4_K { ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; }`.
fn q4_k_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (chunk, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = q4_k_scale_min(2 * chunk, scales);
        let (sc2, m2) = q4_k_scale_min(2 * chunk + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        for l in 0..32 {
            y[l] = d1 * f32::from(q[l] & 0xF) - m1;
            y[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
        }
    }
}

/// `block_q5_K { ggml_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }`: Q4_K's scales
/// and nibbles, with value v's fifth bit at bit v / 32 of `qh[v % 32]`.
fn q5_k_block(b: &[u8], y: &mut [f32]) {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for (v, y) in y.iter_mut().enumerate() {
        let (sub, l) = (v / 32, v % 32);
        let byte = qs[32 * (v / 64) + l];
        let nibble = if sub % 2 == 0 { byte & 0xF } else { byte >> 4 };
        let q = nibble | ((qh[l] >> sub) & 1) << 4;
        let (sc, m) = q4_k_scale_min(sub, scales);
        *y = d * f32::from(sc) * f32::from(q) - min * f32::from(m);
    }
}

/// IQ4_NL's codebook (`kvalues_iq4nl`, ggml-common.h).
pub const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// `block_iq4_nl { ggml_half d; uint8_t qs[16]; }`: `d · codebook[nibble]`, low nibbles first.
fn iq4_nl_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        y[j] = d * f32::from(IQ4_VALUES[usize::from(q & 0xF)]);
        y[j + 16] = d * f32::from(IQ4_VALUES[usize::from(q >> 4)]);
    }
}

/// `block_iq4_xs { ggml_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; }`: 8 sub-blocks of
/// 32 with 6-bit scales (offset 32), each IQ4_NL's layout.
fn iq4_xs_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let (scales_l, qs) = (&b[4..8], &b[8..136]);
    for (sub, (q, y)) in qs.chunks_exact(16).zip(y.chunks_exact_mut(32)).enumerate() {
        let low = (scales_l[sub / 2] >> (4 * (sub % 2))) & 0xF;
        let high = ((scales_h >> (2 * sub)) & 3) as u8;
        let dl = d * f32::from(i16::from(low | high << 4) - 32);
        for (j, &q) in q.iter().enumerate() {
            y[j] = dl * f32::from(IQ4_VALUES[usize::from(q & 0xF)]);
            y[j + 16] = dl * f32::from(IQ4_VALUES[usize::from(q >> 4)]);
        }
    }
}

/// `block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }`.
fn q6_k_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = i32::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i32::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let s = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = s(0) * q1 as f32;
            y[l + 32] = s(2) * q2 as f32;
            y[l + 64] = s(4) * q3 as f32;
            y[l + 96] = s(6) * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_scales_signed_bytes() {
        let mut block = vec![0u8; 34];
        block[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        block[2] = (-4i8) as u8;
        block[3] = 6;
        let mut out = [0.0; 32];
        dequantize(TensorType::Q8_0, &block, &mut out).unwrap();
        assert_eq!(&out[..3], &[-2.0, 3.0, 0.0]);
    }

    #[test]
    fn q4_0_low_nibble_first_then_high() {
        let mut block = vec![0u8; 18];
        block[..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[2] = 0x9A; // low 0xA -> value 0: 10-8 = 2; high 0x9 -> value 16: 9-8 = 1
        let mut out = [0.0; 32];
        dequantize(TensorType::Q4_0, &block, &mut out).unwrap();
        assert_eq!((out[0], out[16], out[1]), (2.0, 1.0, -8.0));
    }

    #[test]
    fn every_type_said_dequantizable_is_and_no_other() {
        for ty in TensorType::ALL {
            let mut out = vec![0f32; ty.block_size() as usize];
            let ok = dequantize(ty, &vec![0; ty.block_bytes() as usize], &mut out).is_ok();
            assert_eq!(ok, ty.dequantizable(), "{ty}");
        }
    }

    #[test]
    fn unsupported_and_mis_sized_inputs_are_errors() {
        let mut out = [0.0; 32];
        let mut k_out = [0.0; 256];
        for (ty, bytes) in [(TensorType::Q8K, 292), (TensorType::IQ2XXS, 66), (TensorType::TQ1_0, 54)] {
            assert!(!ty.dequantizable());
            assert!(matches!(
                dequantize(ty, &vec![0; bytes], &mut k_out),
                Err(Error::UnsupportedType { .. })
            ));
        }
        assert!(matches!(dequantize(TensorType::Q8_0, &[0; 33], &mut out), Err(Error::BadLength { .. })));
        assert!(matches!(
            dequantize_planes(TensorType::Q8_0, &[0; 31], &[0; 2], &mut out),
            Err(Error::BadLength { .. })
        ));
    }
}
