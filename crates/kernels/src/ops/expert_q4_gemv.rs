use super::expert_q8_gemv::{ExpertQ8GemvParams, GemvInput};
use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{CombineOut, Dispatch, ExpertPlanes};

/// Quant-plane bytes of one 32-value Q4_0 block (16 bytes of nibble pairs; the f16 scale is in the
/// scale plane).
pub(crate) const Q4_0_BLOCK_BYTES: u64 = 16;

/// Params of `expert_q4_gemv`: the kernel is `expert_q8_gemv.wgsl` with the Q4_0 row walk.
pub type ExpertQ4GemvParams = ExpertQ8GemvParams;

impl Kernels {
    /// Expert Q4_0 GEMV for P (token, pick) pairs in one dispatch (one per pool part when the pool is
    /// larger than a binding), as [`Kernels::expert_q8_gemv`] but over Q4_0 pool planes: the quant plane
    /// holds 16 bytes per 32-value block in ggml order (the low nibble of byte j is value j, the high
    /// nibble value j + 16; value = `(nibble - 8) * scale`), the scale plane one f16 per block.
    /// `y[pair] = W[slot_idx[pair]] · x[pair / x_div]`; gate‖up: `x_div = k`, down: `x_div = 1`. Slots
    /// past the pool write nothing.
    /// Shapes: `x [P / x_div, cols] f32`, `slot_idx [P] u32`, pool planes (`q` `[slots, rows, cols/32]`
    /// 16-byte blocks, `scales` `[slots, rows, cols/32]` f16), `y [P, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 32, `x_div` not dividing P, zero sizes; buffer errors
    /// as usual (a pool split point must be 256-byte aligned in both planes).
    pub fn expert_q4_gemv(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        self.expert_gemv(
            Kernel::ExpertQ4Gemv,
            Q4_0_BLOCK_BYTES,
            pool,
            x,
            slot_idx,
            y,
            pairs,
            GemvInput::Plain(x_div),
        )
    }

    /// The down projection straight from gate‖up over Q4_0 planes: as [`Kernels::expert_q8_gemv_swiglu`].
    ///
    /// # Errors
    /// As [`Kernels::expert_q4_gemv`].
    pub fn expert_q4_gemv_swiglu(
        &self,
        pool: ExpertPlanes<'_>,
        gate_up: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
    ) -> Result<Dispatch> {
        self.expert_gemv(
            Kernel::ExpertQ4Gemv,
            Q4_0_BLOCK_BYTES,
            pool,
            gate_up,
            slot_idx,
            y,
            pairs,
            GemvInput::SwiGlu,
        )
    }

    /// gate‖up with SwiGLU on its output over Q4_0 planes: as [`Kernels::expert_q8_gemv_gate_up_swiglu`].
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv_gate_up_swiglu`].
    pub fn expert_q4_gemv_gate_up_swiglu(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        act: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        let q4 = (Kernel::ExpertQ4Gemv, Q4_0_BLOCK_BYTES);
        self.gate_up_swiglu(q4, pool, x, slot_idx, act, (pairs, x_div))
    }

    /// The down projection and the MoE combine over Q4_0 planes: as [`Kernels::expert_q8_gemv_combine`]
    /// (what decode runs at the end of a layer of Q4_0 experts).
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv_combine`].
    pub fn expert_q4_gemv_combine(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        out: CombineOut<'_>,
        tokens_k: (u32, u32),
    ) -> Result<Dispatch> {
        self.gemv_combine((Kernel::ExpertQ4GemvCombine, Q4_0_BLOCK_BYTES), pool, x, slot_idx, out, tokens_k)
    }
}
