use super::quantize_q8::{input_binding_bytes, input_row_words};
use super::router_topk::{check_picks, check_table_row};
use crate::error::Result;
use crate::kernels::{Binder, Bound, Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `expert_q8_gemv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertQ8GemvParams {
    /// Rows of one slot's matrix.
    pub rows: u32,
    /// Input length, a multiple of 32.
    pub cols: u32,
    /// Pairs P.
    pub pairs: u32,
    /// Input row = pair / x_div.
    pub x_div: u32,
    /// First slot bound in this part.
    pub slot_begin: u32,
    /// One past the last slot bound in this part.
    pub slot_end: u32,
    /// 1: the input is `silu(gate) · up` read from `x = [P, 2 · cols]` gate‖up (x_div 1); 0: `x[pair / x_div]`.
    pub silu_input: u32,
    /// 1: the rows are gate then up and the output is `silu(gate) · up`, `[P, rows / 2]`; 0: `[P, rows]`.
    pub silu_output: u32,
    /// Routed kernels: experts E, the logits of a token; 0 otherwise.
    pub experts: u32,
    /// Routed kernels: the layer's first entry of the slot table (layer · E); 0 otherwise.
    pub table_base: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ExpertQ8GemvParams>() == 48);

/// The router's logits and outputs for the routed expert GEMVs
/// ([`Kernels::expert_q8_gemv_gate_up_swiglu_routed`]): what [`Kernels::router_topk_slots`] reads and
/// writes, which they replace.
#[derive(Clone, Copy, Debug)]
pub struct Route<'a> {
    /// `[T, E] f32` router logits.
    pub logits: View<'a>,
    /// `[entries] u32`: the pool slot of each (layer, expert).
    pub table: View<'a>,
    /// The layer's first entry of the table (layer · E), and the table's entries.
    pub table_range: (u32, u32),
    /// Experts E, at most 256.
    pub experts: u32,
    /// `[T·k] u32`: the picks, best first (written).
    pub ids: View<'a>,
    /// `[T·k] f32`: their weights, renormalised over the k (written).
    pub weights: View<'a>,
    /// `[T·k] u32`: their pool slots (written).
    pub slots: View<'a>,
}

/// Params of `expert_q8_gemv_combine.wgsl` (also `expert_q4_gemv_combine`'s).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertQ8GemvCombineParams {
    /// Rows of one slot's matrix (H).
    pub rows: u32,
    /// Input length (F), a multiple of 32.
    pub cols: u32,
    /// Picks per token k.
    pub k: u32,
    /// First slot bound in this part.
    pub slot_begin: u32,
    /// One past the last slot bound in this part.
    pub slot_end: u32,
    /// 1: write `scaled` and `squares` (the last pool part).
    pub finish: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ExpertQ8GemvCombineParams>() == 32);

/// Where [`Kernels::expert_q8_gemv_combine`] adds the weighted picks, and how it starts the next RMSNorm.
#[derive(Clone, Copy, Debug)]
pub struct CombineOut<'a> {
    /// `[T·k] f32` pick weights.
    pub weights: View<'a>,
    /// `[T, rows] f32`: the residual stream, added to in place.
    pub residual: View<'a>,
    /// `[rows] f32`: the next RMSNorm's weight.
    pub next_norm: View<'a>,
    /// `[T, rows] f32`: the new residual times `next_norm` (written when `finish`).
    pub scaled: View<'a>,
    /// `[T, rows.div_ceil(4)] f32`: sums of the new residual's squares, 4 rows each (written when
    /// `finish`); their total over a token's row is the next norm's sum of squares.
    pub squares: View<'a>,
    /// Whether this call ends the combine (a pool split over several calls adds each part's picks; only
    /// the last may write `scaled` and `squares`).
    pub finish: bool,
}

/// The most picks a token [`Kernels::expert_q8_gemv_combine`] takes (its shader's `MAX_PICKS`).
const COMBINE_MAX_PICKS: u32 = 64;

/// Rows of one workgroup of `expert_q8_gemv_combine` (every lane group takes the same 4 rows of its picks).
const COMBINE_ROWS: u64 = 4;

/// The (token, pick) pairs of a GEMV-combine's `tokens` tokens of `k` picks, checked: 1 to
/// [`COMBINE_MAX_PICKS`] picks a token, and a count that fits.
pub(crate) fn combine_pairs(b: &Binder<'_>, tokens: u32, k: u32) -> Result<u32> {
    b.ensure((1..=COMBINE_MAX_PICKS).contains(&k), || {
        format!("needs 1 to {COMBINE_MAX_PICKS} picks a token; got k {k}")
    })?;
    tokens.checked_mul(k).ok_or_else(|| b.shape(format!("{tokens} tokens x {k} picks overflow")))
}

/// How many sums of squares [`Kernels::expert_q8_gemv_combine`] writes a token for `rows` rows (one per
/// workgroup of 4 rows): [`QkvRopeStoreParams::in_squares`] of the layer after it.
pub fn combine_squares(rows: u32) -> u32 {
    rows.div_ceil(COMBINE_ROWS as u32)
}

/// One matrix plane pair of the expert slot pool: the quant plane (`[slots, rows, cols]` int8 for Q8_0,
/// `[slots, rows, cols/32]` 16-byte nibble blocks for Q4_0) and `[slots, rows, cols/32]` f16 scales
/// (gate‖up: rows = 2F, cols = H; down: rows = H, cols = F).
#[derive(Clone, Copy, Debug)]
pub struct ExpertPlanes<'a> {
    /// The quant plane (int8 for Q8_0, packed nibbles for Q4_0).
    pub q: View<'a>,
    /// The scale plane.
    pub scales: View<'a>,
    /// Slots bound here (a pool split over several buffers passes one part at a time).
    pub slots: u32,
    /// The pool slot of the first slot bound here (0 for a pool in one buffer): pairs whose slot lies outside
    /// `first_slot..first_slot + slots` are left to the other parts' dispatches.
    pub first_slot: u32,
    /// Rows of one slot's matrix.
    pub rows: u32,
    /// Columns, a multiple of 32.
    pub cols: u32,
}

impl Kernels {
    /// Expert Q8_0 GEMV for P (token, pick) pairs in one dispatch (one per pool part when the pool is
    /// larger than a binding): `y[pair] = W[slot_idx[pair]] · x[pair / x_div]`. gate‖up: `x_div = k`
    /// (a token's picks share its input); down: `x_div = 1`. Slots past the pool write nothing.
    /// Shapes: `x [P / x_div, cols] f32`, `slot_idx [P] u32`, pool planes, `y [P, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 32, `x_div` not dividing P, zero sizes; buffer errors
    /// as usual (a pool split point must be 256-byte aligned in both planes).
    pub fn expert_q8_gemv(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        self.expert_gemv(
            Kernel::ExpertQ8Gemv,
            Q8_0_BLOCK_BYTES,
            pool,
            x,
            slot_idx,
            y,
            pairs,
            GemvInput::Plain(x_div),
        )
    }

    /// The down projection straight from gate‖up: as [`Kernels::expert_q8_gemv`] with x_div 1, but the
    /// input of pair p is `silu(gate_up[p, ..cols]) · gate_up[p, cols..]` (SwiGLU, computed as the input is
    /// read: no separate [`Kernels::silu_mul`] dispatch).
    /// Shapes: `gate_up [P, 2 · cols] f32`, `slot_idx [P] u32`, pool planes, `y [P, rows] f32`.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`].
    pub fn expert_q8_gemv_swiglu(
        &self,
        pool: ExpertPlanes<'_>,
        gate_up: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
    ) -> Result<Dispatch> {
        self.expert_gemv(
            Kernel::ExpertQ8Gemv,
            Q8_0_BLOCK_BYTES,
            pool,
            gate_up,
            slot_idx,
            y,
            pairs,
            GemvInput::SwiGlu,
        )
    }

    /// gate‖up with SwiGLU applied to its output, in one dispatch: `act[pair, j] = silu(g_j) · u_j` where
    /// `g‖u = W[slot_idx[pair]] · x[pair / x_div]` (g the first `rows / 2` rows, u the rest). What decode
    /// runs before a plain down GEMV: [`Kernels::expert_q8_gemv_swiglu`] computes the same SwiGLU for
    /// every weight chunk it reads instead.
    /// Shapes: `x [P / x_div, cols] f32`, `slot_idx [P] u32`, pool planes of `rows = 2F`, `act [P, F] f32`.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`], and a shape error unless `rows / 2` is a multiple of 16 (a
    /// workgroup pairs 16 gate rows with their up rows).
    pub fn expert_q8_gemv_gate_up_swiglu(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        act: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        let q8 = (Kernel::ExpertQ8Gemv, Q8_0_BLOCK_BYTES);
        self.gate_up_swiglu(q8, pool, x, slot_idx, act, (pairs, x_div))
    }

    /// The down projection and the MoE combine in one dispatch (one per pool part when the pool is larger
    /// than a binding): `residual[t] += Σ_j weights[t, j] · (W[slot_idx[t·k + j]] · x[t·k + j])`, the k terms
    /// added in pick order and then to the residual: [`Kernels::moe_combine`] of [`Kernels::expert_q8_gemv`]'s
    /// output (the same row sums), written in place. Picks whose slot is past the pool add nothing. With
    /// `out.finish` it also writes what the next RMSNorm needs from the whole row (see [`CombineOut`]);
    /// [`Kernels::qkv_rope_store`] applies that norm's scale after the q|k|v GEMV of `out.scaled`. What
    /// decode runs at the end of a layer.
    /// Shapes: `x [T·k, cols] f32`, `slot_idx [T·k] u32`, pool planes, `out` as [`CombineOut`].
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`], and a shape error unless `1 <= k <= 64`.
    pub fn expert_q8_gemv_combine(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        out: CombineOut<'_>,
        tokens_k: (u32, u32),
    ) -> Result<Dispatch> {
        self.gemv_combine((Kernel::ExpertQ8GemvCombine, Q8_0_BLOCK_BYTES), pool, x, slot_idx, out, tokens_k)
    }

    /// The launcher of gate‖up with SwiGLU on its output (`expert_q8_gemv_gate_up_swiglu`,
    /// `expert_q4_gemv_gate_up_swiglu`: one shader, two row walks), with the kernel and the quant-plane
    /// bytes of a block.
    pub(crate) fn gate_up_swiglu(
        &self,
        (kernel, block_bytes): (Kernel, u64),
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        act: View<'_>,
        (pairs, x_div): (u32, u32),
    ) -> Result<Dispatch> {
        check_gate_up_rows(&self.binder(kernel), pool.rows)?;
        let input = GemvInput::PlainSwiGluOut(x_div);
        self.expert_gemv(kernel, block_bytes, pool, x, slot_idx, act, pairs, input)
    }

    /// [`Kernels::router_topk_slots`] and [`Kernels::expert_q8_gemv_gate_up_swiglu`] in one dispatch, for
    /// decode while every expert is resident: each workgroup computes its token's top-k from
    /// `route.logits` (as `router_topk_slots`, bit for bit) and looks its pick's slot up in `route.table`;
    /// the workgroups of the first row block write `route.ids`, `route.weights` and `route.slots` for the
    /// down GEMV after it. One dependent dispatch a layer fewer.
    /// Shapes: `x [T, cols] f32`, pool planes of `rows = 2F`, `act [T·k, F] f32`, `route` as [`Route`].
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv_gate_up_swiglu`] and [`Kernels::router_topk_slots`].
    pub fn expert_q8_gemv_gate_up_swiglu_routed(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        route: Route<'_>,
        act: View<'_>,
        tokens_k: (u32, u32),
    ) -> Result<Dispatch> {
        let q8 = (Kernel::ExpertQ8GemvRouted, Q8_0_BLOCK_BYTES);
        self.gate_up_swiglu_routed(q8, pool, x, route, act, tokens_k)
    }

    /// The launcher of the routed gate‖up with SwiGLU (`expert_q8_gemv_gate_up_swiglu_routed` and its
    /// quantised-input twin), with the kernel and the quant-plane bytes of a block.
    pub(crate) fn gate_up_swiglu_routed(
        &self,
        (kernel, block_bytes): (Kernel, u64),
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        route: Route<'_>,
        act: View<'_>,
        (tokens, k): (u32, u32),
    ) -> Result<Dispatch> {
        let b = self.binder(kernel);
        check_picks(&b, route.experts, k)?;
        check_table_row(&b, route.experts, route.table_range)?;
        check_gate_up_rows(&b, pool.rows)?;
        let pairs =
            tokens.checked_mul(k).ok_or_else(|| b.shape(format!("{tokens} tokens x {k} picks overflow")))?;
        let slots = PairSlots::Routed(route);
        self.expert_gemv_on(kernel, block_bytes, pool, x, slots, act, pairs, GemvInput::PlainSwiGluOut(k))
    }

    /// The launcher of down with the MoE combine (`expert_q8_gemv_combine`, `expert_q4_gemv_combine`: one
    /// shader, two row walks), with the kernel and the quant-plane bytes of a block.
    pub(crate) fn gemv_combine(
        &self,
        (kernel, block_bytes): (Kernel, u64),
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        out: CombineOut<'_>,
        (tokens, k): (u32, u32),
    ) -> Result<Dispatch> {
        let b = self.binder(kernel);
        let pairs = combine_pairs(&b, tokens, k)?;
        let p64 = u64::from(pairs);
        let index = [("slot_idx", slot_idx, f32s(p64)), ("weights", out.weights, f32s(p64))];
        let (x_row, rows, t) = (u64::from(pool.cols), u64::from(pool.rows), u64::from(tokens));
        let grid = PoolGrid { rows_per_group: COMBINE_ROWS, x_row, y_row: rows, y_div: u64::from(k) };
        let parts = expert_pool_parts(&b, pool, block_bytes, x, &index, out.residual, pairs, 1, grid)?;
        let gy = b.groups("tokens", t)?;
        let last = parts.len() - 1;
        let mut dispatches = Vec::with_capacity(parts.len());
        for (i, mut part) in parts.into_iter().enumerate() {
            // The norm weight before the residual, the next norm's outputs after it: inputs first.
            let at = part.bound.len() - 1;
            part.bound.insert(at, b.storage("next_norm", out.next_norm, 0, f32s(rows))?);
            part.bound.push(b.storage("scaled", out.scaled, 0, f32s(t * rows))?);
            part.bound.push(b.storage(
                "squares",
                out.squares,
                0,
                f32s(t * u64::from(combine_squares(pool.rows))),
            )?);
            let p = ExpertQ8GemvCombineParams {
                rows: pool.rows,
                cols: pool.cols,
                k,
                slot_begin: pool.first_slot + part.begin,
                slot_end: pool.first_slot + part.end,
                finish: u32::from(out.finish && i == last),
                _pad: [0; 2],
            };
            dispatches.push((p, part.bound, [part.dims[0], gy, 1]));
        }
        Ok(b.finish(dispatches))
    }

    /// The launcher shared by the slot-indexed expert GEMVs, which differ only in their shader and the
    /// quant-plane bytes of a block; their params have one layout.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn expert_gemv(
        &self,
        kernel: Kernel,
        block_bytes: u64,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        y: View<'_>,
        pairs: u32,
        input: GemvInput,
    ) -> Result<Dispatch> {
        self.expert_gemv_on(kernel, block_bytes, pool, x, PairSlots::Given(slot_idx), y, pairs, input)
    }

    /// [`Kernels::expert_gemv`] with the pairs' slots given, or found by the routed kernels.
    #[allow(clippy::too_many_arguments)]
    fn expert_gemv_on(
        &self,
        kernel: Kernel,
        block_bytes: u64,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        slots: PairSlots<'_>,
        y: View<'_>,
        pairs: u32,
        input: GemvInput,
    ) -> Result<Dispatch> {
        let b = self.binder(kernel);
        let p64 = u64::from(pairs);
        let index = match slots {
            PairSlots::Given(slot_idx) => ("slot_idx", slot_idx, f32s(p64)),
            PairSlots::Routed(r) => ("route.table", r.table, f32s(u64::from(r.table_range.1))),
        };
        let row = input_row_words(kernel, pool.cols);
        let (x_div, x_row, silu_input, silu_output) = match input {
            GemvInput::Plain(x_div) => (x_div, row, 0, 0),
            GemvInput::SwiGlu => (1, 2 * row, 1, 0),
            GemvInput::PlainSwiGluOut(x_div) => (x_div, row, 0, 1),
        };
        let y_row = if silu_output == 1 { u64::from(pool.rows) / 2 } else { u64::from(pool.rows) };
        let grid = PoolGrid { rows_per_group: 4 * expert_gemv_groups(kernel), x_row, y_row, y_div: 1 };
        let mut parts = expert_pool_parts(&b, pool, block_bytes, x, &[index], y, pairs, x_div, grid)?;
        let (mut experts, mut table_base) = (0, 0);
        if let PairSlots::Routed(r) = slots {
            (experts, table_base) = (r.experts, r.table_range.0);
            let logits_bytes = f32s(p64 / u64::from(x_div) * u64::from(r.experts));
            for part in &mut parts {
                // The logits before y (inputs first), the picks after it.
                let at = part.bound.len() - 1;
                part.bound.insert(at, b.storage("route.logits", r.logits, 0, logits_bytes)?);
                part.bound.extend([
                    b.storage("route.ids", r.ids, 0, f32s(p64))?,
                    b.storage("route.weights", r.weights, 0, f32s(p64))?,
                    b.storage("route.slots", r.slots, 0, f32s(p64))?,
                ]);
            }
        }
        let out = parts
            .into_iter()
            .map(|part| {
                let p = ExpertQ8GemvParams {
                    rows: pool.rows,
                    cols: pool.cols,
                    pairs,
                    x_div,
                    slot_begin: pool.first_slot + part.begin,
                    slot_end: pool.first_slot + part.end,
                    silu_input,
                    silu_output,
                    experts,
                    table_base,
                    _pad: [0; 2],
                };
                (p, part.bound, part.dims)
            })
            .collect();
        Ok(b.finish(out))
    }
}

