use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `moe_combine_norm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MoeCombineNormParams {
    /// Hidden size H, a multiple of 4.
    pub hidden: u32,
    /// Picks per token k.
    pub k: u32,
    /// Tokens T.
    pub tokens: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
}
const _: () = assert!(size_of::<MoeCombineNormParams>() == 16);

impl Kernels {
    /// [`Kernels::moe_combine`] then [`Kernels::rms_norm`] of its output in one dispatch (a layer's end and
    /// the next layer's attention norm, or the output norm after the last layer):
    /// `out[t] = (Σ_j weights[t, j] · experts[t, j]) + residual[t]`, `normed[t] = rms_norm(out[t]) · norm`.
    /// Shapes: `experts [T, k, H] f32`, `weights [T, k] f32`, `residual, out, normed [T, H] f32`,
    /// `norm [H] f32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes or H not a multiple of 4; buffer errors as usual.
    #[allow(clippy::too_many_arguments)]
    pub fn moe_combine_norm(
        &self,
        experts: View<'_>,
        weights: View<'_>,
        residual: View<'_>,
        norm: View<'_>,
        out: View<'_>,
        normed: View<'_>,
        p: MoeCombineNormParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::MoeCombineNorm);
        let (h, k, t) = (u64::from(p.hidden), u64::from(p.k), u64::from(p.tokens));
        b.ensure(k > 0 && h > 0 && h.is_multiple_of(4), || {
            format!("needs k > 0 and hidden a positive multiple of 4 (rows are read as vec4); got hidden {h}, k {k}")
        })?;
        let dims = [b.groups("tokens", t)?, 1, 1];
        let bound = vec![
            b.storage("experts", experts, 0, f32s(t * k * h))?,
            b.storage("weights", weights, 0, f32s(t * k))?,
            b.storage("residual", residual, 0, f32s(t * h))?,
            b.storage("norm", norm, 0, f32s(h))?,
            b.storage("out", out, 0, f32s(t * h))?,
            b.storage("normed", normed, 0, f32s(t * h))?,
        ];
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
