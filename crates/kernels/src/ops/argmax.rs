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
    /// Slices of a row in the first stage, [`argmax_slices`].
    pub slices: u32,
    /// 0: slices to (value, index) pairs; 1: a row's pairs to its index.
    pub stage: u32,
}
const _: () = assert!(size_of::<ArgmaxParams>() == 16);

/// Values of a row one workgroup of the argmax's first stage scans (the `SLICE` override of `argmax.wgsl`,
/// set when its pipeline is built): 256 lanes × 8, two steps of four loads a lane.
pub(crate) const ARGMAX_SLICE: u32 = 2048;

/// Slices of a row of `n` values in the argmax's first stage.
pub fn argmax_slices(n: u32) -> u32 {
    n.div_ceil(ARGMAX_SLICE)
}

/// `u32` words of the partial buffer [`Kernels::argmax`] needs: a (value, index) pair per slice and row.
pub fn argmax_partial_len(n: u32, tokens: u32) -> u64 {
    2 * u64::from(argmax_slices(n)) * u64::from(tokens)
}

impl Kernels {
    /// `out[t] = argmax(logits[t])`, ties to the lower index, in two dispatches: the best of each slice of
    /// a row into `partial`, then the best of those. Shapes: `logits [T, n] f32`,
    /// `partial [argmax_partial_len(n, T)] u32`, `out [T] u32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn argmax(
        &self,
        logits: View<'_>,
        partial: View<'_>,
        out: View<'_>,
        n: u32,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::Argmax);
        let (nn, t) = (u64::from(n), u64::from(tokens));
        b.ensure(nn > 0, || "n must be > 0".into())?;
        let slices = argmax_slices(n);
        let pairs = 4 * argmax_partial_len(n, tokens);
        let first =
            vec![b.storage("logits", logits, 0, f32s(t * nn))?, b.storage("partial", partial, 0, pairs)?];
        let second = vec![b.storage("partial", partial, 0, pairs)?, b.storage("out", out, 0, f32s(t))?];
        let rows = b.groups("tokens", t)?;
        let dims = [b.groups("slices", u64::from(slices))?, rows, 1];
        let p = |stage| ArgmaxParams { n, tokens, slices, stage };
        Ok(b.finish(vec![(p(0), first, dims), (p(1), second, [rows, 1, 1])]))
    }
}
