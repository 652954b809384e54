use super::expert_q8_gemv::combine_pairs;
use super::router_topk::{check_picks, check_table_row};
use crate::error::Result;
use crate::kernels::{Binder, Kernel, Kernels, View};
use crate::{BlockQuant, CombineOut, Dispatch, Route, combine_squares, ops::*};

/// Pairs per group of [`Kernels::expert_kquant_gemm`] at most (its `BT`): twice the planar GEMMs'
/// [`EXPERT_GEMM_TILED_GROUP`](crate::EXPERT_GEMM_TILED_GROUP), so that a 512-token chunk reads most
/// experts' records once rather than twice.
pub const EXPERT_BLOCK_GEMM_GROUP: usize = 64;

/// Params of `expert_kquant_gemv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertKQuantGemvParams {
    /// Rows of one slot's matrix.
    pub rows: u32,
    /// Input length, a multiple of 256.
    pub cols: u32,
    /// Pairs P.
    pub pairs: u32,
    /// Input row = pair / x_div.
    pub x_div: u32,
    /// First slot bound in this part.
    pub slot_begin: u32,
    /// One past the last slot bound in this part.
    pub slot_end: u32,
    /// Bytes a slot takes in the bound plane.
    pub slot_bytes: u32,
    /// Where the matrix starts in a slot.
    pub part_bytes: u32,
    /// Length of a row of y.
    pub y_stride: u32,
    /// First column of y written.
    pub y_offset: u32,
    /// 1: each workgroup row is a group of pairs sharing a slot; 0: a pair.
    pub grouped: u32,
    /// 1: the matrix is gate (at `part_bytes`) and up (at `up_bytes`), and y is SiLU(gate·x)·(up·x).
    pub swiglu: u32,
    /// With `swiglu`: where up starts in a slot.
    pub up_bytes: u32,
    /// 1: the grouped GEMM reads each 256-column run of its tile's rows whole before its steps read them
    /// ([`ExpertBlocks::host`]).
    pub host_reads: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ExpertKQuantGemvParams>() == 64);

/// Params of `expert_kquant_gemv_combine.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertKQuantCombineParams {
    /// Rows of one slot's matrix (H).
    pub rows: u32,
    /// Input length (F), a multiple of 256.
    pub cols: u32,
    /// Picks a token.
    pub k: u32,
    /// First slot bound in this part.
    pub slot_begin: u32,
    /// One past the last slot bound in this part.
    pub slot_end: u32,
    /// Bytes a slot takes in the bound plane.
    pub slot_bytes: u32,
    /// Where the matrix starts in a slot.
    pub part_bytes: u32,
    /// 1: write the next norm's `scaled` and `squares` (the pool's last part).
    pub finish: u32,
}
const _: () = assert!(size_of::<ExpertKQuantCombineParams>() == 32);

/// Params of `expert_kquant_gemv_routed.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertKQuantRoutedParams {
    /// Rows of gate, and of up (F).
    pub rows: u32,
    /// Input length, a multiple of 256.
    pub cols: u32,
    /// Pairs T·k.
    pub pairs: u32,
    /// Picks a token: input row = pair / k.
    pub k: u32,
    /// First slot bound in this part.
    pub slot_begin: u32,
    /// One past the last slot bound in this part.
    pub slot_end: u32,
    /// Bytes a slot takes in the bound plane.
    pub slot_bytes: u32,
    /// Where gate starts in a slot.
    pub gate_bytes: u32,
    /// Where up starts in a slot.
    pub up_bytes: u32,
    /// Experts E, the logits of a token.
    pub experts: u32,
    /// The layer's first entry of the slot table (layer · E).
    pub table_base: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<ExpertKQuantRoutedParams>() == 48);

