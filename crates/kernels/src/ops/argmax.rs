use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `argmax.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ArgmaxParams {
    /// Row length.
    pub n: u32,
    /// Rows T.
    pub tokens: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ArgmaxParams>() == 16);

impl Kernels {
    /// `out[t] = argmax(logits[t])`, ties to the lower index. Shapes: `logits [T, n] f32`, `out [T] u32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn argmax(&self, logits: View<'_>, out: View<'_>, n: u32, tokens: u32) -> Result<Dispatch> {
        let b = self.binder(Kernel::Argmax);
        let (nn, t) = (u64::from(n), u64::from(tokens));
        b.ensure(nn > 0, || "n must be > 0".into())?;
        let dims = [b.groups("tokens", t)?, 1, 1];
        let bound = vec![b.storage("logits", logits, 0, f32s(t * nn))?, b.storage("out", out, 0, f32s(t))?];
        Ok(b.finish(vec![(ArgmaxParams { n, tokens, _pad: [0; 2] }, bound, dims)]))
    }
}
