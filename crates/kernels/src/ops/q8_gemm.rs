use super::q8_gemv::{ensure_into, q8_matrix_parts};
use super::quantize_q8::input_row_words;
use crate::Dispatch;
use crate::error::Result;
use crate::kernels::{Kernel, Kernels, Q8Matrix, View};

/// Params of `q8_gemm_tiled.wgsl` (the f32 and the int8 tiled GEMMs).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Q8GemmParams {
    /// Rows in this part.
    pub rows: u32,
    /// Input length, a multiple of 32.
    pub cols: u32,
    /// First output row of this part.
    pub row_begin: u32,
    /// Rows of the whole matrix (stride of `y`).
    pub out_rows: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Padding.
    pub _pad: [u32; 3],
}
const _: () = assert!(size_of::<Q8GemmParams>() == 32);

impl Kernels {
    /// Q8_0 GEMM for prefill through workgroup-memory tiles (`q8_gemm_tiled.wgsl`): `y[t] = W x[t]` for T
    /// tokens, a workgroup taking 128 rows × 32 tokens, reading each weight once per 32 tokens and each input
    /// once per 128 rows. The int8 plane is split by rows as in [`Kernels::q8_gemv`] (parts of whole 128-row
    /// blocks). Shapes: `x [T, cols] f32`, `w [rows, cols]` Q8_0, `y [T, rows] f32`.
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`], and a shape error for zero tokens.
    pub fn q8_gemm_tiled(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.dense_gemm(Kernel::Q8GemmTiled, w, x, (y, w.rows, 0), tokens)
    }

    /// [`Kernels::q8_gemm_tiled`] into columns `offset .. offset + rows` of rows of `stride` (`y [T,
    /// stride]`), as [`Kernels::q8_gemv_into`].
    ///
    /// # Errors
    /// As [`Kernels::q8_gemm_tiled`], and a shape error for columns past the row.
    pub fn q8_gemm_tiled_into(
        &self,
        w: Q8Matrix<'_>,
        x: View<'_>,
        y: (View<'_>, u32, u32),
        tokens: u32,
    ) -> Result<Dispatch> {
        self.dense_gemm(Kernel::Q8GemmTiled, w, x, y, tokens)
    }

    /// [`Kernels::q8_gemm_tiled`] on Q8_0-quantised inputs by int8 dot products (its file with
    /// `q8_tile_i8.wgsl`), as llama.cpp multiplies Q8_0 weights: `x` holds [`Kernels::quantize_q8`]'s rows
    /// of the f32 input, and each 32-column block's exact int32 sum is scaled by the weight row's and the
    /// token's scales. Shapes: `x [T]` rows of [`q8_row_bytes`](super::q8_row_bytes)`(cols)`,
    /// `y [T, rows]` f32; splits as [`Kernels::q8_gemm_tiled`].
    ///
    /// # Errors
    /// As [`Kernels::q8_gemm_tiled`].
    pub fn q8_gemm_i8(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.dense_gemm(Kernel::Q8GemmI8, w, x, (y, w.rows, 0), tokens)
    }

    /// [`Kernels::q8_gemm_tiled`] on tensor cores (`q8_gemm_coop.wgsl`): tiles of 128 rows × 64 tokens,
    /// each weight rounded once to f16 from `q · d`, each input rounded to f16, the products summed in f32
    /// ([`cpu::q8_gemv_f16`](crate::cpu::q8_gemv_f16)). Shapes and splits as [`Kernels::q8_gemm_tiled`].
    ///
    /// # Errors
    /// [`Error::NoCooperativeMatrix`](crate::Error::NoCooperativeMatrix) on devices without them, else as
    /// [`Kernels::q8_gemm_tiled`].
    pub fn q8_gemm_coop(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.ensure_cooperative_matrix(Kernel::Q8GemmCoop)?;
        self.dense_gemm(Kernel::Q8GemmCoop, w, x, (y, w.rows, 0), tokens)
    }

    /// [`Kernels::q8_gemm_coop`] into columns `offset .. offset + rows` of rows of `stride`, as
    /// [`Kernels::q8_gemm_tiled_into`].
    ///
    /// # Errors
    /// As [`Kernels::q8_gemm_coop`], and a shape error for columns past the row.
    pub fn q8_gemm_coop_into(
        &self,
        w: Q8Matrix<'_>,
        x: View<'_>,
        y: (View<'_>, u32, u32),
        tokens: u32,
    ) -> Result<Dispatch> {
        self.ensure_cooperative_matrix(Kernel::Q8GemmCoop)?;
        self.dense_gemm(Kernel::Q8GemmCoop, w, x, y, tokens)
    }

    /// The launcher shared by the tiled GEMMs, which differ in their tile helper and input rows.
    fn dense_gemm(
        &self,
        kernel: Kernel,
        w: Q8Matrix<'_>,
        x: View<'_>,
        (y, stride, offset): (View<'_>, u32, u32),
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(kernel);
        let (rows, cols, t) = (u64::from(w.rows), u64::from(w.cols), u64::from(tokens));
        b.ensure(cols > 0 && cols.is_multiple_of(32) && rows > 0 && t > 0, || {
            format!(
                "needs rows, tokens > 0 and cols a multiple of 32; got rows {rows}, cols {cols}, tokens {t}"
            )
        })?;
        let block_tokens =
            if kernel == Kernel::Q8GemmCoop { Q8_GEMM_COOP_TOKENS } else { Q8_GEMM_TILED_TOKENS };
        ensure_into(&b, w.rows, stride, offset)?;
        let gy = b.groups("token blocks", t.div_ceil(block_tokens))?;
        let x_row = input_row_words(kernel, w.cols);
        let out = q8_matrix_parts(&b, w, x, (y, stride), (t, x_row), Q8_GEMM_TILED_ROWS)?
            .into_iter()
            .map(|part| {
                let p = Q8GemmParams {
                    rows: part.rows as u32,
                    cols: w.cols,
                    row_begin: offset + part.begin as u32,
                    out_rows: stride,
                    tokens,
                    _pad: [0; 3],
                };
                (p, part.bound, [part.row_groups, gy, 1])
            })
            .collect();
        Ok(b.finish(out))
    }
}

/// Rows and tokens of a `q8_gemm_tiled.wgsl` workgroup (its `BR`, `BT`).
const Q8_GEMM_TILED_ROWS: u64 = 128;
const Q8_GEMM_TILED_TOKENS: u64 = 32;
/// Tokens of a `q8_gemm_coop.wgsl` workgroup (its `BT`; its rows are `BR` = 128 as the tiled GEMMs').
const Q8_GEMM_COOP_TOKENS: u64 = 64;
