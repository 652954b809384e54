use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `shared_expert_gate.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SharedExpertGateParams {
    /// Hidden size.
    pub hidden: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<SharedExpertGateParams>() == 16);

impl Kernels {
    /// qwen35moe's shared expert joins the routed ones: `out[t] += σ(w · u[t]) · s[t]`. Shapes: `u`, `s`,
    /// `out` `[T, hidden]`, `w [hidden]`, all f32.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn shared_expert_gate(
        &self,
        u: View<'_>,
        w: View<'_>,
        s: View<'_>,
        out: View<'_>,
        hidden: u32,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::SharedExpertGate);
        let (h, t) = (u64::from(hidden), u64::from(tokens));
        b.ensure(h > 0, || "hidden must be > 0".into())?;
        let dims = [b.groups("tokens", t)?, 1, 1];
        let bound = vec![
            b.storage("u", u, 0, f32s(t * h))?,
            b.storage("w", w, 0, f32s(h))?,
            b.storage("s", s, 0, f32s(t * h))?,
            b.storage("out", out, 0, f32s(t * h))?,
        ];
        Ok(b.finish(vec![(SharedExpertGateParams { hidden, tokens, _pad: [0; 2] }, bound, dims)]))
    }
}
