use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `f32_gemm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F32GemmParams {
    /// Output length.
    pub rows: u32,
    /// Input length, a multiple of 32.
    pub cols: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<F32GemmParams>() == 16);

impl Kernels {
    /// F32 GEMM over T tokens (a prefill chunk's router): `y[t] = W x[t]`, as [`Kernels::f32_gemv`] computes
    /// it, with the matrix read once per 32 tokens instead of once per token (a workgroup takes 16 rows × 32
    /// tokens through workgroup memory). Shapes: `w [rows, cols] f32`, `x [T, cols] f32`, `y [T, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 32 or zero sizes; buffer errors as usual.
    pub fn f32_gemm(
        &self,
        w: View<'_>,
        (rows, cols): (u32, u32),
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::F32Gemm);
        let (r, c, t) = (u64::from(rows), u64::from(cols), u64::from(tokens));
        b.ensure(r > 0 && t > 0 && c > 0 && c.is_multiple_of(32), || {
            format!("needs rows, tokens > 0 and cols a positive multiple of 32; got rows {r}, cols {c}, tokens {t}")
        })?;
        let dims = [b.groups("row blocks", r.div_ceil(16))?, b.groups("token blocks", t.div_ceil(32))?, 1];
        let bound = vec![
            b.storage("x", x, 0, f32s(t * c))?,
            b.storage("w", w, 0, f32s(r * c))?,
            b.storage("y", y, 0, f32s(t * r))?,
        ];
        Ok(b.finish(vec![(F32GemmParams { rows, cols, tokens, _pad: 0 }, bound, dims)]))
    }
}
