use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `qk_norm_rope.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct QkNormRopeParams {
    /// Heads per token.
    pub heads: u32,
    /// Head dim d, even, at most 256.
    pub head_dim: u32,
    /// Tokens T.
    pub tokens: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
}
const _: () = assert!(size_of::<QkNormRopeParams>() == 16);

impl Kernels {
    /// Per-head RMSNorm with weight `w`, then NeoX RoPE with the host's `(cos, sin)` table
    /// (see [`cpu::rope_cos_sin`](crate::cpu::rope_cos_sin)).
    /// Shapes: `x [T, heads, d] f32`, `w [d] f32`, `rope [T, d/2] (cos, sin) f32`, `out [T, heads, d] f32`.
    ///
    /// # Errors
    /// Shape errors for an odd or too large `head_dim` or zero sizes; buffer errors as usual.
    pub fn qk_norm_rope(
        &self,
        x: View<'_>,
        w: View<'_>,
        rope: View<'_>,
        out: View<'_>,
        p: QkNormRopeParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::QkNormRope);
        let (h, d, t) = (u64::from(p.heads), u64::from(p.head_dim), u64::from(p.tokens));
        b.ensure(d > 0 && d.is_multiple_of(2) && d <= 256, || {
            format!("head_dim must be even and at most 256; got {d}")
        })?;
        let dims = [b.groups("heads", h)?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("x", x, 0, f32s(t * h * d))?,
            b.storage("w", w, 0, f32s(d))?,
            b.storage("rope", rope, 0, f32s(t * d))?,
            b.storage("out", out, 0, f32s(t * h * d))?,
        ];
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
