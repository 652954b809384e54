use super::expert_q8_gemv::{ExpertQ8GemvParams, GemvInput};
use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ExpertPlanes};

/// Quant-plane bytes of one 32-value Q4_0 block (16 bytes of nibble pairs; the f16 scale is in the
/// scale plane).
pub(crate) const Q4_0_BLOCK_BYTES: u64 = 16;

/// Params of `expert_q4_gemv.wgsl`: the same fields as `expert_q8_gemv.wgsl`'s, which the shader mirrors.
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
}
