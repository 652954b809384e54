use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `apply_penalties.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ApplyPenaltiesParams {
    /// Vocabulary (logits).
    pub n: u32,
    /// Ring length, [`PENALTY_MAX_N`].
    pub ring: u32,
    /// Padding to 16 bytes.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ApplyPenaltiesParams>() == 16);

/// The longest penalty window the GPU keeps (the ring of recent tokens [`Kernels::apply_penalties`] reads;
/// one lane a position).
pub const PENALTY_MAX_N: u32 = 256;

impl Kernels {
    /// Repetition and presence penalties on one step's logits, in place (see
    /// [`crate::cpu::apply_penalties`]): the window is the step's input token (`token_ids[0]`, written into
    /// `recent` at `positions[0] % PENALTY_MAX_N` first) and the `step.last_n - 1` positions before it in
    /// `recent`. Shapes: `step` one [`SampleStep`], `positions [1] u32`, `token_ids [1] u32`,
    /// `recent [PENALTY_MAX_N] u32`, `logits [n] f32`.
    ///
    /// # Errors
    /// Shape errors for `n` of 0; buffer errors as usual.
    pub fn apply_penalties(
        &self,
        step: View<'_>,
        (positions, token_ids): (View<'_>, View<'_>),
        recent: View<'_>,
        logits: View<'_>,
        n: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ApplyPenalties);
        b.ensure(n > 0, || "n must be > 0".into())?;
        let bound = vec![
            b.storage("step", step, 0, size_of::<SampleStep>() as u64)?,
            b.storage("positions", positions, 0, f32s(1))?,
            b.storage("token_ids", token_ids, 0, f32s(1))?,
            b.storage("recent", recent, 0, f32s(u64::from(PENALTY_MAX_N)))?,
            b.storage("logits", logits, 0, f32s(u64::from(n)))?,
        ];
        let p = ApplyPenaltiesParams { n, ring: PENALTY_MAX_N, _pad: [0; 2] };
        Ok(b.finish(vec![(p, bound, [1, 1, 1])]))
    }
}
