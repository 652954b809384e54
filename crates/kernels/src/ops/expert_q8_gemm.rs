use super::expert_q4_gemv::Q4_0_BLOCK_BYTES;
use super::expert_q8_gemv::{PoolGrid, Q8_0_BLOCK_BYTES, expert_pool_parts};
use super::quantize_q8::input_row_words;
use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ExpertPlanes, ops::*};

/// Params of the grouped expert GEMMs (`expert_q8_gemm_tiled.wgsl`, which all three run).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertQ8GemmParams {
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
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<ExpertQ8GemmParams>() == 32);

/// Pairs per group of `expert_q8_gemm_tiled.wgsl` (its `BT`; the int8 and Q4_0 GEMMs run it too).
pub const EXPERT_GEMM_TILED_GROUP: usize = 32;
/// Rows of a workgroup of the grouped expert GEMMs (their `BR`).
const TILED_ROWS: u64 = 128;

/// Most groups [`expert_gemm_groups`] makes of `pairs` pairs over at most `slots` distinct slots in groups
/// of `size`: each slot's pairs in runs of `size`, at most one of them short, so ⌊P/size⌋ + min(P, slots).
/// The GEMM's dispatch has this many workgroup rows (a chunk of 256 tokens over 128 experts in groups of
/// 32: 192, not 2,048).
pub fn expert_gemm_group_bound(pairs: usize, slots: usize, size: usize) -> usize {
    pairs / size.max(1) + pairs.min(slots)
}

/// Groups (token, pick) pairs by slot for the grouped expert GEMMs ([`Kernels::expert_q8_gemm_tiled`] and
/// the int8 and Q4_0 ones, [`EXPERT_GEMM_TILED_GROUP`] pairs a group): returns `groups` (`[slot, first,
/// count, 0]`, at most `size` pairs each, padded with zero-count groups to `len` entries, the dispatch size)
/// and `order` (the pair ids, grouped). Slots appear in first-use order.
///
/// # Panics
/// When the pairs make more than `len` groups: size `len` by [`expert_gemm_group_bound`].
pub fn expert_gemm_groups(slot_idx: &[u32], size: usize, len: usize) -> (Vec<[u32; 4]>, Vec<u32>) {
    let mut slots: Vec<u32> = Vec::new();
    for &s in slot_idx {
        if !slots.contains(&s) {
            slots.push(s);
        }
    }
    let mut groups = Vec::with_capacity(slot_idx.len());
    let mut order = Vec::with_capacity(slot_idx.len());
    for s in slots {
        let pairs: Vec<u32> = (0..slot_idx.len() as u32).filter(|&p| slot_idx[p as usize] == s).collect();
        for chunk in pairs.chunks(size.max(1)) {
            groups.push([s, order.len() as u32, chunk.len() as u32, 0]);
            order.extend_from_slice(chunk);
        }
    }
    assert!(
        groups.len() <= len,
        "{} groups of {} pairs exceed the {len} given",
        groups.len(),
        slot_idx.len()
    );
    groups.resize(len, [0; 4]);
    (groups, order)
}

impl Kernels {
    /// Expert Q8_0 GEMM for prefill over P (token, pick) pairs grouped by slot, through workgroup-memory
    /// tiles (`expert_q8_gemm_tiled.wgsl`): groups of up to [`EXPERT_GEMM_TILED_GROUP`] pairs
    /// ([`expert_gemm_groups`] with that size, or [`Kernels::expert_groups`]), a workgroup 128 rows of a
    /// group, each weight read once per group and each input once per 128 rows. Results equal
    /// [`Kernels::expert_q8_gemv`] with the same picks. `sizes` = (P, G): the pairs, and the entries of
    /// `groups` (at least [`expert_gemm_group_bound`]), one row of workgroups each.
    /// Shapes: `x [P / x_div, cols] f32`, `groups [G] [u32; 4]`, `order [P] u32`, pool planes,
    /// `y [P, rows] f32`.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`].
    #[allow(clippy::too_many_arguments)]
    pub fn expert_q8_gemm_tiled(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        groups: View<'_>,
        order: View<'_>,
        y: View<'_>,
        sizes: (u32, u32),
        x_div: u32,
    ) -> Result<Dispatch> {
        self.expert_gemm(Kernel::ExpertQ8GemmTiled, Q8_0_BLOCK_BYTES, pool, x, groups, order, y, sizes, x_div)
    }

