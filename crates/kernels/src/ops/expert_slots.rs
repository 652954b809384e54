use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `expert_slots.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertSlotsParams {
    /// Picks (T · k).
    pub n: u32,
    /// The layer's first table entry (layer · experts).
    pub base: u32,
    /// Table entries (layers · experts).
    pub entries: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<ExpertSlotsParams>() == 16);

impl Kernels {
    /// Pool slots of a layer's picks from a resident table: `out[i] = table[base + ids[i]]` (0xFFFFFFFF for an
    /// id past the table, which the expert kernels skip). Lets decode route on the GPU, with no readback,
    /// while every expert is resident. Shapes: `ids [n] u32`, `table [entries] u32`, `out [n] u32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn expert_slots(
        &self,
        ids: View<'_>,
        table: View<'_>,
        out: View<'_>,
        p: ExpertSlotsParams,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::ExpertSlots);
        let (n, entries) = (u64::from(p.n), u64::from(p.entries));
        b.ensure(entries > 0, || "the table must have entries".into())?;
        let dims = [b.groups("n / 64", n.div_ceil(64))?, 1, 1];
        let bound = vec![
            b.storage("ids", ids, 0, f32s(n))?,
            b.storage("table", table, 0, f32s(entries))?,
            b.storage("out", out, 0, f32s(n))?,
        ];
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
