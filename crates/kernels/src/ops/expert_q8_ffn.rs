use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View, row_split_step};
use crate::{Dispatch, ops::*};

/// Params of `expert_q8_ffn.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertQ8FfnParams {
    /// H: gate‖up's input length and down's rows, a multiple of 32.
    pub hidden: u32,
    /// F: the expert's features, a multiple of 32.
    pub ffn: u32,
    /// Pairs P.
    pub pairs: u32,
    /// Input row = pair / x_div.
    pub x_div: u32,
    /// First slot bound in this part.
    pub slot_begin: u32,
    /// One past the last slot bound in this part.
    pub slot_end: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ExpertQ8FfnParams>() == 32);

/// Params of `expert_ffn_combine.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertFfnCombineParams {
    /// H: rows of the residual stream.
    pub hidden: u32,
    /// Shares a pick ([`ffn_shares`] of F).
    pub blocks: u32,
    /// Picks per token k.
    pub k: u32,
    /// Slots in the pool: picks at or past it add nothing.
    pub pool_slots: u32,
    /// 1: write `scaled` and `squares`.
    pub finish: u32,
    /// Padding.
    pub _pad: [u32; 3],
}
const _: () = assert!(size_of::<ExpertFfnCombineParams>() == 32);

/// Features whose down projection one workgroup of `expert_q8_ffn` computes (one 16-byte chunk of a down row).
const FFN_SHARE: u32 = 16;

/// Rows of one workgroup of `expert_ffn_combine`.
const FFN_COMBINE_ROWS: u64 = 16;

/// The most picks a token [`Kernels::expert_ffn_combine`] takes (its shader's `MAX_PICKS`).
const FFN_COMBINE_MAX_PICKS: u32 = 64;

/// How many down shares [`Kernels::expert_q8_ffn`] writes a pair for `ffn` features: its partial sums are
/// `[P, ffn_shares(ffn), H]` f32.
pub fn ffn_shares(ffn: u32) -> u32 {
    ffn / FFN_SHARE
}

