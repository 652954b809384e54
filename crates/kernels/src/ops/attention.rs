use crate::error::Result;
use crate::kernels::{Binder, Bound, Kernel, Kernels, View};
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

/// Query heads of one kv head a workgroup of `attention_tiled` and `attention_flash` takes (their shaders'
/// `R`).
const TILED_ROWS: u64 = 8;

/// Tokens a workgroup of `attention_flash` takes (its shader's `BQ`).
const FLASH_TOKENS: u64 = 4;

/// The largest head dim `attention_flash` takes (its tiles hold 32 vec4 columns).
const FLASH_MAX_HEAD_DIM: u32 = 128;

impl Kernels {
    /// Causal GQA attention: for each query token t and head h, softmax over cache positions
    /// `0..=positions[t]` of `q·k / sqrt(d)`, weighted sum of v; kv head = `h / (heads / kv_heads)`.
    /// The cache must already hold every position attended (store the chunk first). Runs
    /// [`Kernels::attention_flash`] where `head_dim` is a multiple of 16 up to 128 and the device has its
    /// workgroup memory, else [`Kernels::attention_tiled`] where `head_dim` is a multiple of 16, else
    /// [`Kernels::attention_per_query`].
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
        let flash_fits = s.head_dim <= FLASH_MAX_HEAD_DIM && self.has(Kernel::AttentionFlash);
        if s.head_dim.is_multiple_of(16) && flash_fits {
            self.attention_flash(q, k, v, positions, out, s)
        } else if s.head_dim.is_multiple_of(16) {
            self.attention_tiled(q, k, v, positions, out, s)
        } else {
            self.attention_per_query(q, k, v, positions, out, s)
        }
    }

    /// [`Kernels::attention`] with a workgroup per token and up to 8 query heads of one kv head, keys and
    /// values in tiles through workgroup memory (each read once for the 8 heads): the prefill kernel.
    ///
    /// # Errors
    /// As [`Kernels::attention`], and a shape error unless `head_dim` is a multiple of 16.
    pub fn attention_tiled(
        &self,
        q: View<'_>,
        k: View<'_>,
        v: View<'_>,
        positions: View<'_>,
        out: View<'_>,
        s: AttentionShape,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::AttentionTiled);
        b.ensure(s.head_dim.is_multiple_of(16), || format!("needs head_dim a multiple of 16; got {s:?}"))?;
        let (bound, p) = attention_bindings(&b, q, k, v, positions, out, s)?;
        let dims = head_block_grid(&b, s, 1)?;
        Ok(b.finish(vec![(p, bound, dims)]))
    }

    /// [`Kernels::attention`] with a workgroup per block of 4 tokens and up to 8 query heads of one kv head
    /// (32 query rows), keys and values in tiles of 32 through workgroup memory, each read once for the 32
    /// rows: the prefill kernel where the device offers 32 KiB of workgroup memory.
    ///
    /// # Errors
    /// As [`Kernels::attention`]; a shape error unless `head_dim` is a multiple of 16 up to 128;
    /// [`Error::Unavailable`](crate::Error::Unavailable) on devices with less workgroup memory.
    pub fn attention_flash(
        &self,
        q: View<'_>,
        k: View<'_>,
        v: View<'_>,
        positions: View<'_>,
        out: View<'_>,
        s: AttentionShape,
    ) -> Result<Dispatch> {
        let kernel = Kernel::AttentionFlash;
        if !self.has(kernel) {
            return Err(crate::Error::Unavailable {
                kernel: kernel.name(),
                needed: kernel.workgroup_storage(),
                offered: self.workgroup_storage(),
            });
        }
        let b = self.binder(kernel);
        b.ensure(s.head_dim.is_multiple_of(16) && s.head_dim <= FLASH_MAX_HEAD_DIM, || {
            format!("needs head_dim a multiple of 16 up to {FLASH_MAX_HEAD_DIM}; got {s:?}")
        })?;
        let (bound, p) = attention_bindings(&b, q, k, v, positions, out, s)?;
        let dims = head_block_grid(&b, s, FLASH_TOKENS)?;
        Ok(b.finish(vec![(p, bound, dims)]))
    }

    /// [`Kernels::attention`] with a workgroup per (query head, token), each lane a key at a time (any
    /// `head_dim` up to 256).
    ///
    /// # Errors
    /// As [`Kernels::attention`].
    pub fn attention_per_query(
        &self,
        q: View<'_>,
        k: View<'_>,
        v: View<'_>,
        positions: View<'_>,
        out: View<'_>,
        s: AttentionShape,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::Attention);
        let (bound, p) = attention_bindings(&b, q, k, v, positions, out, s)?;
        let dims = [b.groups("heads", u64::from(s.heads))?, b.groups("tokens", u64::from(s.tokens))?, 1];
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}

/// The grid of the tiled chunk kernels: a workgroup per (kv head, block of up to 8 of its query heads) along
/// x and per block of `tokens_per_group` tokens along y.
fn head_block_grid(b: &Binder<'_>, s: AttentionShape, tokens_per_group: u64) -> Result<[u32; 3]> {
    let blocks = u64::from(s.heads / s.kv_heads).div_ceil(TILED_ROWS);
    Ok([
        b.groups("kv heads x head blocks", u64::from(s.kv_heads) * blocks)?,
        b.groups("token blocks", u64::from(s.tokens).div_ceil(tokens_per_group))?,
        1,
    ])
}

/// Validates an attention shape and binds q, k, v, positions and out; the params both kernels read.
fn attention_bindings<'a>(
    b: &Binder<'_>,
    q: View<'a>,
    k: View<'a>,
    v: View<'a>,
    positions: View<'a>,
    out: View<'a>,
    s: AttentionShape,
) -> Result<(Vec<Bound<'a>>, AttentionParams)> {
    let (h, kvh, d, t, c) = (
        u64::from(s.heads),
        u64::from(s.kv_heads),
        u64::from(s.head_dim),
        u64::from(s.tokens),
        u64::from(s.ctx),
    );
    b.ensure(kvh > 0 && h.is_multiple_of(kvh) && d > 0 && d <= 256 && c > 0 && t > 0, || {
        format!("needs kv_heads dividing heads, 0 < head_dim <= 256, ctx > 0; got {s:?}")
    })?;
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
    Ok((bound, p))
}