/// One matrix of a slot pool of records of GGUF blocks: in every slot of `data` (`slot_bytes` apart, from
/// `first_slot`), `rows` rows of `cols / 256` super-blocks of `quant` from byte `offset` of the slot (gate,
/// up or down of a record of blocks: each part of its own type, at its own offset).
#[derive(Clone, Copy, Debug)]
pub struct ExpertBlocks<'a> {
    /// The pool plane holding the slots.
    pub data: View<'a>,
    /// The matrix's type.
    pub quant: BlockQuant,
    /// Bytes a slot takes in `data`.
    pub slot_bytes: u64,
    /// Where the matrix starts in a slot.
    pub offset: u64,
    /// Slots bound here (a pool split over several buffers passes one part at a time).
    pub slots: u32,
    /// The pool slot of the first slot bound here: pairs whose slot lies outside
    /// `first_slot..first_slot + slots` are left to the other parts' dispatches.
    pub first_slot: u32,
    /// Rows of one slot's matrix.
    pub rows: u32,
    /// Columns, a multiple of 256.
    pub cols: u32,
    /// The plane lies in host memory (a pool's arena): the grouped GEMM then reads each 256-column run
    /// of its tile's rows whole, as lines, before its steps read a few bytes of each row (sectors, which
    /// over the bus travel as a request each).
    pub host: bool,
}

/// Where an expert K-quant GEMV writes: `y [P, stride] f32`, columns `offset .. offset + rows` of each
/// pair's row (gate‖up: gate at 0 and up at F of rows of 2F).
#[derive(Clone, Copy, Debug)]
pub struct ExpertOut<'a> {
    /// The output.
    pub y: View<'a>,
    /// Length of a row.
    pub stride: u32,
    /// First column written.
    pub offset: u32,
}

/// How a dispatch's workgroup rows find their pairs' slots.
#[derive(Clone, Copy, Debug)]
enum PairIndex<'a> {
    /// `[P] u32` pool slots, one workgroup row a pair.
    Slots(View<'a>),
    /// `[G] (slot, first, count, 0)` groups of `order` (`[P] u32` pair ids grouped by slot), one
    /// workgroup row a group.
    Groups { groups: View<'a>, order: View<'a>, len: u32 },
}

impl Kernels {
    /// Expert K-quant GEMV for P (token, pick) pairs, one dispatch per binding-sized run of slots:
    /// `y[pair, offset..offset + rows] = W[slot_idx[pair]] · x[pair / x_div]` on blocks as the GGUF holds
    /// them ([`cpu::expert_kquant_gemv`](crate::cpu::expert_kquant_gemv)). gate‖up: `x_div = k`; down:
    /// `x_div = 1`. Slots past the pool write nothing.
    /// Shapes: `x [P / x_div, cols] f32`, `slot_idx [P] u32`, `w` as [`ExpertBlocks`], `y` as [`ExpertOut`].
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 256, a matrix past its slot, an output column past the
    /// row, `x_div` not dividing P or zero sizes; buffer errors as usual.
    pub fn expert_kquant_gemv(
        &self,
        w: ExpertBlocks<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        y: ExpertOut<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        self.expert_kquant(w, x, PairIndex::Slots(slot_idx), y, (pairs, x_div), None)
    }

    /// [`Kernels::expert_kquant_gemv`] of gate and up with SwiGLU on its output, for one-token decode:
    /// `act[pair, offset..offset + rows] = SiLU(G · x) ⊙ (U · x)` for the slot's gate `G` (`gate`, `rows`
    /// rows) and up `U` (the same shape and type, from byte `up_offset` of the slot)
    /// ([`cpu::expert_kquant_gemv_swiglu`](crate::cpu::expert_kquant_gemv_swiglu)): no SwiGLU dispatch and no
    /// `[P, 2F]` round trip after it. Shapes as [`Kernels::expert_kquant_gemv`], `act` of `rows` columns.
    ///
    /// # Errors
    /// As [`Kernels::expert_kquant_gemv`], and a shape error for up past its slot or not word-aligned.
    pub fn expert_kquant_gemv_swiglu(
        &self,
        gate: ExpertBlocks<'_>,
        up_offset: u64,
        x: View<'_>,
        slot_idx: View<'_>,
        act: ExpertOut<'_>,
        (pairs, x_div): (u32, u32),
    ) -> Result<Dispatch> {
        self.expert_kquant(gate, x, PairIndex::Slots(slot_idx), act, (pairs, x_div), Some(up_offset))
    }

