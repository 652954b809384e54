use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

impl Kernels {
    /// Residual add then RMSNorm in one dispatch: `h = a + b`, `out = (h * (1 / sqrt(mean(h²) + eps))) * w`.
    /// Saves the separate [`Kernels::add`] a layer would run before its FFN norm. Params as
    /// [`Kernels::rms_norm`] (`RmsNormParams`). Shapes: `a, b, h, out [T, n] f32`, `w [n] f32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes or n not a multiple of 4; buffer errors for views too small or
    /// misaligned.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm(
        &self,
        a: View<'_>,
        b_in: View<'_>,
        w: View<'_>,
        h: View<'_>,
        out: View<'_>,
        n: u32,
        tokens: u32,
        eps: f32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::AddRmsNorm);
        let (nn, t) = (u64::from(n), u64::from(tokens));
        b.ensure(nn > 0 && nn.is_multiple_of(4), || {
            format!("n must be a positive multiple of 4 (rows are read as vec4); got {nn}")
        })?;
        let gx = b.groups("tokens", t)?;
        let bound = vec![
            b.storage("a", a, 0, f32s(t * nn))?,
            b.storage("b", b_in, 0, f32s(t * nn))?,
            b.storage("w", w, 0, f32s(nn))?,
            b.storage("h", h, 0, f32s(t * nn))?,
            b.storage("out", out, 0, f32s(t * nn))?,
        ];
        Ok(b.finish(vec![(RmsNormParams { n, tokens, eps, _pad: 0 }, bound, [gx, 1, 1])]))
    }
}
