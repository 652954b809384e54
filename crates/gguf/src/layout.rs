//! Tensor shape rules shared by the reader and the writer (ggml's gguf.cpp checks).

use crate::{Error, Result, TensorType};

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;

/// The default `general.alignment` (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Element count and byte size of a tensor, after checking its dims as gguf.cpp does: at most four, each
/// non-negative as ggml's `int64_t`, a product that fits in `i64`, and rows of whole blocks.
pub(crate) fn tensor_size(name: &str, dims: &[u64], ty: TensorType) -> Result<(u64, u64)> {
    if dims.len() > MAX_DIMS as usize {
        return Err(Error::TooManyDims { name: name.to_owned(), n_dims: dims.len() as u32, max: MAX_DIMS });
    }
    for (index, &d) in dims.iter().enumerate() {
        if d > i64::MAX as u64 {
            return Err(Error::NegativeDim { name: name.to_owned(), index, value: d as i64 });
        }
    }
    let overflow = || Error::ElementCountOverflow { name: name.to_owned(), dims: dims.to_vec() };
    let n_elements = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or_else(overflow)?;
    if n_elements > i64::MAX as u64 {
        return Err(overflow());
    }
    let ne0 = dims.first().copied().unwrap_or(1);
    if !ne0.is_multiple_of(ty.block_size()) {
        return Err(Error::RowNotBlockAligned {
            name: name.to_owned(),
            ne0,
            ty,
            block_size: ty.block_size(),
        });
    }
    let n_bytes = ty.bytes_for(n_elements).ok_or_else(overflow)?;
    Ok((n_elements, n_bytes))
}

/// `offset` rounded up to a multiple of `alignment` (a power of two), or `None` on overflow.
pub(crate) fn align_up(offset: u64, alignment: u64) -> Option<u64> {
    Some(offset.checked_add(alignment - 1)? & !(alignment - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_blocks() {
        assert_eq!(tensor_size("t", &[64, 3], TensorType::Q8_0).unwrap(), (192, 204));
        assert_eq!(tensor_size("t", &[], TensorType::F32).unwrap(), (1, 4));
        assert!(matches!(
            tensor_size("t", &[1 << 32, 1 << 32], TensorType::F32),
            Err(Error::ElementCountOverflow { .. })
        ));
        // Fits in elements but not in bytes.
        assert!(matches!(
            tensor_size("t", &[1 << 62], TensorType::F32),
            Err(Error::ElementCountOverflow { .. })
        ));
    }

    #[test]
    fn align_up_rounds_to_power_of_two() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(33, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
    }
}
