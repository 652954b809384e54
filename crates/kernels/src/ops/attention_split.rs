use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{AttentionShape, Dispatch, ops::*};

/// Params of `attention_split.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttentionSplitParams {
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
    /// Blocks of [`AttentionShape::split_block`] positions, `ceil(ctx / block)`.
    pub blocks: u32,
    /// Positions per block, [`AttentionShape::split_block`].
    pub block: u32,
}
const _: () = assert!(size_of::<AttentionSplitParams>() == 32);

/// Caches of up to this many positions run the split attention [`SHORT_SPLIT_PASSES`] passes a block,
/// longer ones [`LONG_SPLIT_PASSES`] (the `PASSES` override of `attention_split.wgsl`, one pipeline each).
const SHORT_SPLIT_CTX: u32 = 4096;
pub(crate) const SHORT_SPLIT_PASSES: u32 = 2;
pub(crate) const LONG_SPLIT_PASSES: u32 = 4;

impl AttentionShape {
    /// Passes of one lane over a block in `attention_split.wgsl` (its `PASSES` override): 2 for caches of
    /// up to 4,096 positions, else 4. Smaller blocks shorten each workgroup's chain of passes and barriers
    /// and give short lengths more workgroups; but every block of the cache is launched (those past the
    /// token's length leave at once), and on the H200 at 40,960 positions the 2,560 blocks a kv head of
    /// two passes cost 32.6 us against 26.4 for four passes, while at 4,096 positions they tie at the last
    /// position and two passes win at position 600 (6.5 against 8.6 us a layer).
    pub fn split_passes(&self) -> u32 {
        if self.ctx <= SHORT_SPLIT_CTX { SHORT_SPLIT_PASSES } else { LONG_SPLIT_PASSES }
    }

    /// Cache positions per workgroup of the split attention: [`split_passes`](Self::split_passes) passes of
    /// `128 / lanes` rows, where a row (one position, `d` f16) takes `lanes` = `d / 8` rounded up to a power
    /// of two, at least 8. So at `d = 128` 16 positions (2 passes) or 32 (4 passes).
    pub fn split_block(&self) -> u32 {
        let lanes = (self.head_dim / 8).next_power_of_two().clamp(8, 128);
        self.split_passes() * (128 / lanes)
    }

    /// Query heads a workgroup of the split attention (G): the largest divisor of a kv head's query heads
    /// that is at most 8 and at most `1024 / d` (its workgroup memory holds G · d values of q). So all of
    /// them up to 8 at d = 128, groups of 8 for Qwen3-235B-A22B's 16, of 4 for Qwen3.6's 8 at d = 256.
    pub fn split_group(&self) -> u32 {
        let per_kv = self.heads / self.kv_heads.max(1);
        let cap = 8.min(1024 / self.head_dim.max(1)).max(1);
        (1..=cap.min(per_kv)).rev().find(|g| per_kv.is_multiple_of(*g)).unwrap_or(1)
    }

    /// Whether [`Kernels::attention_split`] takes this shape (its errors list the limits); else
    /// [`Kernels::attention`] does the same work, with fewer workgroups for one token.
    pub fn split_fits(&self) -> bool {
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
        let per_kv = if kvh > 0 && h.is_multiple_of(kvh) { h / kvh } else { return false };
        per_kv > 0
            && d > 0
            && d <= 256
            && d.is_multiple_of(8)
            && self.split_group() * d <= 1024
            && self.ctx > 0
    }

    /// Blocks the split attention uses: `ceil(ctx / split_block)`.
    pub fn blocks(&self) -> u32 {
        self.ctx.div_ceil(self.split_block())
    }

    /// f32 values of the split attention's partial buffer: `T · heads · blocks · (4 + d)`
    /// (per block `m, l`, two pad values, then `acc`).
    pub fn partial_len(&self) -> u64 {
        u64::from(self.tokens)
            * u64::from(self.heads)
            * u64::from(self.blocks())
            * (u64::from(self.head_dim) + 4)
    }
}

impl Kernels {
    /// Split-K attention for decode, part 1 of 2 (then [`Kernels::attention_combine`]): one workgroup per
    /// (group of query heads, block of [`AttentionShape::split_block`] positions, token), K and V read
    /// once, in coalesced 16-byte chunks, for each group of a kv head's query heads
    /// ([`AttentionShape::split_group`] heads: all of them where they are at most 8 and `d` at most 128).
    /// Same result as [`Kernels::attention`], with far more workgroups for one token; its scratch grows
    /// with T · ctx, so prefill chunks use [`Kernels::attention`].
    /// Shapes: `q [T, heads, d] f32`, `k, v [ctx, kv_heads, d] f16`, `positions [T] u32`,
    /// `partial [T, heads, blocks, 4 + d] f32` (see [`AttentionShape::partial_len`]).
    ///
    /// # Errors
    /// Shape errors for `kv_heads` not dividing `heads`, `head_dim` not a multiple of 8 or over 256, zero
    /// sizes; buffer errors as usual.
    pub fn attention_split(
        &self,
        q: View<'_>,
        k: View<'_>,
        v: View<'_>,
        positions: View<'_>,
        partial: View<'_>,
        s: AttentionShape,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::AttentionSplit);
        let (h, kvh, d, t, c) = (
            u64::from(s.heads),
            u64::from(s.kv_heads),
            u64::from(s.head_dim),
            u64::from(s.tokens),
            u64::from(s.ctx),
        );
        b.ensure(s.split_fits(), || {
            format!(
                "needs kv_heads dividing heads, head_dim a multiple of 8 up to 256 and ctx > 0; got {s:?}"
            )
        })?;
        let g = u64::from(s.split_group());
        let dims = [
            b.groups("head groups", h / g)?,
            b.groups("blocks", u64::from(s.blocks()))?,
            b.groups("tokens", t)?,
        ];
        let bound = vec![
            b.storage("q", q, 0, f32s(t * h * d))?,
            b.storage("k", k, 0, f16s(c * kvh * d))?,
            b.storage("v", v, 0, f16s(c * kvh * d))?,
            b.storage("positions", positions, 0, f32s(t))?,
            b.storage("partial", partial, 0, f32s(s.partial_len()))?,
        ];
        let p = AttentionSplitParams {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            tokens: s.tokens,
            ctx: s.ctx,
            scale: 1.0 / (s.head_dim as f32).sqrt(),
            blocks: s.blocks(),
            block: s.split_block(),
        };
        let pipeline = if s.split_passes() == SHORT_SPLIT_PASSES {
            self.attention_split_short()
        } else {
            self.pipeline(Kernel::AttentionSplit)
        };
        Ok(b.finish_on(pipeline.clone(), vec![(p, bound, dims)]))
    }
}