    /// [`Kernels::expert_q8_gemm_tiled`] on Q8_0-quantised inputs by int8 dot products
    /// (its file with `q8_tile_i8.wgsl`, the scheme of [`Kernels::q8_gemm_i8`]): `x` holds
    /// [`Kernels::quantize_q8`]'s rows, `[P / x_div]` rows of [`q8_row_bytes`]`(cols)`; groups as
    /// [`Kernels::expert_q8_gemm_tiled`].
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`].
    #[allow(clippy::too_many_arguments)]
    pub fn expert_q8_gemm_i8(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        groups: View<'_>,
        order: View<'_>,
        y: View<'_>,
        sizes: (u32, u32),
        x_div: u32,
    ) -> Result<Dispatch> {
        self.expert_gemm(Kernel::ExpertQ8GemmI8, Q8_0_BLOCK_BYTES, pool, x, groups, order, y, sizes, x_div)
    }

    /// [`Kernels::expert_q8_gemm_tiled`] on tensor cores (its file with `q8_tile_coop.wgsl`, the
    /// arithmetic of [`Kernels::q8_gemm_coop`]); inputs and groups as [`Kernels::expert_q8_gemm_tiled`].
    ///
    /// # Errors
    /// [`Error::NoCooperativeMatrix`](crate::Error::NoCooperativeMatrix) on devices without them, else as
    /// [`Kernels::expert_q8_gemv`].
    #[allow(clippy::too_many_arguments)]
    pub fn expert_q8_gemm_coop(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        groups: View<'_>,
        order: View<'_>,
        y: View<'_>,
        sizes: (u32, u32),
        x_div: u32,
    ) -> Result<Dispatch> {
        self.ensure_cooperative_matrix(Kernel::ExpertQ8GemmCoop)?;
        self.expert_gemm(Kernel::ExpertQ8GemmCoop, Q8_0_BLOCK_BYTES, pool, x, groups, order, y, sizes, x_div)
    }

    /// The grouped expert GEMM over Q4_0 pool planes (as [`Kernels::expert_q4_gemv`]): results equal
    /// [`Kernels::expert_q4_gemv`] with the same picks. [`Kernels::expert_q8_gemm_tiled`]'s file and tiles
    /// with the weights decoded from nibbles (`q4_tile_weights.wgsl`); groups as that kernel's.
    ///
    /// # Errors
    /// As [`Kernels::expert_q8_gemv`].
    #[allow(clippy::too_many_arguments)]
    pub fn expert_q4_gemm(
        &self,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        groups: View<'_>,
        order: View<'_>,
        y: View<'_>,
        sizes: (u32, u32),
        x_div: u32,
    ) -> Result<Dispatch> {
        self.expert_gemm(Kernel::ExpertQ4Gemm, Q4_0_BLOCK_BYTES, pool, x, groups, order, y, sizes, x_div)
    }

    /// The launcher shared by the grouped expert GEMMs, which differ only in their shader and the quant-plane
    /// bytes of a block.
    #[allow(clippy::too_many_arguments)]
    fn expert_gemm(
        &self,
        kernel: Kernel,
        block_bytes: u64,
        pool: ExpertPlanes<'_>,
        x: View<'_>,
        groups: View<'_>,
        order: View<'_>,
        y: View<'_>,
        (pairs, groups_len): (u32, u32),
        x_div: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(kernel);
        let (pp, gl) = (u64::from(pairs), u64::from(groups_len));
        b.ensure(gl > 0, || "needs at least one group".to_string())?;
        let index = [("groups", groups, f32s(4 * gl)), ("order", order, f32s(pp))];
        let x_row = input_row_words(kernel, pool.cols);
        let grid = PoolGrid { rows_per_group: TILED_ROWS, x_row, y_row: u64::from(pool.rows), y_div: 1 };
        let parts = expert_pool_parts(&b, pool, block_bytes, x, &index, y, pairs, x_div, grid)?;
        let groups_dim = b.groups("groups", gl)?;
        let out = parts
            .into_iter()
            .map(|mut part| {
                part.dims[1] = groups_dim;
                let p = ExpertQ8GemmParams {
                    rows: pool.rows,
                    cols: pool.cols,
                    pairs,
                    x_div,
                    slot_begin: pool.first_slot + part.begin,
                    slot_end: pool.first_slot + part.end,
                    _pad: [0; 2],
                };
                (p, part.bound, part.dims)
            })
            .collect();
        Ok(b.finish(out))
    }
}