    /// [`Kernels::router_topk_slots`] and [`Kernels::expert_kquant_gemv_swiglu`] in one dispatch, for decode
    /// while every expert is resident, on records of blocks (what
    /// [`Kernels::expert_q8_gemv_gate_up_swiglu_routed`] does for Q8_0 planes): each workgroup computes its
    /// token's top-k from `route.logits` (as `router_topk_slots`, bit for bit) and looks its pick's slot up
    /// in `route.table`; the workgroups of the first row block write `route.ids`, `route.weights` and
    /// `route.slots` for the down GEMV after it. One dependent dispatch a layer fewer.
    /// Shapes: `x [T, cols] f32`, `gate` as [`ExpertBlocks`] (up the same shape and type from byte
    /// `up_offset` of a slot), `act [T·k, rows] f32`, `route` as [`Route`].
    ///
    /// # Errors
    /// As [`Kernels::expert_kquant_gemv_swiglu`] and [`Kernels::router_topk_slots`].
    pub fn expert_kquant_gemv_swiglu_routed(
        &self,
        gate: ExpertBlocks<'_>,
        up_offset: u64,
        x: View<'_>,
        route: Route<'_>,
        act: View<'_>,
        (tokens, k): (u32, u32),
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ExpertBlockGemvRouted(gate.quant));
        check_picks(&b, route.experts, k)?;
        check_table_row(&b, route.experts, route.table_range)?;
        let pairs =
            tokens.checked_mul(k).ok_or_else(|| b.shape(format!("{tokens} tokens x {k} picks overflow")))?;
        check_blocks(&b, &gate, pairs)?;
        check_up(&b, &gate, up_offset)?;
        let (rows, cols, pp, t) =
            (u64::from(gate.rows), u64::from(gate.cols), u64::from(pairs), u64::from(tokens));
        let dims = [b.groups("row blocks", rows.div_ceil(16))?, b.groups("pairs", pp)?, 1];
        let mut out = Vec::new();
        for (begin, end) in b.split_rows("pool", u64::from(gate.slots), gate.slot_bytes, 0, 1)? {
            let bound = vec![
                b.storage("x", x, 0, f32s(t * cols))?,
                b.storage("route.table", route.table, 0, f32s(u64::from(route.table_range.1)))?,
                b.storage("pool", gate.data, begin * gate.slot_bytes, (end - begin) * gate.slot_bytes)?,
                b.storage("route.logits", route.logits, 0, f32s(t * u64::from(route.experts)))?,
                b.storage("act", act, 0, f32s(pp * rows))?,
                b.storage("route.ids", route.ids, 0, f32s(pp))?,
                b.storage("route.weights", route.weights, 0, f32s(pp))?,
                b.storage("route.slots", route.slots, 0, f32s(pp))?,
            ];
            let p = ExpertKQuantRoutedParams {
                rows: gate.rows,
                cols: gate.cols,
                pairs,
                k,
                slot_begin: gate.first_slot + begin as u32,
                slot_end: gate.first_slot + end as u32,
                slot_bytes: gate.slot_bytes as u32,
                gate_bytes: gate.offset as u32,
                up_bytes: up_offset as u32,
                experts: route.experts,
                table_base: route.table_range.0,
                _pad: 0,
            };
            out.push((p, bound, dims));
        }
        Ok(b.finish(out))
    }

    /// Down projection and MoE combine in one dispatch (a pool split over bindings: one per part), on
    /// records of blocks: what [`Kernels::expert_q8_gemv_combine`] does for Q8_0 planes, here for `w`'s
    /// blocks (`rows` = H, `cols` = F): `out.residual[t] += Σ_j weights[t·k + j] · W[slot_idx[t·k + j]] ·
    /// x[t·k + j]`, and with `out.finish` the next norm's inputs (see [`CombineOut`])
    /// ([`cpu::expert_kquant_gemv_combine`](crate::cpu::expert_kquant_gemv_combine)). What decode runs at
    /// the end of a layer of K-quant experts.
    /// Shapes: `x [T·k, cols] f32`, `slot_idx [T·k] u32`, `w` as [`ExpertBlocks`], `out` as [`CombineOut`].
    ///
    /// # Errors
    /// As [`Kernels::expert_kquant_gemv`], and a shape error unless `1 <= k <= 64`.
    pub fn expert_kquant_gemv_combine(
        &self,
        w: ExpertBlocks<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        out: CombineOut<'_>,
        (tokens, k): (u32, u32),
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ExpertBlockGemvCombine(w.quant));
        let pairs = combine_pairs(&b, tokens, k)?;
        let (p64, t) = (u64::from(pairs), u64::from(tokens));
        let (rows, cols) = (u64::from(w.rows), u64::from(w.cols));
        check_blocks(&b, &w, pairs)?;
        let squares = f32s(t * u64::from(combine_squares(w.rows)));
        let dims = [b.groups("row blocks", rows.div_ceil(4))?, b.groups("tokens", t)?, 1];
        let parts = b.split_rows("pool", u64::from(w.slots), w.slot_bytes, 0, 1)?;
        let last = parts.len() - 1;
        let mut out_parts = Vec::with_capacity(parts.len());
        for (i, (begin, end)) in parts.into_iter().enumerate() {
            let bound = vec![
                b.storage("x", x, 0, f32s(p64 * cols))?,
                b.storage("slot_idx", slot_idx, 0, f32s(p64))?,
                b.storage("weights", out.weights, 0, f32s(p64))?,
                b.storage("pool", w.data, begin * w.slot_bytes, (end - begin) * w.slot_bytes)?,
                b.storage("next_norm", out.next_norm, 0, f32s(rows))?,
                b.storage("residual", out.residual, 0, f32s(t * rows))?,
                b.storage("scaled", out.scaled, 0, f32s(t * rows))?,
                b.storage("squares", out.squares, 0, squares)?,
            ];
            let p = ExpertKQuantCombineParams {
                rows: w.rows,
                cols: w.cols,
                k,
                slot_begin: w.first_slot + begin as u32,
                slot_end: w.first_slot + end as u32,
                slot_bytes: w.slot_bytes as u32,
                part_bytes: w.offset as u32,
                finish: u32::from(out.finish && i == last),
            };
            out_parts.push((p, bound, dims));
        }
        Ok(b.finish(out_parts))
    }

    /// [`Kernels::expert_kquant_gemv`] over pairs grouped by slot (a chunk's grouping, as the grouped
    /// expert GEMMs take it: `groups [len] (slot, first, count <= EXPERT_BLOCK_GEMM_GROUP, 0)` of
    /// `order [P]`; a group's pairs past [`EXPERT_BLOCK_GEMM_GROUP`] are not computed), through
    /// workgroup-memory tiles (`expert_kquant_gemm.wgsl`: 128 rows of a group's slot × its pairs a
    /// workgroup, each weight read once a group). Same results.
    ///
    /// # Errors
    /// As [`Kernels::expert_kquant_gemv`], and a shape error for no groups.
    #[allow(clippy::too_many_arguments)]
    pub fn expert_kquant_gemm(
        &self,
        w: ExpertBlocks<'_>,
        x: View<'_>,
        groups: View<'_>,
        order: View<'_>,
        y: ExpertOut<'_>,
        (pairs, len): (u32, u32),
        x_div: u32,
    ) -> Result<Dispatch> {
        self.expert_kquant(w, x, PairIndex::Groups { groups, order, len }, y, (pairs, x_div), None)
    }

    fn expert_kquant(
        &self,
        w: ExpertBlocks<'_>,
        x: View<'_>,
        index: PairIndex<'_>,
        y: ExpertOut<'_>,
        (pairs, x_div): (u32, u32),
        swiglu_up: Option<u64>,
    ) -> Result<Dispatch> {
        let grouped = matches!(index, PairIndex::Groups { .. });
        let b = self.binder(if grouped {
            Kernel::ExpertBlockGemm(w.quant)
        } else {
            Kernel::ExpertBlockGemv(w.quant)
        });
        let (rows, cols) = (u64::from(w.rows), u64::from(w.cols));
        let (pp, xd) = (u64::from(pairs), u64::from(x_div));
        check_blocks(&b, &w, pairs)?;
        b.ensure(xd > 0 && pp.is_multiple_of(xd), || format!("x_div {xd} must divide pairs {pp}"))?;
        if let Some(up) = swiglu_up {
            check_up(&b, &w, up)?;
        }
        b.ensure(y.offset + w.rows <= y.stride, || {
            format!("output columns {}..{} past rows of {}", y.offset, y.offset + w.rows, y.stride)
        })?;
        let (grouped_flag, wg_rows, first, second) = match index {
            PairIndex::Slots(slot_idx) => {
                (0, pp, ("slot_idx", slot_idx, f32s(pp)), ("slot_idx", slot_idx, f32s(pp)))
            }
            PairIndex::Groups { groups, order, len } => {
                let len = u64::from(len);
                b.ensure(len > 0, || "needs at least one group".to_string())?;
                (1, len, ("groups", groups, f32s(4 * len)), ("order", order, f32s(pp)))
            }
        };
        // The GEMV takes 32 rows a workgroup (with SwiGLU 16 of gate and their 16 of up), the tiled GEMM 128.
        let rows_per_group: u64 = match (grouped, swiglu_up) {
            (true, _) => 128,
            (false, Some(_)) => 16,
            (false, None) => 32,
        };
        let dims = [b.groups("row blocks", rows.div_ceil(rows_per_group))?, b.groups("pairs", wg_rows)?, 1];
        let mut out = Vec::new();
        for (begin, end) in b.split_rows("pool", u64::from(w.slots), w.slot_bytes, 0, 1)? {
            let n = end - begin;
            let bound = vec![
                b.storage("x", x, 0, f32s(pp / xd * cols))?,
                b.storage(first.0, first.1, 0, first.2)?,
                b.storage(second.0, second.1, 0, second.2)?,
                b.storage("pool", w.data, begin * w.slot_bytes, n * w.slot_bytes)?,
                b.storage("y", y.y, 0, f32s(pp * u64::from(y.stride)))?,
            ];
            let p = ExpertKQuantGemvParams {
                rows: w.rows,
                cols: w.cols,
                pairs,
                x_div,
                slot_begin: w.first_slot + begin as u32,
                slot_end: w.first_slot + end as u32,
                slot_bytes: w.slot_bytes as u32,
                part_bytes: w.offset as u32,
                y_stride: y.stride,
                y_offset: y.offset,
                grouped: grouped_flag,
                swiglu: u32::from(swiglu_up.is_some()),
                up_bytes: swiglu_up.unwrap_or(0) as u32,
                host_reads: u32::from(grouped && w.host),
                _pad: [0; 2],
            };
            out.push((p, bound, dims));
        }
        Ok(b.finish(out))
    }
}

