use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `qkv_rope_store.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct QkvRopeStoreParams {
    /// Query heads per token.
    pub heads: u32,
    /// Key/value heads per token.
    pub kv_heads: u32,
    /// Head dim d, even, at most 256.
    pub head_dim: u32,
    /// Tokens T.
    pub tokens: u32,
    /// RMSNorm epsilon of the QK norms.
    pub eps: f32,
    /// Positions the caches hold.
    pub ctx: u32,
    /// Sums of squares per token in `squares` (0: the projections are already normed; see
    /// [`Kernels::qkv_rope_store`]).
    pub in_squares: u32,
    /// The attention norm's length (with `in_squares`).
    pub hidden: u32,
}
const _: () = assert!(size_of::<QkvRopeStoreParams>() == 32);

/// The caches [`Kernels::qkv_rope_store`] writes: `[ctx, kv_heads, d]` f16 each.
#[derive(Clone, Copy, Debug)]
pub struct KvCacheViews<'a> {
    /// Keys.
    pub k: View<'a>,
    /// Values.
    pub v: View<'a>,
}

impl Kernels {
    /// One dispatch for what [`Kernels::qk_norm_rope`] (Q, K) and [`Kernels::kv_store`] (K, V) do, from the
    /// stacked projections of each token: Q heads normed and rotated into `q_out`, K heads normed, rotated
    /// and stored as f16 at the token's position, V heads stored as f16. Positions at or past `ctx` are not
    /// stored.
    ///
    /// With `squares` (and `p.in_squares` > 0), `qkv` is the GEMV of the residual stream times the attention
    /// norm's weight, not yet scaled, and `squares` holds sums of the stream's squares (what
    /// [`Kernels::expert_q8_gemv_combine`] writes): every value is first multiplied by
    /// `1 / sqrt(Σ squares[t] / p.hidden + p.eps)`, the attention norm's scale, which fused decode thereby
    /// applies without a norm dispatch.
    /// Shapes: `qkv [T, heads + 2·kv_heads, d] f32`, `q_norm, k_norm [d] f32`, `rope [T, d/2] (cos, sin)`,
    /// `positions [T] u32`, `squares [T, in_squares] f32`, `q_out [T, heads, d] f32`, caches
    /// `[ctx, kv_heads, d] f16`.
    ///
    /// # Errors
    /// Shape errors for an odd or too large `head_dim`, zero sizes, or `squares` given without
    /// `p.in_squares` and `p.hidden` (or not given with them); buffer errors as usual.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_rope_store(
        &self,
        qkv: View<'_>,
        q_norm: View<'_>,
        k_norm: View<'_>,
        rope: View<'_>,
        positions: View<'_>,
        q_out: View<'_>,
        cache: KvCacheViews<'_>,
        squares: Option<View<'_>>,
        p: QkvRopeStoreParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::QkvRopeStore);
        let (h, kv, d, t, c) = (
            u64::from(p.heads),
            u64::from(p.kv_heads),
            u64::from(p.head_dim),
            u64::from(p.tokens),
            u64::from(p.ctx),
        );
        b.ensure(d > 0 && d.is_multiple_of(2) && d <= 256, || {
            format!("head_dim must be even and at most 256; got {d}")
        })?;
        b.ensure(kv > 0 && c > 0, || format!("kv_heads and ctx must be > 0; got {kv}, {c}"))?;
        let scaled = p.in_squares > 0 && p.hidden > 0;
        b.ensure(squares.is_some() == scaled && (scaled || p.in_squares == 0), || {
            format!(
                "squares must come with in_squares and hidden > 0 and only then; got squares {}, in_squares {}, hidden {}",
                squares.is_some(),
                p.in_squares,
                p.hidden
            )
        })?;
        // Without them, qkv stands in for the squares binding (the shader never reads it).
        let (sq, sq_bytes) = squares.map_or((qkv, 4), |v| (v, f32s(t * u64::from(p.in_squares))));
        let dims = [b.groups("heads + 2 kv_heads", h + 2 * kv)?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("qkv", qkv, 0, f32s(t * (h + 2 * kv) * d))?,
            b.storage("q_norm", q_norm, 0, f32s(d))?,
            b.storage("k_norm", k_norm, 0, f32s(d))?,
            b.storage("rope", rope, 0, f32s(t * d))?,
            b.storage("positions", positions, 0, f32s(t))?,
            b.storage("squares", sq, 0, sq_bytes)?,
            b.storage("q_out", q_out, 0, f32s(t * h * d))?,
            b.storage("k_cache", cache.k, 0, f16s(c * kv * d))?,
            b.storage("v_cache", cache.v, 0, f16s(c * kv * d))?,
        ];
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
