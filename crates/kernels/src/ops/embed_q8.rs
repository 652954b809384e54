use crate::error::Result;
use crate::kernels::{Kernel, Kernels, Q8Matrix, View};
use crate::{Dispatch, ops::*};

/// Params of `embed_q8.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct EmbedQ8Params {
    /// Rows of the whole table.
    pub rows: u32,
    /// Row length, a multiple of 32.
    pub cols: u32,
    /// Tokens T.
    pub tokens: u32,
    /// First table row bound in this part.
    pub row_begin: u32,
    /// One past the last row bound in this part.
    pub row_end: u32,
    /// Padding.
    pub _pad: [u32; 3],
}
const _: () = assert!(size_of::<EmbedQ8Params>() == 32);

impl Kernels {
    /// Embedding lookup: `out[t] = dequantised table row ids[t]`; ids past the table give zeros.
    /// Shapes: `ids [T] u32`, `table [rows, cols]` Q8_0 (split over bindings when larger than one),
    /// `out [T, cols] f32`.
    ///
    /// # Errors
    /// [`Error::Shape`](crate::Error::Shape) for `cols` not a multiple of 32 or a zero size; buffer errors
    /// for views too small or misaligned.
    pub fn embed_q8(
        &self,
        ids: View<'_>,
        table: Q8Matrix<'_>,
        out: View<'_>,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::EmbedQ8);
        let (rows, cols, t) = (u64::from(table.rows), u64::from(table.cols), u64::from(tokens));
        b.ensure(cols > 0 && cols.is_multiple_of(32) && rows > 0 && t > 0, || {
            format!("needs rows > 0, tokens > 0 and cols a multiple of 32; got rows {rows}, cols {cols}, tokens {t}")
        })?;
        let gx = b.groups("cols / 4 / 64", (cols / 4).div_ceil(64))?;
        let gy = b.groups("tokens", t)?;
        let scale_row = f16s(cols / 32);
        let parts = b.split_rows("table.q", rows, cols, scale_row, 1)?;
        let mut out_parts = Vec::with_capacity(parts.len());
        for (begin, end) in parts {
            let n = end - begin;
            let bound = vec![
                b.storage("ids", ids, 0, f32s(t))?,
                b.storage("table.q", table.q, begin * cols, n * cols)?,
                b.storage("table.scales", table.scales, begin * scale_row, n * scale_row)?,
                b.storage("out", out, 0, f32s(t * cols))?,
            ];
            let p = EmbedQ8Params {
                rows: table.rows,
                cols: table.cols,
                tokens,
                row_begin: begin as u32,
                row_end: end as u32,
                _pad: [0; 3],
            };
            out_parts.push((p, bound, [gx, gy, 1]));
        }
        Ok(b.finish(out_parts))
    }
}
