use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `rms_norm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RmsNormParams {
    /// Row length.
    pub n: u32,
    /// Rows T.
    pub tokens: u32,
    /// Epsilon added to the mean square.
    pub eps: f32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<RmsNormParams>() == 16);

impl Kernels {
    /// RMSNorm per row: `out = (x * (1 / sqrt(mean(x²) + eps))) * w`.
    /// Shapes: `x [T, n] f32`, `w [n] f32`, `out [T, n] f32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors for views too small or misaligned.
    pub fn rms_norm(
        &self,
        x: View<'_>,
        w: View<'_>,
        out: View<'_>,
        n: u32,
        tokens: u32,
        eps: f32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::RmsNorm);
        let (nn, t) = (u64::from(n), u64::from(tokens));
        b.ensure(nn > 0, || "n must be > 0".into())?;
        let gx = b.groups("tokens", t)?;
        let bound = vec![
            b.storage("x", x, 0, f32s(t * nn))?,
            b.storage("w", w, 0, f32s(nn))?,
            b.storage("out", out, 0, f32s(t * nn))?,
        ];
        Ok(b.finish(vec![(RmsNormParams { n, tokens, eps, _pad: 0 }, bound, [gx, 1, 1])]))
    }
}
