use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `expert_q8_gemv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertQ8GemvParams {
    /// Rows of one slot's matrix.
    pub rows: u32,
    /// Input length, a multiple of 32.
    pub cols: u32,
    /// Pairs P.
    pub pairs: u32,
    /// Input row = pair / x_div.
    pub x_div: u32,
    /// First slot bound in this part.
    pub slot_begin: u32,
    /// One past the last slot bound in this part.
    pub slot_end: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ExpertQ8GemvParams>() == 32);

/// One matrix plane pair of the expert slot pool: `[slots, rows, cols]` int8 and `[slots, rows, cols/32]`
/// f16 scales (gate‖up: rows = 2F, cols = H; down: rows = H, cols = F).
#[derive(Clone, Copy, Debug)]
pub struct ExpertPlanes<'a> {
    /// The int8 plane.
    pub q: View<'a>,
    /// The scale plane.
    pub scales: View<'a>,
    /// Slots in the pool.
    pub slots: u32,
    /// Rows of one slot's matrix.
    pub rows: u32,
    /// Columns, a multiple of 32.
    pub cols: u32,
}

impl Kernels {
    /// Expert Q8_0 GEMV for P (token, pick) pairs in one dispatch (one per pool part when the pool is
    /// larger than a binding): `y[pair] = W[slot_idx[pair]] · x[pair / x_div]`. gate‖up: `x_div = k`
    /// (a token's picks share its input); down: `x_div = 1`. Slots past the pool write nothing.
    /// Shapes: `x [P / x_div, cols] f32`, `slot_idx [P] u32`, pool planes, `y [P, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 32, `x_div` not dividing P, zero sizes; buffer errors
    /// as usual (a pool split point must be 256-byte aligned in both planes).
    pub fn expert_q8_gemv(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ExpertQ8Gemv);
        let (rows, cols, slots) = (u64::from(pool.rows), u64::from(pool.cols), u64::from(pool.slots));
        let (pp, xd) = (u64::from(pairs), u64::from(x_div));
        b.ensure(cols > 0 && cols.is_multiple_of(32) && rows > 0 && slots > 0, || {
            format!(
                "needs rows, slots > 0 and cols a multiple of 32; got rows {rows}, cols {cols}, slots {slots}"
            )
        })?;
        b.ensure(xd > 0 && pp.is_multiple_of(xd), || format!("x_div {xd} must divide pairs {pp}"))?;
        let dims = [b.groups("rows / 8", rows.div_ceil(8))?, b.groups("pairs", pp)?, 1];
        let slot_q = rows * cols;
        let slot_s = f16s(rows * cols / 32);
        let parts = b.split_rows("pool.q", slots, slot_q, slot_s, 1)?;
        let mut out = Vec::with_capacity(parts.len());
        for (begin, end) in parts {
            let n = end - begin;
            let bound = vec![
                b.storage("x", x, 0, f32s(pp / xd * cols))?,
                b.storage("slot_idx", slot_idx, 0, f32s(pp))?,
                b.storage("pool.q", pool.q, begin * slot_q, n * slot_q)?,
                b.storage("pool.scales", pool.scales, begin * slot_s, n * slot_s)?,
                b.storage("y", y, 0, f32s(pp * rows))?,
            ];
            let p = ExpertQ8GemvParams {
                rows: pool.rows,
                cols: pool.cols,
                pairs,
                x_div,
                slot_begin: begin as u32,
                slot_end: end as u32,
                _pad: [0; 2],
            };
            out.push((p, bound, dims));
        }
        Ok(b.finish(out))
    }
}
