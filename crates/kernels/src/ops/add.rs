use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `add.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AddParams {
    /// Elements.
    pub n: u32,
    /// Padding.
    pub _pad: [u32; 3],
}
const _: () = assert!(size_of::<AddParams>() == 16);

impl Kernels {
    /// Residual add: `out = a + b`. Shapes: `a, b, out [n] f32`.
    ///
    /// # Errors
    /// Shape errors for `n` zero; buffer errors as usual.
    pub fn add(&self, a: View<'_>, b_in: View<'_>, out: View<'_>, n: u32) -> Result<Dispatch> {
        let b = self.binder(Kernel::Add);
        let nn = u64::from(n);
        let per_row = 65535 * 256;
        let dims =
            [b.groups("n / 256", nn.div_ceil(256).min(65535))?, b.groups("n rows", nn.div_ceil(per_row))?, 1];
        let bound = vec![
            b.storage("a", a, 0, f32s(nn))?,
            b.storage("b", b_in, 0, f32s(nn))?,
            b.storage("out", out, 0, f32s(nn))?,
        ];
        Ok(b.finish(vec![(AddParams { n, _pad: [0; 3] }, bound, dims)]))
    }
}
