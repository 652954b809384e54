use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `f32_gemv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F32GemvParams {
    /// Output length.
    pub rows: u32,
    /// Input length, a multiple of 4.
    pub cols: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<F32GemvParams>() == 16);

impl Kernels {
    /// F32 GEMV over T inputs (the router): `y[t] = W x[t]`.
    /// Shapes: `w [rows, cols] f32`, `x [T, cols] f32`, `y [T, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 4 or zero sizes; buffer errors for views too small,
    /// misaligned or over the binding limit.
    pub fn f32_gemv(
        &self,
        w: View<'_>,
        rows: u32,
        cols: u32,
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::F32Gemv);
        let (r, c, t) = (u64::from(rows), u64::from(cols), u64::from(tokens));
        b.ensure(r > 0 && c > 0 && c.is_multiple_of(4), || {
            format!("needs rows > 0 and cols a multiple of 4; got rows {r}, cols {c}")
        })?;
        let dims = [b.groups("rows", r)?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("x", x, 0, f32s(t * c))?,
            b.storage("w", w, 0, f32s(r * c))?,
            b.storage("y", y, 0, f32s(t * r))?,
        ];
        Ok(b.finish(vec![(F32GemvParams { rows, cols, _pad: [0; 2] }, bound, dims)]))
    }
}