impl Kernels {
    /// A Q8_0 expert's whole FFN for P (token, pick) pairs in one dispatch (one per pool part when the pool
    /// is larger than a binding), split over features: for each block `b` of 16 features,
    /// `partials[pair, b] = down[:, 16b..16b+16] · (silu(g) · u)[16b..16b+16]` where `g‖u =
    /// gate_up[slot] · x[pair / x_div]` (`slot = slot_idx[pair]`). [`Kernels::expert_ffn_combine`] adds the
    /// shares and combines the picks: together, what decode runs for its experts
    /// ([`Kernels::expert_q8_gemv_gate_up_swiglu`] then [`Kernels::expert_q8_gemv_combine`] compute the same
    /// in two dependent dispatches). Pairs whose slot is past the pool write nothing.
    /// Shapes: `x [P / x_div, H] f32`, `slot_idx [P] u32`, pool planes of gate‖up (`rows = 2F, cols = H`)
    /// and down (`rows = H, cols = F`) over the same slots, `partials [P, ffn_shares(F), H] f32`.
    ///
    /// # Errors
    /// Shape errors for planes that are not one expert's gate‖up and down, H or F not a multiple of 32,
    /// `x_div` not dividing P, zero sizes; buffer errors as usual (a pool split point must be 256-byte aligned
    /// in all four planes).
    #[allow(clippy::too_many_arguments)]
    pub fn expert_q8_ffn(
        &self,
        gate_up: ExpertPlanes<'_>,
        down: ExpertPlanes<'_>,
        x: View<'_>,
        slot_idx: View<'_>,
        partials: View<'_>,
        pairs: u32,
        x_div: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ExpertQ8Ffn);
        let (h, f) = (down.rows, down.cols);
        b.ensure(
            gate_up.rows == 2 * f
                && gate_up.cols == h
                && (gate_up.slots, gate_up.first_slot) == (down.slots, down.first_slot),
            || {
                format!(
                    "needs gate‖up [2F, H] and down [H, F] planes over the same slots; got gate‖up {}x{} \
                     (slots {}..+{}), down {}x{} (slots {}..+{})",
                    gate_up.rows,
                    gate_up.cols,
                    gate_up.first_slot,
                    gate_up.slots,
                    down.rows,
                    down.cols,
                    down.first_slot,
                    down.slots
                )
            },
        )?;
        b.ensure(h > 0 && h.is_multiple_of(32) && f > 0 && f.is_multiple_of(32) && down.slots > 0, || {
            format!("needs H and F multiples of 32 and slots > 0; got H {h}, F {f}, slots {}", down.slots)
        })?;
        let (pp, xd) = (u64::from(pairs), u64::from(x_div));
        b.ensure(xd > 0 && pp.is_multiple_of(xd), || format!("x_div {xd} must divide pairs {pp}"))?;
        let (h64, f64_) = (u64::from(h), u64::from(f));
        let dims = [b.groups("feature blocks", u64::from(ffn_shares(f)))?, b.groups("pairs", pp)?, 1];
        // gate‖up's planes are twice down's: split on them, at slots where down's offsets align too.
        let (gu_q, gu_s) = (2 * f64_ * h64, f16s(2 * f64_ * h64 / 32));
        let (dn_q, dn_s) = (h64 * f64_, f16s(h64 * f64_ / 32));
        let step = row_split_step(dn_q, dn_s, 1, self.storage_align());
        let parts = b.split_rows("gate_up.q", u64::from(down.slots), gu_q, gu_s, step)?;
        let shares = f32s(pp * u64::from(ffn_shares(f)) * h64);
        let mut out = Vec::with_capacity(parts.len());
        for (begin, end) in parts {
            let n = end - begin;
            let bound = vec![
                b.storage("x", x, 0, f32s(pp / xd * h64))?,
                b.storage("slot_idx", slot_idx, 0, f32s(pp))?,
                b.storage("gate_up.q", gate_up.q, begin * gu_q, n * gu_q)?,
                b.storage("gate_up.scales", gate_up.scales, begin * gu_s, n * gu_s)?,
                b.storage("down.q", down.q, begin * dn_q, n * dn_q)?,
                b.storage("down.scales", down.scales, begin * dn_s, n * dn_s)?,
                b.storage("partials", partials, 0, shares)?,
            ];
            let p = ExpertQ8FfnParams {
                hidden: h,
                ffn: f,
                pairs,
                x_div,
                slot_begin: down.first_slot + begin as u32,
                slot_end: down.first_slot + end as u32,
                _pad: [0; 2],
            };
            out.push((p, bound, dims));
        }
        Ok(b.finish(out))
    }

    /// The MoE combine of [`Kernels::expert_q8_ffn`]'s shares for T tokens of k picks:
    /// `residual[t] += Σ_j weights[t, j] · Σ_b partials[t·k + j, b]`, picks whose slot is at or past
    /// `pool_slots` adding nothing, written in place; with `out.finish` also the next RMSNorm's inputs (see
    /// [`CombineOut`]).
    /// Shapes: `partials [T·k, ffn_shares(F), H] f32`, `slot_idx [T·k] u32`, `out` as [`CombineOut`] with
    /// `rows = H`.
    ///
    /// # Errors
    /// Shape errors for zero sizes, F not a multiple of 32 or k outside `1..=64`; buffer errors as usual.
    pub fn expert_ffn_combine(
        &self,
        partials: View<'_>,
        slot_idx: View<'_>,
        out: CombineOut<'_>,
        (hidden, ffn, pool_slots): (u32, u32, u32),
        (tokens, k): (u32, u32),
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ExpertFfnCombine);
        b.ensure((1..=FFN_COMBINE_MAX_PICKS).contains(&k), || {
            format!("needs 1 to {FFN_COMBINE_MAX_PICKS} picks a token; got k {k}")
        })?;
        b.ensure(hidden > 0 && ffn > 0 && ffn.is_multiple_of(32) && tokens > 0, || {
            format!("needs H, T > 0 and F a multiple of 32; got H {hidden}, F {ffn}, T {tokens}")
        })?;
        let pairs =
            tokens.checked_mul(k).ok_or_else(|| b.shape(format!("{tokens} tokens x {k} picks overflow")))?;
        let (pp, h, t) = (u64::from(pairs), u64::from(hidden), u64::from(tokens));
        let blocks = ffn_shares(ffn);
        let bound = vec![
            b.storage("partials", partials, 0, f32s(pp * u64::from(blocks) * h))?,
            b.storage("slot_idx", slot_idx, 0, f32s(pp))?,
            b.storage("weights", out.weights, 0, f32s(pp))?,
            b.storage("next_norm", out.next_norm, 0, f32s(h))?,
            b.storage("residual", out.residual, 0, f32s(t * h))?,
            b.storage("scaled", out.scaled, 0, f32s(t * h))?,
            b.storage("squares", out.squares, 0, f32s(t * u64::from(combine_squares(hidden))))?,
        ];
        let dims = [b.groups("row blocks", h.div_ceil(FFN_COMBINE_ROWS))?, b.groups("tokens", t)?, 1];
        let p = ExpertFfnCombineParams {
            hidden,
            blocks,
            k,
            pool_slots,
            finish: u32::from(out.finish),
            _pad: [0; 3],
        };
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
