use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, expert_gemm_group_bound, ops::*};

/// Params of `expert_groups.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertGroupsParams {
    /// Pairs P (T · k).
    pub pairs: u32,
    /// Experts E of the layer, at most [`EXPERT_GROUPS_MAX_EXPERTS`].
    pub experts: u32,
    /// Pairs a group at most.
    pub size: u32,
    /// Group entries written (the expert GEMM's dispatch rows), at least [`expert_gemm_group_bound`].
    pub len: u32,
    /// The layer's first table entry (layer · experts).
    pub base: u32,
    /// Table entries (layers · experts).
    pub entries: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ExpertGroupsParams>() == 32);

/// The most experts a layer may have for [`Kernels::expert_groups`] (its shader's `MAX_E`; the routers'
/// limit too).
pub const EXPERT_GROUPS_MAX_EXPERTS: u32 = 256;

impl Kernels {
    /// Groups a chunk's (token, pick) pairs by expert on the GPU for the tiled expert GEMMs
    /// ([`Kernels::expert_q8_gemm_tiled`], [`Kernels::expert_q8_gemm_i8`]), with every expert resident: what
    /// [`expert_gemm_groups`](crate::expert_gemm_groups) does on the host after a read-back, as
    /// [`cpu::expert_groups`](crate::cpu::expert_groups) describes (groups in expert order; a group's pairs
    /// in no set order, which changes no GEMM output). A pair whose id is `experts` or more (no router writes
    /// one) is in no group, so the GEMMs leave its output row as it was. Shapes: `ids [P] u32` expert ids, `table [entries]
    /// u32` pool slots of (layer, expert), `groups [len]` `[slot, first, count, 0]`, `order [P] u32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes, more than [`EXPERT_GROUPS_MAX_EXPERTS`] experts, a layer past the table
    /// or `len` short of [`expert_gemm_group_bound`]; buffer errors as usual.
    pub fn expert_groups(
        &self,
        ids: View<'_>,
        table: View<'_>,
        groups: View<'_>,
        order: View<'_>,
        p: ExpertGroupsParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ExpertGroups);
        let (pairs, experts, len) = (u64::from(p.pairs), u64::from(p.experts), u64::from(p.len));
        b.ensure(pairs > 0 && p.size > 0 && experts > 0, || {
            format!("needs pairs, size and experts > 0; got {pairs}, {}, {experts}", p.size)
        })?;
        b.ensure(p.experts <= EXPERT_GROUPS_MAX_EXPERTS, || {
            format!("at most {EXPERT_GROUPS_MAX_EXPERTS} experts; got {experts} (group on the host instead)")
        })?;
        b.ensure(u64::from(p.base) + experts <= u64::from(p.entries), || {
            format!(
                "the layer's experts {}..{} lie past the table's {} entries",
                p.base,
                u64::from(p.base) + experts,
                p.entries
            )
        })?;
        let bound = expert_gemm_group_bound(p.pairs as usize, p.experts as usize, p.size as usize) as u64;
        b.ensure(len >= bound, || format!("len {len} is short of the {bound} groups the pairs can make"))?;
        let bound = vec![
            b.storage("ids", ids, 0, f32s(pairs))?,
            b.storage("table", table, 0, f32s(u64::from(p.entries)))?,
            b.storage("groups", groups, 0, f32s(4 * len))?,
            b.storage("order", order, 0, f32s(pairs))?,
        ];
        Ok(b.finish(vec![(p, bound, [1, 1, 1])]))
    }
}