/// gate‖up with SwiGLU on its output pairs 16 gate rows with their up rows a workgroup: rows = 2F, F a
/// multiple of 16.
fn check_gate_up_rows(b: &Binder<'_>, rows: u32) -> Result<()> {
    b.ensure(rows.is_multiple_of(32), || {
        format!("gate‖up with SwiGLU needs rows = 2F with F a multiple of 16; got rows {rows}")
    })
}

/// Where the expert GEMVs find each pair's pool slot.
#[derive(Clone, Copy, Debug)]
enum PairSlots<'a> {
    /// `[P] u32` slots, written before the dispatch.
    Given(View<'a>),
    /// From the router's logits and the slot table (the routed kernels).
    Routed(Route<'a>),
}

/// How the slot-indexed expert GEMVs read their input.
#[derive(Clone, Copy, Debug)]
pub(crate) enum GemvInput {
    /// `x[pair / x_div]`.
    Plain(u32),
    /// `silu(gate) · up` from `x = [P, 2 · cols]` gate‖up.
    SwiGlu,
    /// `x[pair / x_div]`, and the output `silu(gate) · up` of the rows' two halves.
    PlainSwiGluOut(u32),
}

/// 32-lane groups of 4 rows in a workgroup of the expert GEMVs (the shader's `GROUPS`): 8, but for
/// `expert_q8_gemv_xq` [`EXPERT_GEMV_XQ_GROUPS`].
fn expert_gemv_groups(kernel: Kernel) -> u64 {
    match kernel {
        Kernel::ExpertQ8GemvXq | Kernel::ExpertQ8GemvXqRouted => u64::from(EXPERT_GEMV_XQ_GROUPS),
        _ => 8,
    }
}

/// `expert_q8_gemv_xq`'s lane groups a workgroup: 4, 16 rows (on the H200 its gate‖up took 10.84-10.86 µs
/// against 11.24-11.35 with 8 groups, where the f32 walk took 13.0 against 12.4-12.5).
pub(crate) const EXPERT_GEMV_XQ_GROUPS: u32 = 4;
// The shader pairs gate and up halves of the groups and sums up to 8 groups' rows in `wsum`.
const _: () = assert!(EXPERT_GEMV_XQ_GROUPS.is_multiple_of(2) && EXPERT_GEMV_XQ_GROUPS <= 8);

/// The grid of an expert kernel: rows per workgroup, 4-byte words per input row (f32 values, or a
/// [`q8_row_bytes`] row of the int8 GEMM) and floats per output row, and pairs per output row (1, or k
/// where a token's picks are summed into one row).
pub(crate) struct PoolGrid {
    pub rows_per_group: u64,
    pub x_row: u64,
    pub y_row: u64,
    pub y_div: u64,
}

/// Quant-plane bytes of one 32-value Q8_0 block.
pub(crate) const Q8_0_BLOCK_BYTES: u64 = 32;

/// One pool part of an expert GEMV or GEMM: the slots it binds and its bindings.
pub(crate) struct ExpertPoolPart<'a> {
    /// First slot bound.
    pub begin: u32,
    /// One past the last slot bound.
    pub end: u32,
    /// x, the index bindings, pool.q, pool.scales, y.
    pub bound: Vec<Bound<'a>>,
    /// Workgroups: blocks of rows, pairs.
    pub dims: [u32; 3],
}

