use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `sample_top_k.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleTopKParams {
    /// Level 0: logits in the input; later levels: lists of k pairs in it (the level before's workgroups).
    pub n: u32,
    /// 0 for the logits, then 1, 2, ...
    pub level: u32,
    /// 1 for the level of one workgroup, which draws.
    pub last: u32,
    /// Padding to 16 bytes.
    pub _pad: u32,
}
const _: () = assert!(size_of::<SampleTopKParams>() == 16);

/// What a sampled step draws with, written by the host into the buffer [`Kernels::sample_top_k`] reads
/// before each step that runs it (mirrored in `sample_step.wgsl`).
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
    /// Divides a positive logit (multiplies a non-positive one) of each token in the window
    /// ([`Kernels::apply_penalties`]); 1 turns it off.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of each distinct token in the window; 0 turns it off.
    pub presence_penalty: f32,
    /// The window: the step's input token and those before it, up to [`PENALTY_MAX_N`]; 0 turns penalties
    /// off.
    pub last_n: u32,
    /// Subtracted from the logit of each token in the window once for each time it occurs there; 0 turns
    /// it off.
    pub frequency_penalty: f32,
}
const _: () = assert!(size_of::<SampleStep>() == 36);

impl SampleStep {
    /// Whether [`Kernels::apply_penalties`] has anything to do.
    pub fn penalised(&self) -> bool {
        self.last_n > 0
            && (self.repetition_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }
}

/// Most candidates [`Kernels::sample_top_k`] keeps (top-k above it is sampled on the CPU).
pub const SAMPLE_MAX_K: u32 = 64;

/// Candidates one workgroup of `sample_top_k.wgsl` ranks (`TILE`): 128 lanes × 8.
pub(crate) const SAMPLE_TILE: u32 = 1024;

/// Workgroups of each level of [`Kernels::sample_top_k`] for a row of `n` logits: tiles of the logits, then
/// tiles of the lists of [`SAMPLE_MAX_K`] the level before leaves, down to one.
pub fn sample_levels(n: u32) -> Vec<u32> {
    let mut levels = vec![n.div_ceil(SAMPLE_TILE).max(1)];
    while let Some(&g) = levels.last().filter(|&&g| g > 1) {
        levels.push((g * SAMPLE_MAX_K).div_ceil(SAMPLE_TILE));
    }
    levels
}

/// `u32` words of each of the two partial buffers [`Kernels::sample_top_k`] needs for rows of `n` logits:
/// room for the first level's lists of [`SAMPLE_MAX_K`] (key, index) pairs (later levels alternate between
/// the two, a level never reading and writing one buffer).
pub fn sample_partial_len(n: u32) -> u64 {
    2 * u64::from(sample_levels(n)[0]) * u64::from(SAMPLE_MAX_K)
}

/// Longest row [`Kernels::sample_top_k`] takes: the first level's tiles along one dispatch axis of any
/// device (65,535).
pub const SAMPLE_MAX_N: u32 = 65_535 * SAMPLE_TILE;

impl Kernels {
    /// A token drawn from one row of logits as `step` says (see [`crate::cpu::sample_top_k`], which it
    /// matches): the `step.k` highest logits (ties to the lower index, NaN never), their temperature
    /// weights, top-p, min-p, then the candidate `step.u` falls on; into `out[0]`. One dispatch per level
    /// ([`sample_levels`]: 3 for a 151,936-token vocabulary), each ranking tiles of 1,024 candidates and
    /// keeping their k best in the `partial` buffers (in turn), the last drawing. Shapes: `logits [n] f32`,
    /// `step` one [`SampleStep`], each `partial [sample_partial_len(n)] u32`, `out [1] u32`.
    ///
    /// # Errors
    /// Shape errors for `n` of 0 or over [`SAMPLE_MAX_N`]; buffer errors as usual.
    pub fn sample_top_k(
        &self,
        logits: View<'_>,
        step: View<'_>,
        partial: [View<'_>; 2],
        out: View<'_>,
        n: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::SampleTopK);
        b.ensure(n > 0 && n <= SAMPLE_MAX_N, || format!("n must be 1..={SAMPLE_MAX_N}; got {n}"))?;
        let levels = sample_levels(n);
        let list_bytes = |groups: u32| 8 * u64::from(groups) * u64::from(SAMPLE_MAX_K);
        let step_bytes = size_of::<SampleStep>() as u64;
        let mut parts = Vec::with_capacity(levels.len());
        for (level, &groups) in levels.iter().enumerate() {
            let last = level + 1 == levels.len();
            let input = if level == 0 {
                b.storage("logits", logits, 0, f32s(u64::from(n)))?
            } else {
                b.storage("partial", partial[(level - 1) % 2], 0, list_bytes(levels[level - 1]))?
            };
            let output = if last {
                b.storage("out", out, 0, f32s(1))?
            } else {
                b.storage("partial", partial[level % 2], 0, list_bytes(groups))?
            };
            let p = SampleTopKParams {
                n: if level == 0 { n } else { levels[level - 1] },
                level: level as u32,
                last: u32::from(last),
                _pad: 0,
            };
            let bound = vec![b.storage("step", step, 0, step_bytes)?, input, output];
            parts.push((p, bound, [b.groups("tiles", u64::from(groups))?, 1, 1]));
        }
        Ok(b.finish(parts))
    }
}
