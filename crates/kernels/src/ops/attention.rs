use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `attention.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttentionParams {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Head dim d.
    pub head_dim: u32,
    /// Query tokens T.
    pub tokens: u32,
    /// Positions the cache holds.
    pub ctx: u32,
    /// Score scale, 1/sqrt(d).
    pub scale: f32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<AttentionParams>() == 32);

/// The shapes of an attention dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Query heads (32 in Qwen3-30B-A3B).
    pub heads: u32,
    /// Key/value heads (4); divides `heads`.
    pub kv_heads: u32,
    /// Head dim d (128), at most 256.
    pub head_dim: u32,
    /// Query tokens T.
    pub tokens: u32,
    /// Positions the cache holds.
    pub ctx: u32,
}

impl Kernels {
    /// Causal GQA attention: for each query token t and head h, softmax over cache positions
    /// `0..=positions[t]` of `q·k / sqrt(d)`, weighted sum of v; kv head = `h / (heads / kv_heads)`.
    /// The cache must already hold every position attended (store the chunk first).
    /// Shapes: `q [T, heads, d] f32`, `k, v [ctx, kv_heads, d] f16`, `positions [T] u32`,
    /// `out [T, heads, d] f32`.
    ///
    /// # Errors
    /// Shape errors for `kv_heads` not dividing `heads`, `head_dim` over 256 or zero sizes; buffer
    /// errors as usual.
    pub fn attention(
        &self,
        q: View<'_>,
        k: View<'_>,
        v: View<'_>,
        positions: View<'_>,
        out: View<'_>,
        s: AttentionShape,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::Attention);
        let (h, kvh, d, t, c) = (
            u64::from(s.heads),
            u64::from(s.kv_heads),
            u64::from(s.head_dim),
            u64::from(s.tokens),
            u64::from(s.ctx),
        );
        b.ensure(kvh > 0 && h.is_multiple_of(kvh) && d > 0 && d <= 256 && c > 0, || {
            format!("needs kv_heads dividing heads, 0 < head_dim <= 256, ctx > 0; got {s:?}")
        })?;
        let dims = [b.groups("heads", h)?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("q", q, 0, f32s(t * h * d))?,
            b.storage("k", k, 0, f16s(c * kvh * d))?,
            b.storage("v", v, 0, f16s(c * kvh * d))?,
            b.storage("positions", positions, 0, f32s(t))?,
            b.storage("out", out, 0, f32s(t * h * d))?,
        ];
        let p = AttentionParams {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            tokens: s.tokens,
            ctx: s.ctx,
            scale: 1.0 / (s.head_dim as f32).sqrt(),
            _pad: [0; 2],
        };
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
