use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `moe_combine.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MoeCombineParams {
    /// Hidden size H.
    pub hidden: u32,
    /// Picks per token k.
    pub k: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<MoeCombineParams>() == 16);

impl Kernels {
    /// `out[t] = (Σ_j weights[t, j] · experts[t, j]) + residual[t]`, summed in pick order.
    /// Shapes: `experts [T, k, H] f32`, `weights [T, k] f32`, `residual [T, H] f32`, `out [T, H] f32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn moe_combine(
        &self,
        experts: View<'_>,
        weights: View<'_>,
        residual: View<'_>,
        out: View<'_>,
        p: MoeCombineParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::MoeCombine);
        let (h, k, t) = (u64::from(p.hidden), u64::from(p.k), u64::from(p.tokens));
        b.ensure(k > 0, || "k must be > 0".into())?;
        let dims = [b.groups("hidden / 256", h.div_ceil(256))?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("experts", experts, 0, f32s(t * k * h))?,
            b.storage("weights", weights, 0, f32s(t * k))?,
            b.storage("residual", residual, 0, f32s(t * h))?,
            b.storage("out", out, 0, f32s(t * h))?,
        ];
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
