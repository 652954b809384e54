use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `sample_top_k.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleTopKParams {
    /// Row length (vocabulary).
    pub n: u32,
    /// Slices of the row in the first stage, [`sample_slices`].
    pub slices: u32,
    /// 0: each slice's k best; 1: the k best of those, then the draw.
    pub stage: u32,
    /// Pairs a slice has room for in the partial buffer ([`SAMPLE_MAX_K`]).
    pub kmax: u32,
}
const _: () = assert!(size_of::<SampleTopKParams>() == 16);

/// What a sampled step draws with, written by the host into the buffer [`Kernels::sample_top_k`] reads
/// before each step that runs it (mirrored in the WGSL `Step`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleStep {
    /// Candidates kept, the `k` highest logits: 1 to [`SAMPLE_MAX_K`].
    pub k: u32,
    /// Softmax temperature, > 0.
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 turns it off.
    pub top_p: f32,
    /// Drop candidates weighing under `min_p` × the best one's; 0 turns it off.
    pub min_p: f32,
    /// The draw's uniform in [0, 1).
    pub u: f32,
}
const _: () = assert!(size_of::<SampleStep>() == 20);

/// Most candidates [`Kernels::sample_top_k`] keeps (top-k above it is sampled on the CPU).
pub const SAMPLE_MAX_K: u32 = 64;

/// Logits one workgroup of the first stage ranks (`SLICE` in `sample_top_k.wgsl`): 256 lanes × 32.
pub(crate) const SAMPLE_SLICE: u32 = 8192;

/// Slices of a row of `n` logits in the sampler's first stage.
pub fn sample_slices(n: u32) -> u32 {
    n.div_ceil(SAMPLE_SLICE)
}

/// `u32` words of the partial buffer [`Kernels::sample_top_k`] needs for rows of `n` logits: room for
/// [`SAMPLE_MAX_K`] (key, index) pairs per slice.
pub fn sample_partial_len(n: u32) -> u64 {
    2 * u64::from(sample_slices(n)) * u64::from(SAMPLE_MAX_K)
}

/// Longest row [`Kernels::sample_top_k`] takes: the second stage ranks every slice's k best at once.
pub const SAMPLE_MAX_N: u32 = SAMPLE_SLICE / SAMPLE_MAX_K * SAMPLE_SLICE;

impl Kernels {
    /// A token drawn from one row of logits as `step` says (see [`crate::cpu::sample_top_k`], which it
    /// matches): the `step.k` highest logits (ties to the lower index, NaN never), their temperature
    /// weights, top-p, min-p, then the candidate `step.u` falls on; into `out[0]`. Two dispatches: each
    /// slice's k best into `partial`, then the k best of those and the draw. Shapes: `logits [n] f32`,
    /// `step` one [`SampleStep`], `partial [sample_partial_len(n)] u32`, `out [1] u32`.
    ///
    /// # Errors
    /// Shape errors for `n` of 0 or over [`SAMPLE_MAX_N`]; buffer errors as usual.
    pub fn sample_top_k(
        &self,
        logits: View<'_>,
        step: View<'_>,
        partial: View<'_>,
        out: View<'_>,
        n: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::SampleTopK);
        b.ensure(n > 0 && n <= SAMPLE_MAX_N, || format!("n must be 1..={SAMPLE_MAX_N}; got {n}"))?;
        let slices = sample_slices(n);
        let step_bytes = size_of::<SampleStep>() as u64;
        let pairs = 4 * sample_partial_len(n);
        let first = vec![
            b.storage("step", step, 0, step_bytes)?,
            b.storage("logits", logits, 0, f32s(u64::from(n)))?,
            b.storage("partial", partial, 0, pairs)?,
        ];
        let second = vec![
            b.storage("step", step, 0, step_bytes)?,
            b.storage("partial", partial, 0, pairs)?,
            b.storage("out", out, 0, f32s(1))?,
        ];
        let p = |stage| SampleTopKParams { n, slices, stage, kmax: SAMPLE_MAX_K };
        let dims = [b.groups("slices", u64::from(slices))?, 1, 1];
        Ok(b.finish(vec![(p(0), first, dims), (p(1), second, [1, 1, 1])]))
    }
}
