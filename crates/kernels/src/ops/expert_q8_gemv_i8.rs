use super::expert_q8_gemv::{GemvInput, Q8_0_BLOCK_BYTES};
use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{CombineOut, Dispatch, ExpertPlanes, Route};

/// The expert GEMVs on Q8_0-quantised inputs: `expert_q8_gemv.wgsl` and `expert_q8_gemv_combine.wgsl` with
/// the int8 row walk (`expert_q8i8_rows.wgsl`), so their params are those kernels'. Each 32-value block of
/// the input is quantised as the kernel reads it, as llama.cpp's `quantize_row_q8_0` does it
/// ([`cpu::quantize_q8`](crate::cpu::quantize_q8)), and summed against the weights' int8 exactly: what
/// llama.cpp's CPU backend computes for Q8_0 weights, with no quantisation dispatch before them.
impl Kernels {
    /// [`Kernels::expert_q8_gemv`] on the input Q8_0-quantised:
    /// `y[pair, r] = Σ_b (Σ_c q[slot, r, c] · xq[c]) · scale[slot, r, b] · xs[b]` over the 32-column blocks
    /// b, `(xq, xs)` the quantisation of `x[pair / x_div]`
    /// ([`cpu::expert_q8_gemv_i8`](crate::cpu::expert_q8_gemv_i8)).
    /// Shapes as [`Kernels::expert_q8_gemv`].
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`].
    pub fn expert_q8_gemv_i8(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        let input = GemvInput::Plain(x_div);
        self.expert_gemv(Kernel::ExpertQ8GemvI8, Q8_0_BLOCK_BYTES, pool, x, slot_idx, y, pairs, input)
    }

    /// [`Kernels::expert_q8_gemv_gate_up_swiglu`] on the input Q8_0-quantised (as
    /// [`Kernels::expert_q8_gemv_i8`]); SwiGLU on the output as there.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv_gate_up_swiglu`].
    pub fn expert_q8_gemv_gate_up_swiglu_i8(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        act: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        let q8 = (Kernel::ExpertQ8GemvI8, Q8_0_BLOCK_BYTES);
        self.gate_up_swiglu(q8, pool, x, slot_idx, act, (pairs, x_div))
    }

    /// [`Kernels::expert_q8_gemv`] on an input Q8_0-quantised before it: `xq [P / x_div]` rows of
    /// [`q8_row_bytes`](crate::q8_row_bytes)`(cols)` as [`Kernels::quantize_q8`] writes them, the sums as
    /// [`Kernels::expert_q8_gemv_i8`]'s (whose result for `x` this is for `xq` the quantisation of `x`).
    /// Where the one input row serves many workgroups (gate‖up's 8 picks' 1,536 rows), each lane then
    /// loads 16 int8 for 16 values instead of 64 bytes of f32, and quantises nothing.
    ///
    /// The kernel reads `xq` in 16-byte vectors: its buffer must hold the rows rounded up to 16 bytes.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`], a shape error unless `cols` is a multiple of 128 (every row of `xq`
    /// starts on a 16-byte boundary) or `xq` is one row (`pairs == x_div`: one token's gate‖up), and a
    /// buffer error for `xq` without its padding to 16 bytes.
    pub fn expert_q8_gemv_xq(
        &self,
        pool: ExpertPlanes<'_>,
        xq: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        xq_rows(self, pool.cols, pairs, x_div)?;
        let input = GemvInput::Plain(x_div);
        self.expert_gemv(Kernel::ExpertQ8GemvXq, Q8_0_BLOCK_BYTES, pool, xq, slot_idx, y, pairs, input)
    }

    /// [`Kernels::expert_q8_gemv_gate_up_swiglu`] on an input Q8_0-quantised before it (as
    /// [`Kernels::expert_q8_gemv_xq`]); SwiGLU on the output as there.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv_gate_up_swiglu`] and [`Kernels::expert_q8_gemv_xq`].
    pub fn expert_q8_gemv_gate_up_swiglu_xq(
        &self,
        pool: ExpertPlanes<'_>,
        xq: View<'_>,
        slot_idx: View<'_>,
        act: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        xq_rows(self, pool.cols, pairs, x_div)?;
        let q8 = (Kernel::ExpertQ8GemvXq, Q8_0_BLOCK_BYTES);
        self.gate_up_swiglu(q8, pool, xq, slot_idx, act, (pairs, x_div))
    }

    /// [`Kernels::expert_q8_gemv_gate_up_swiglu_routed`] on an input Q8_0-quantised before it (as
    /// [`Kernels::expert_q8_gemv_xq`]).
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv_gate_up_swiglu_routed`] and [`Kernels::expert_q8_gemv_xq`].
    pub fn expert_q8_gemv_gate_up_swiglu_xq_routed(
        &self,
        pool: ExpertPlanes<'_>,
        xq: View<'_>,
        route: Route<'_>,
        act: View<'_>,
        (tokens, k): (u32, u32),
    ) -> Result<Dispatch> {
        xq_rows(self, pool.cols, tokens.saturating_mul(k), k)?;
        let q8 = (Kernel::ExpertQ8GemvXqRouted, Q8_0_BLOCK_BYTES);
        self.gate_up_swiglu_routed(q8, pool, xq, route, act, (tokens, k))
    }

    /// [`Kernels::expert_q8_gemv_combine`] on each pick's input Q8_0-quantised (as
    /// [`Kernels::expert_q8_gemv_i8`]); the combine and the next norm's inputs as there.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv_combine`].
    pub fn expert_q8_gemv_combine_i8(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        out: CombineOut<'_>,
        tokens_k: (u32, u32),
    ) -> Result<Dispatch> {
        let q8 = (Kernel::ExpertQ8GemvCombineI8, Q8_0_BLOCK_BYTES);
        self.gemv_combine(q8, pool, x, slot_idx, out, tokens_k)
    }
}

/// `expert_q8_gemv_xq` reads a quantised row as 16-byte vectors: rows after the first start on one only if
/// their `9 · cols / 32` words are a multiple of 4 (the last row's partial vector is the binding's
/// padding, `input_binding_bytes`).
fn xq_rows(k: &Kernels, cols: u32, pairs: u32, x_div: u32) -> Result<()> {
    k.binder(Kernel::ExpertQ8GemvXq).ensure(cols.is_multiple_of(128) || pairs == x_div, || {
        format!(
            "an input quantised before the GEMV needs cols a multiple of 128 or a single row; \
             got cols {cols}, {pairs} pairs / x_div {x_div}"
        )
    })
}
