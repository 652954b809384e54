use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `qk_norm_rope_partial_store.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct QkNormRopePartialStoreParams {
    /// Query heads per token.
    pub heads: u32,
    /// Key heads per token.
    pub kv_heads: u32,
    /// Head dim d, at most 256.
    pub head_dim: u32,
    /// Tokens T.
    pub tokens: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Rotated dims r: even, at most d.
    pub rope_dims: u32,
    /// Floats from one query head's input to the next (2·d: qwen35moe's query rows with their gate).
    pub q_stride: u32,
    /// Positions the key cache holds.
    pub ctx: u32,
}
const _: () = assert!(size_of::<QkNormRopePartialStoreParams>() == 32);

/// What [`Kernels::qk_norm_rope_partial_store`] reads and writes: the query and key heads' inputs, their
/// norms' weights, and where they go.
#[derive(Clone, Copy, Debug)]
pub struct QkHeads<'a> {
    /// `[T, heads, q_stride]` f32: the query heads, `q_stride` apart.
    pub queries_in: View<'a>,
    /// `[T, kv_heads, d]` f32: the key heads, packed.
    pub keys_in: View<'a>,
    /// `[d]` f32 each: the query and key norms' weights.
    pub q_norm: View<'a>,
    /// See `q_norm`.
    pub k_norm: View<'a>,
    /// `[T, heads, d]` f32: the normed and turned queries (written).
    pub queries: View<'a>,
    /// `[ctx, kv_heads, d]` f16: the key cache, each token's keys stored at its position (written).
    pub key_cache: View<'a>,
}

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
    /// qwen35moe's query and key heads in one dispatch: per-head RMSNorm with the set's weight, then NeoX
    /// RoPE of the first `rope_dims` dims with the host's `(cos, sin)` table `[T, r/2]`; the queries into
    /// `heads.queries`, the keys as f16 into `heads.key_cache` at `positions [T] u32` (positions at or past
    /// `ctx` skipped) (see [`cpu::qk_norm_rope_partial_store`](crate::cpu::qk_norm_rope_partial_store)).
    /// Shapes as [`QkHeads`].
    ///
    /// # Errors
    /// Shape errors for a head dim past 256, an odd or too large `rope_dims`, a query stride under the head
    /// dim, or zero sizes; buffer errors as usual.
    pub fn qk_norm_rope_partial_store(
        &self,
        heads: QkHeads<'_>,
        rope: View<'_>,
        positions: View<'_>,
        p: QkNormRopePartialStoreParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::QkNormRopePartialStore);
        let (h, kv, d, t, r) = (
            u64::from(p.heads),
            u64::from(p.kv_heads),
            u64::from(p.head_dim),
            u64::from(p.tokens),
            u64::from(p.rope_dims),
        );
        b.ensure(d > 0 && d <= 256, || format!("head_dim must be 1..=256; got {d}"))?;
        b.ensure(r > 0 && r.is_multiple_of(2) && r <= d, || {
            format!("rope_dims must be even and 1..={d}; got {r}")
        })?;
        b.ensure(u64::from(p.q_stride) >= d, || {
            format!("q_stride {} is under the head dim {d}", p.q_stride)
        })?;
        b.ensure(h > 0 && kv > 0 && p.ctx > 0, || {
            format!("needs query heads, key heads and a cache; got {h}, {kv} and ctx {}", p.ctx)
        })?;
        let dims = [b.groups("heads", h + kv)?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("queries_in", heads.queries_in, 0, f32s((t * h - 1) * u64::from(p.q_stride) + d))?,
            b.storage("keys_in", heads.keys_in, 0, f32s(t * kv * d))?,
            b.storage("q_norm", heads.q_norm, 0, f32s(d))?,
            b.storage("k_norm", heads.k_norm, 0, f32s(d))?,
            b.storage("rope", rope, 0, f32s(t * r))?,
            b.storage("positions", positions, 0, f32s(t))?,
            b.storage("queries", heads.queries, 0, f32s(t * h * d))?,
            b.storage("key_cache", heads.key_cache, 0, f16s(u64::from(p.ctx) * kv * d))?,
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
