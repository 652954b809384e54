use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `router_topk.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RouterTopkParams {
    /// Experts E, at most 256.
    pub experts: u32,
    /// Picks k, at most 32 and at most E.
    pub k: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<RouterTopkParams>() == 16);

impl Kernels {
    /// Router: softmax over all experts, the k largest (ties to the lower index, best first), weights
    /// renormalised to sum 1. Shapes: `logits [T, E] f32`, `ids [T, k] u32`, `weights [T, k] f32`.
    ///
    /// # Errors
    /// Shape errors for E over 256, k over 32 or over E, zero sizes; buffer errors as usual.
    pub fn router_topk(
        &self,
        logits: View<'_>,
        ids: View<'_>,
        weights: View<'_>,
        experts: u32,
        k: u32,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::RouterTopk);
        let (e, kk, t) = (u64::from(experts), u64::from(k), u64::from(tokens));
        b.ensure(e > 0 && e <= 256 && kk > 0 && kk <= 32 && kk <= e, || {
            format!("needs 0 < experts <= 256 and 0 < k <= min(32, experts); got experts {e}, k {kk}")
        })?;
        let dims = [b.groups("tokens", t)?, 1, 1];
        let bound = vec![
            b.storage("logits", logits, 0, f32s(t * e))?,
            b.storage("ids", ids, 0, f32s(t * kk))?,
            b.storage("weights", weights, 0, f32s(t * kk))?,
        ];
        Ok(b.finish(vec![(RouterTopkParams { experts, k, tokens, _pad: 0 }, bound, dims)]))
    }
}
