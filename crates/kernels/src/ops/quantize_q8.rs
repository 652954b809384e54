use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `quantize_q8.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct QuantizeQ8Params {
    /// Rows of the input.
    pub rows: u32,
    /// Values a row, a multiple of 32.
    pub cols: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<QuantizeQ8Params>() == 16);

/// Bytes of one row of `cols` values as [`Kernels::quantize_q8`] writes it: `cols` int8, then `cols / 32`
/// f32 scales (9/32 of the f32 row).
pub fn q8_row_bytes(cols: u32) -> u64 {
    u64::from(cols) + f32s(u64::from(cols / 32))
}

/// 4-byte words of one input row of `cols` values as `kernel` reads it: a [`q8_row_bytes`] row for the int8
/// GEMMs and `expert_q8_gemv_xq` and its routed twin (which read [`Kernels::quantize_q8`]'s output), `cols`
/// f32 for every other kernel.
pub(crate) fn input_row_words(kernel: Kernel, cols: u32) -> u64 {
    match kernel {
        Kernel::Q8GemmI8 | Kernel::ExpertQ8GemmI8 | Kernel::ExpertQ8GemvXq | Kernel::ExpertQ8GemvXqRouted => {
            q8_row_bytes(cols) / 4
        }
        _ => u64::from(cols),
    }
}

/// Bytes `kernel` binds of an input of `words` 4-byte words: `expert_q8_gemv_xq` reads its quantised rows
/// as 16-byte vectors, so its binding runs on to the end of the last vector (a one-row input of `cols` not
/// a multiple of 128 has its scales in a partial one; its buffer must hold that padding); every other
/// kernel binds the words.
pub(crate) fn input_binding_bytes(kernel: Kernel, words: u64) -> u64 {
    match kernel {
        Kernel::ExpertQ8GemvXq | Kernel::ExpertQ8GemvXqRouted => f32s(words).next_multiple_of(16),
        _ => f32s(words),
    }
}

impl Kernels {
    /// Q8_0-quantises f32 rows for the int8 GEMMs ([`Kernels::q8_gemm_i8`], [`Kernels::expert_q8_gemm_i8`])
    /// and [`Kernels::expert_q8_gemv_xq`] as llama.cpp does its activations: per 32-value block
    /// `d = max|x| / 127` (kept as its f16 rounding) and `q = round(x / d)`. Shapes: `x [rows, cols] f32`,
    /// `out [rows]` rows of [`q8_row_bytes`]`(cols)`: the int8 packed four to a word, then the f32 scales.
    ///
    /// # Errors
    /// Shape errors for zero sizes or `cols` not a multiple of 32; buffer errors as usual.
    pub fn quantize_q8(&self, x: View<'_>, out: View<'_>, rows: u32, cols: u32) -> Result<Dispatch> {
        let b = self.binder(Kernel::QuantizeQ8);
        let (r, c) = (u64::from(rows), u64::from(cols));
        b.ensure(r > 0 && c > 0 && c.is_multiple_of(32), || {
            format!("needs rows > 0 and cols a positive multiple of 32; got rows {r}, cols {c}")
        })?;
        let dims = [b.groups("blocks / 256", (r * c / 32).div_ceil(256))?, 1, 1];
        let bound =
            vec![b.storage("x", x, 0, f32s(r * c))?, b.storage("out", out, 0, r * q8_row_bytes(cols))?];
        Ok(b.finish(vec![(QuantizeQ8Params { rows, cols, _pad: [0; 2] }, bound, dims)]))
    }
}
