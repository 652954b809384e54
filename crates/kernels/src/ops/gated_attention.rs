use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `qk_norm_rope_partial.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct QkNormRopePartialParams {
    /// Heads per token.
    pub heads: u32,
    /// Head dim d, at most 256.
    pub head_dim: u32,
    /// Tokens T.
    pub tokens: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Rotated dims r: even, at most d.
    pub rope_dims: u32,
    /// Floats from one head's input to the next (d packed; 2·d for qwen35moe's query rows with their gate).
    pub in_stride: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<QkNormRopePartialParams>() == 32);

/// Params of `attention_gate.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttentionGateParams {
    /// Heads per token.
    pub heads: u32,
    /// Head dim d.
    pub head_dim: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<AttentionGateParams>() == 16);

impl Kernels {
    /// qwen35moe's query and key heads: per-head RMSNorm with weight `w`, then NeoX RoPE of the first
    /// `rope_dims` dims with the host's `(cos, sin)` table `[T, r/2]` (see
    /// [`cpu::qk_norm_rope_partial`](crate::cpu::qk_norm_rope_partial)). Shapes: `x [T, heads, in_stride]`,
    /// `w [d]`, `out [T, heads, d]`, all f32.
    ///
    /// # Errors
    /// Shape errors for a head dim past 256, an odd or too large `rope_dims`, a stride under the head dim, or
    /// zero sizes; buffer errors as usual.
    pub fn qk_norm_rope_partial(
        &self,
        x: View<'_>,
        w: View<'_>,
        rope: View<'_>,
        out: View<'_>,
        p: QkNormRopePartialParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::QkNormRopePartial);
        let (h, d, t, r) =
            (u64::from(p.heads), u64::from(p.head_dim), u64::from(p.tokens), u64::from(p.rope_dims));
        b.ensure(d > 0 && d <= 256, || format!("head_dim must be 1..=256; got {d}"))?;
        b.ensure(r > 0 && r.is_multiple_of(2) && r <= d, || {
            format!("rope_dims must be even and 1..={d}; got {r}")
        })?;
        b.ensure(u64::from(p.in_stride) >= d, || {
            format!("in_stride {} is under the head dim {d}", p.in_stride)
        })?;
        let dims = [b.groups("heads", h)?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("x", x, 0, f32s((t * h - 1) * u64::from(p.in_stride) + d))?,
            b.storage("w", w, 0, f32s(d))?,
            b.storage("rope", rope, 0, f32s(t * r))?,
            b.storage("out", out, 0, f32s(t * h * d))?,
        ];
        Ok(b.finish(vec![(p, bound, dims)]))
    }

    /// qwen35moe's attention output gate: `o[t, h, i] *= σ(qg[t, h, d + i])` (`qg [T, heads, 2·d]`: each
    /// head's query rows then its gate rows), in place on `o [T, heads, d]`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn attention_gate(
        &self,
        qg: View<'_>,
        o: View<'_>,
        heads: u32,
        head_dim: u32,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::AttentionGate);
        let n = u64::from(heads) * u64::from(head_dim) * u64::from(tokens);
        let dims = [b.groups("elements / 256", n.div_ceil(256))?, 1, 1];
        let bound = vec![b.storage("qg", qg, 0, f32s(2 * n))?, b.storage("o", o, 0, f32s(n))?];
        Ok(b.finish(vec![(AttentionGateParams { heads, head_dim, tokens, _pad: 0 }, bound, dims)]))
    }
}