/// Validates an expert GEMV or GEMM over P pairs (`expert_q8_gemv`, `expert_q4_gemv`, `expert_q8_gemm_tiled`,
/// `expert_q4_gemm`: the same grid, and bindings that differ only in how pairs find their slot: `index`,
/// each a name, view and byte length) whose quant plane holds `block_bytes` bytes per 32-value block, and
/// splits the pool over bindings; `grid` gives the rows a workgroup takes and the length of an input row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn expert_pool_parts<'a>(
    b: &Binder<'_>,
    pool: ExpertPlanes<'a>,
    block_bytes: u64,
    x: View<'a>,
    index: &[(&'static str, View<'a>, u64)],
    y: View<'a>,
    pairs: u32,
    x_div: u32,
    grid: PoolGrid,
) -> Result<Vec<ExpertPoolPart<'a>>> {
    let (rows, cols, slots) = (u64::from(pool.rows), u64::from(pool.cols), u64::from(pool.slots));
    let (pp, xd) = (u64::from(pairs), u64::from(x_div));
    b.ensure(cols > 0 && cols.is_multiple_of(32) && rows > 0 && slots > 0, || {
        format!(
            "needs rows, slots > 0 and cols a multiple of 32; got rows {rows}, cols {cols}, slots {slots}"
        )
    })?;
    b.ensure(xd > 0 && pp.is_multiple_of(xd), || format!("x_div {xd} must divide pairs {pp}"))?;
    let dims = [b.groups("row blocks", rows.div_ceil(grid.rows_per_group))?, b.groups("pairs", pp)?, 1];
    let slot_q = rows * (cols / 32) * block_bytes;
    let slot_s = f16s(rows * cols / 32);
    let parts = b.split_rows("pool.q", slots, slot_q, slot_s, 1)?;
    let mut out = Vec::with_capacity(parts.len());
    for (begin, end) in parts {
        let n = end - begin;
        let mut bound = vec![b.storage("x", x, 0, input_binding_bytes(b.kernel(), pp / xd * grid.x_row))?];
        for &(name, view, bytes) in index {
            bound.push(b.storage(name, view, 0, bytes)?);
        }
        bound.extend([
            b.storage("pool.q", pool.q, begin * slot_q, n * slot_q)?,
            b.storage("pool.scales", pool.scales, begin * slot_s, n * slot_s)?,
            b.storage("y", y, 0, f32s(pp / grid.y_div * grid.y_row))?,
        ]);
        out.push(ExpertPoolPart { begin: begin as u32, end: end as u32, bound, dims });
    }
    Ok(out)
}
