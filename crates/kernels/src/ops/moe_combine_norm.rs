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

/// qwen35moe's shared expert where [`Kernels::moe_combine_norm`] adds it.
#[derive(Clone, Copy, Debug)]
pub struct SharedExpert<'a> {
    /// `[H] f32`: its gate's weights (`ffn_gate_inp_shexp`).
    pub gate: View<'a>,
    /// `[T, H] f32`: its output.
    pub out: View<'a>,
}

impl Kernels {
    /// [`Kernels::moe_combine`] then [`Kernels::rms_norm`] of its output in one dispatch (a layer's end and
    /// the next layer's attention norm, or the output norm after the last layer):
    /// `out[t] = (Σ_j weights[t, j] · experts[t, j]) + residual[t]`, `normed[t] = rms_norm(out[t]) · norm`.
    /// With `shared` (`moe_combine_shared_norm`: [`Kernels::shared_expert_gate`] folded in), the picks go
    /// onto `residual[t] + σ(shared.gate · u[t]) · shared.out[t]`, where `u` is `normed` as it comes in (the
    /// FFN's normed input), before the next norm's rows replace it.
    /// Shapes: `experts [T, k, H] f32`, `weights [T, k] f32`, `residual, out, normed [T, H] f32`,
    /// `norm [H] f32`, and `shared`'s.
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
        shared: Option<SharedExpert<'_>>,
        p: MoeCombineNormParams,
    ) -> Result<Dispatch> {
        let b = self.binder(match shared {
            Some(_) => Kernel::MoeCombineSharedNorm,
            None => Kernel::MoeCombineNorm,
        });
        let (h, k, t) = (u64::from(p.hidden), u64::from(p.k), u64::from(p.tokens));
        b.ensure(k > 0 && h > 0 && h.is_multiple_of(4), || {
            format!("needs k > 0 and hidden a positive multiple of 4 (rows are read as vec4); got hidden {h}, k {k}")
        })?;
        let dims = [b.groups("tokens", t)?, 1, 1];
        let mut bound = vec![
            b.storage("experts", experts, 0, f32s(t * k * h))?,
            b.storage("weights", weights, 0, f32s(t * k))?,
            b.storage("residual", residual, 0, f32s(t * h))?,
            b.storage("norm", norm, 0, f32s(h))?,
        ];
        if let Some(shared) = shared {
            bound.push(b.storage("shared.gate", shared.gate, 0, f32s(h))?);
            bound.push(b.storage("shared.out", shared.out, 0, f32s(t * h))?);
        }
        bound.push(b.storage("out", out, 0, f32s(t * h))?);
        bound.push(b.storage("normed", normed, 0, f32s(t * h))?);
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
