use super::expert_q8_gemv::combine_squares;
use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `residual_join.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ResidualJoinParams {
    /// Row length (H).
    pub rows: u32,
    /// 1: write the next norm's inputs.
    pub finish: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ResidualJoinParams>() == 16);

/// Where [`Kernels::residual_join`] adds and what it writes for the next RMSNorm.
#[derive(Clone, Copy, Debug)]
pub struct JoinOut<'a> {
    /// `[T, rows] f32`: the residual stream, added to in place.
    pub residual: View<'a>,
    /// `[rows] f32`: the next RMSNorm's weight.
    pub next_norm: View<'a>,
    /// `[T, rows] f32`: the new residual times `next_norm` (written when `finish`).
    pub scaled: View<'a>,
    /// `[T, rows.div_ceil(4)] f32`: sums of the new residual's squares, 4 rows each (written when `finish`).
    pub squares: View<'a>,
    /// Whether to write `scaled` and `squares` (not after the last layer, whose output norm `rms_norm`
    /// applies).
    pub finish: bool,
}

impl Kernels {
    /// A row joined to the residual stream after the fused decode layer's combine (the CPU tier's sum of
    /// its experts): `residual[t] += sum[t]`, and with `out.finish` the next norm's inputs from the new
    /// residual, as [`Kernels::expert_q8_gemv_combine`] writes them ([`cpu::residual_join`](crate::cpu::residual_join)).
    /// Shapes: `sum [T, rows] f32`, `out` as [`JoinOut`].
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn residual_join(&self, sum: View<'_>, out: JoinOut<'_>, rows: u32, tokens: u32) -> Result<Dispatch> {
        let b = self.binder(Kernel::ResidualJoin);
        let (r, t) = (u64::from(rows), u64::from(tokens));
        b.ensure(r > 0 && t > 0, || format!("needs rows and tokens > 0; got {r} and {t}"))?;
        let blocks = u64::from(combine_squares(rows));
        let dims = [b.groups("row blocks / 64", blocks.div_ceil(64))?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("sum", sum, 0, f32s(t * r))?,
            b.storage("next_norm", out.next_norm, 0, f32s(r))?,
            b.storage("residual", out.residual, 0, f32s(t * r))?,
            b.storage("scaled", out.scaled, 0, f32s(t * r))?,
            b.storage("squares", out.squares, 0, f32s(t * blocks))?,
        ];
        let p = ResidualJoinParams { rows, finish: u32::from(out.finish), _pad: [0; 2] };
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
