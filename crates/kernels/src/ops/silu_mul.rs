use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `silu_mul.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SiluMulParams {
    /// FFN width F.
    pub ffn: u32,
    /// Rows (pairs) P.
    pub rows: u32,
    /// Padding.
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<SiluMulParams>() == 16);

impl Kernels {
    /// `out[r, i] = silu(gate[r, i]) * up[r, i]`. Shapes: `gate_up [P, 2F] f32` (gate then up),
    /// `out [P, F] f32`.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    pub fn silu_mul(&self, gate_up: View<'_>, out: View<'_>, ffn: u32, rows: u32) -> Result<Dispatch> {
        let b = self.binder(Kernel::SiluMul);
        let (f, r) = (u64::from(ffn), u64::from(rows));
        let dims = [b.groups("ffn / 256", f.div_ceil(256))?, b.groups("rows", r)?, 1];
        let bound =
            vec![b.storage("gate_up", gate_up, 0, f32s(2 * f * r))?, b.storage("out", out, 0, f32s(f * r))?];
        Ok(b.finish(vec![(SiluMulParams { ffn, rows, _pad: [0; 2] }, bound, dims)]))
    }
}