impl ExpertBlocks<'_> {
    /// Bytes of one row of the matrix.
    pub fn row_bytes(&self) -> u64 {
        u64::from(self.cols) / 256 * self.quant.block_bytes()
    }
}

/// With SwiGLU: up, `gate`'s shape and type from byte `up` of a slot, lies in the slot, word-aligned.
fn check_up(b: &Binder<'_>, gate: &ExpertBlocks<'_>, up: u64) -> Result<()> {
    let rows = u64::from(gate.rows);
    b.ensure(up.is_multiple_of(4) && up + rows * gate.row_bytes() <= gate.slot_bytes, || {
        format!("up ({rows} rows from byte {up}) must lie in its {}-byte slot, word-aligned", gate.slot_bytes)
    })
}

/// The checks every expert block kernel makes of its matrix: whole super-blocks a row, nothing empty, the
/// matrix inside its slot, both word-aligned.
fn check_blocks(b: &Binder<'_>, w: &ExpertBlocks<'_>, pairs: u32) -> Result<()> {
    let (rows, cols, slots, pp) =
        (u64::from(w.rows), u64::from(w.cols), u64::from(w.slots), u64::from(pairs));
    let row_bytes = w.row_bytes();
    b.ensure(cols > 0 && cols.is_multiple_of(256) && rows > 0 && slots > 0 && pp > 0, || {
        format!(
            "needs rows, slots, pairs > 0 and cols a multiple of 256 ({}); got rows {rows}, cols {cols}, \
             slots {slots}, pairs {pp}",
            w.quant.name()
        )
    })?;
    b.ensure(
        w.offset.is_multiple_of(4)
            && w.slot_bytes.is_multiple_of(4)
            && w.offset + rows * row_bytes <= w.slot_bytes,
        || {
            format!(
                "the matrix ({rows} rows of {row_bytes} bytes from byte {}) must lie in its {}-byte slot, \
                 both word-aligned",
                w.offset, w.slot_bytes
            )
        },
    )
}
