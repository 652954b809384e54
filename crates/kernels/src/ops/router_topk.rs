use crate::error::Result;
use crate::kernels::{Binder, Bound, Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `router_topk.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RouterTopkParams {
    /// Experts E, at most 256.
    pub experts: u32,
    /// Picks k, at most 32 and at most E.
    pub k: u32,
    /// Tokens T.
    pub tokens: u32,
    /// [`Kernels::router_topk_slots`]: the layer's first entry of the slot table (layer · experts); 0
    /// otherwise.
    pub slot_base: u32,
}
const _: () = assert!(size_of::<RouterTopkParams>() == 16);

impl Kernels {
    /// Router: softmax over all experts, the k largest (ties to the lower index, best first), weights
    /// renormalised to sum 1. Shapes: `logits [T, E] f32`, `ids [T, k] u32`, `weights [T, k] f32`.
    ///
    /// # Errors
    /// Shape errors for E over 256, k over 32 or over E, zero sizes; buffer errors as usual.
    pub fn router_topk(
        &self,
        logits: View<'_>,
        ids: View<'_>,
        weights: View<'_>,
        experts: u32,
        k: u32,
        tokens: u32,
    ) -> Result<Dispatch> {
        let p = RouterTopkParams { experts, k, tokens, slot_base: 0 };
        let b = self.binder(Kernel::RouterTopk);
        let (dims, [logits, ids, weights]) = router_shape(&b, p, [logits, ids, weights])?;
        Ok(b.finish(vec![(p, vec![logits, ids, weights], dims)]))
    }

    /// [`Kernels::router_topk`] and [`Kernels::expert_slots`] in one dispatch, for decode while every
    /// expert is resident: also `slots[t, r] = table[slot_base + ids[t, r]]`, the pool slot of each pick.
    /// Shapes: as `router_topk`, `table [entries] u32` (`slot_base + experts <= entries`), `slots [T, k] u32`.
    ///
    /// # Errors
    /// As `router_topk`, and a shape error for a layer past the table; buffer errors as usual.
    #[allow(clippy::too_many_arguments)]
    pub fn router_topk_slots(
        &self,
        logits: View<'_>,
        table: View<'_>,
        ids: View<'_>,
        weights: View<'_>,
        slots: View<'_>,
        experts: u32,
        k: u32,
        tokens: u32,
        (slot_base, entries): (u32, u32),
    ) -> Result<Dispatch> {
        let p = RouterTopkParams { experts, k, tokens, slot_base };
        let b = self.binder(Kernel::RouterTopkSlots);
        let (dims, [logits, ids, weights]) = router_shape(&b, p, [logits, ids, weights])?;
        check_table_row(&b, experts, (slot_base, entries))?;
        let table = b.storage("table", table, 0, f32s(u64::from(entries)))?;
        let slots = b.storage("slots", slots, 0, f32s(u64::from(tokens) * u64::from(k)))?;
        Ok(b.finish(vec![(p, vec![logits, table, ids, weights, slots], dims)]))
    }
}

/// The checks and bindings both routers share: E and k in range, the grid (a workgroup per token), and
/// `logits`, `ids`, `weights` bound at their sizes.
fn router_shape<'a>(
    b: &Binder<'_>,
    p: RouterTopkParams,
    [logits, ids, weights]: [View<'a>; 3],
) -> Result<([u32; 3], [Bound<'a>; 3])> {
    check_picks(b, p.experts, p.k)?;
    let (e, kk, t) = (u64::from(p.experts), u64::from(p.k), u64::from(p.tokens));
    let dims = [b.groups("tokens", t)?, 1, 1];
    let bound = [
        b.storage("logits", logits, 0, f32s(t * e))?,
        b.storage("ids", ids, 0, f32s(t * kk))?,
        b.storage("weights", weights, 0, f32s(t * kk))?,
    ];
    Ok((dims, bound))
}

/// The router top-k's limits (its workgroup memory and lanes): 0 < E <= 256 and 0 < k <= min(32, E). Also
/// the routed expert GEMVs', which run the same top-k.
pub(crate) fn check_picks(b: &Binder<'_>, experts: u32, k: u32) -> Result<()> {
    b.ensure(experts > 0 && experts <= 256 && k > 0 && k <= 32 && k <= experts, || {
        format!("needs 0 < experts <= 256 and 0 < k <= min(32, experts); got experts {experts}, k {k}")
    })
}

/// The layer's E entries of the slot table from `base` lie inside its `entries`.
pub(crate) fn check_table_row(b: &Binder<'_>, experts: u32, (base, entries): (u32, u32)) -> Result<()> {
    let end = u64::from(base) + u64::from(experts);
    b.ensure(end <= u64::from(entries), || {
        format!("the layer's table entries {base}..{end} run past the table's {entries}")
    })
}
