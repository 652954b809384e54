use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{AttentionShape, Dispatch, ops::*};

/// Params of `attention_combine.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttentionCombineParams {
    /// Query heads.
    pub heads: u32,
    /// Head dim d.
    pub head_dim: u32,
    /// Query tokens T.
    pub tokens: u32,
    /// Positions the cache holds.
    pub ctx: u32,
    /// Blocks of [`AttentionShape::split_block`] positions, `ceil(ctx / block)`.
    pub blocks: u32,
    /// Positions per block, [`AttentionShape::split_block`].
    pub block: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<AttentionCombineParams>() == 32);

impl Kernels {
    /// Split-K attention for decode, part 2 of 2: merges the blocks [`Kernels::attention_split`] wrote.
    /// Shapes: `partial [T, heads, blocks, 4 + d] f32`, `positions [T] u32`, `out [T, heads, d] f32`.
    ///
    /// # Errors
    /// Shape errors for `head_dim` not a multiple of 8 or over 256, zero sizes; buffer errors as usual.
    pub fn attention_combine(
        &self,
        partial: View<'_>,
        positions: View<'_>,
        out: View<'_>,
        s: AttentionShape,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::AttentionCombine);
        let (h, d, t) = (u64::from(s.heads), u64::from(s.head_dim), u64::from(s.tokens));
        b.ensure(d > 0 && d <= 256 && d.is_multiple_of(8) && s.ctx > 0, || {
            format!("needs head_dim a multiple of 8 up to 256 and ctx > 0; got {s:?}")
        })?;
        let dims =
            [b.groups("heads", h)?, b.groups("tokens", t)?, b.groups("head_dim / 32", d.div_ceil(32))?];
        let bound = vec![
            b.storage("partial", partial, 0, f32s(s.partial_len()))?,
            b.storage("positions", positions, 0, f32s(t))?,
            b.storage("out", out, 0, f32s(t * h * d))?,
        ];
        let p = AttentionCombineParams {
            heads: s.heads,
            head_dim: s.head_dim,
            tokens: s.tokens,
            ctx: s.ctx,
            blocks: s.blocks(),
            block: s.split_block(),
            _pad: [0; 2],
        };
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
