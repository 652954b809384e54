//! Quant planes: Q8_0 and Q4_0 blocks split into a plane of quants and a plane of f16 scales, and joined
//! back bit-exact. GPU kernels read the planes with aligned word loads, which the 34- and 18-byte interleaved
//! blocks do not allow.
//!
//! Block layouts (ggml-common.h): `block_q8_0 { ggml_half d; int8_t qs[32]; }`,
//! `block_q4_0 { ggml_half d; uint8_t qs[16]; }` where the low nibble of `qs[j]` is value `j` and the high
//! nibble value `j + 16`. Planes keep those bytes as they are: the quant plane is every block's `qs` in
//! order, the scale plane every block's `d` (little-endian f16) in order.

use crate::{Error, Result, TensorType};

/// Bytes of one block's scale.
const SCALE_BYTES: usize = 2;

/// Bytes of quants per block for the types that have planes.
fn quant_bytes(ty: TensorType, operation: &'static str) -> Result<usize> {
    match ty {
        TensorType::Q8_0 => Ok(32),
        TensorType::Q4_0 => Ok(16),
        _ => Err(Error::UnsupportedType { operation, ty }),
    }
}

/// Sizes of the quant and scale planes for `n_blocks` blocks of `ty` (Q8_0 or Q4_0).
///
/// # Errors
/// [`Error::UnsupportedType`] for other types.
pub fn plane_sizes(ty: TensorType, n_blocks: usize) -> Result<(usize, usize)> {
    Ok((n_blocks * quant_bytes(ty, "plane_sizes")?, n_blocks * SCALE_BYTES))
}

fn check_len(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(Error::BadLength { what: what.to_owned(), expected: expected as u64, got: got as u64 });
    }
    Ok(())
}

/// Splits `blocks` (whole Q8_0 or Q4_0 blocks) into `quants` and `scales`, which must be exactly the plane
/// sizes.
///
/// # Errors
/// [`Error::UnsupportedType`], or [`Error::BadLength`] when `blocks` is not whole blocks or a plane has the
/// wrong size.
pub fn split_planes(ty: TensorType, blocks: &[u8], quants: &mut [u8], scales: &mut [u8]) -> Result<()> {
    let q = quant_bytes(ty, "split_planes")?;
    let block = q + SCALE_BYTES;
    if !blocks.len().is_multiple_of(block) {
        return Err(Error::BadLength {
            what: format!("{ty} blocks (a multiple of {block})"),
            expected: (blocks.len() / block * block) as u64,
            got: blocks.len() as u64,
        });
    }
    let n = blocks.len() / block;
    check_len("quant plane", n * q, quants.len())?;
    check_len("scale plane", n * SCALE_BYTES, scales.len())?;
    for ((b, qs), d) in
        blocks.chunks_exact(block).zip(quants.chunks_exact_mut(q)).zip(scales.chunks_exact_mut(2))
    {
        d.copy_from_slice(&b[..SCALE_BYTES]);
        qs.copy_from_slice(&b[SCALE_BYTES..]);
    }
    Ok(())
}

/// Joins `quants` and `scales` back into interleaved blocks; the inverse of [`split_planes`].
///
/// # Errors
/// [`Error::UnsupportedType`], or [`Error::BadLength`] when the three sizes disagree.
pub fn join_planes(ty: TensorType, quants: &[u8], scales: &[u8], blocks: &mut [u8]) -> Result<()> {
    let q = quant_bytes(ty, "join_planes")?;
    let n = scales.len() / SCALE_BYTES;
    check_len("scale plane", n * SCALE_BYTES, scales.len())?;
    check_len("quant plane", n * q, quants.len())?;
    check_len(&format!("{ty} blocks"), n * (q + SCALE_BYTES), blocks.len())?;
    for ((b, qs), d) in
        blocks.chunks_exact_mut(q + SCALE_BYTES).zip(quants.chunks_exact(q)).zip(scales.chunks_exact(2))
    {
        b[..SCALE_BYTES].copy_from_slice(d);
        b[SCALE_BYTES..].copy_from_slice(qs);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_then_join_is_identity() {
        for ty in [TensorType::Q8_0, TensorType::Q4_0] {
            let block = ty.block_bytes() as usize;
            let blocks: Vec<u8> = (0..3 * block).map(|i| (i * 37 + 11) as u8).collect();
            let (nq, ns) = plane_sizes(ty, 3).unwrap();
            let (mut q, mut s) = (vec![0; nq], vec![0; ns]);
            split_planes(ty, &blocks, &mut q, &mut s).unwrap();
            assert_eq!(&s[2..4], &blocks[block..block + 2]);
            let mut back = vec![0; blocks.len()];
            join_planes(ty, &q, &s, &mut back).unwrap();
            assert_eq!(back, blocks);
        }
    }

    #[test]
    fn wrong_sizes_and_types_are_errors() {
        let mut q = vec![0; 32];
        let mut s = vec![0; 2];
        assert!(matches!(
            split_planes(TensorType::Q8_0, &[0; 35], &mut q, &mut s),
            Err(Error::BadLength { .. })
        ));
        assert!(matches!(
            split_planes(TensorType::Q8_0, &[0; 34], &mut q[..31], &mut s),
            Err(Error::BadLength { .. })
        ));
        assert!(matches!(
            split_planes(TensorType::Q4K, &[0; 144], &mut q, &mut s),
            Err(Error::UnsupportedType { .. })
        ));
        assert!(matches!(join_planes(TensorType::Q8_0, &q, &s, &mut [0; 33]), Err(Error::BadLength { .. })));
    }
}
