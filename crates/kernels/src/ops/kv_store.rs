use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `kv_store.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KvStoreParams {
    /// Values per position (kv_heads · head_dim).
    pub n: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Positions the cache holds.
    pub ctx: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<KvStoreParams>() == 16);

impl Kernels {
    /// KV-cache store: `dst[positions[t]] = f16(src[t])`; positions at or past `ctx` are skipped.
    /// Shapes: `src [T, n] f32`, `positions [T] u32`, `dst [ctx, n] f16`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn kv_store(
        &self,
        src: View<'_>,
        positions: View<'_>,
        dst: View<'_>,
        n: u32,
        tokens: u32,
        ctx: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::KvStore);
        let (nn, t, c) = (u64::from(n), u64::from(tokens), u64::from(ctx));
        b.ensure(c > 0, || "ctx must be > 0".into())?;
        let dims = [b.groups("n / 256", nn.div_ceil(256))?, b.groups("tokens", t)?, 1];
        let bound = vec![
            b.storage("src", src, 0, f32s(t * nn))?,
            b.storage("positions", positions, 0, f32s(t))?,
            b.storage("dst", dst, 0, f16s(c * nn))?,
        ];
        Ok(b.finish(vec![(KvStoreParams { n, tokens, ctx, _pad: 0 }, bound, dims)]))
    }
}
