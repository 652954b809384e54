use crate::error::Result;
use crate::kernels::{Binder, Bound, Kernel, Kernels, Q8Matrix, View};
use crate::{Dispatch, ops::*};

/// Params of `q8_gemv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Q8GemvParams {
    /// Rows in this part.
    pub rows: u32,
    /// Input length, a multiple of 32.
    pub cols: u32,
    /// First output row of this part.
    pub row_begin: u32,
    /// Rows of the whole matrix (stride of `y`).
    pub out_rows: u32,
    /// 1: `y += W x` instead of `y = W x` (`q8_gemv`, `q8_gemv_i8`; 0 for `q8_gemv_rows2`, `q8_gemv_rows4`).
    pub accumulate: u32,
    /// Padding.
    pub _pad: [u32; 3],
}
const _: () = assert!(size_of::<Q8GemvParams>() == 32);

impl Kernels {
    /// Q8_0 GEMV over T inputs: `y[t] = W x[t]`. The int8 plane is split by rows over several
    /// dispatches when it is larger than one binding (the lm head on lavapipe's 128 MiB limit).
    /// Shapes: `x [T, cols] f32`, `w [rows, cols]` Q8_0, `y [T, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 32 or zero sizes; buffer errors for views too small
    /// or misaligned.
    pub fn q8_gemv(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8Gemv, w, x, (y, w.rows, 0), tokens, false)
    }

    /// [`Kernels::q8_gemv`] into columns `offset .. offset + rows` of rows of `stride` (`y [T, stride]`): one
    /// of several matrices stacked into one output, as [`Kernels::kquant_gemv_into`] does on blocks.
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`], and a shape error for columns past the row.
    pub fn q8_gemv_into(
        &self,
        w: Q8Matrix<'_>,
        x: View<'_>,
        y: (View<'_>, u32, u32),
        tokens: u32,
    ) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8Gemv, w, x, y, tokens, false)
    }

    /// [`Kernels::q8_gemv`] adding its product onto `y`: `y[t] += W x[t]`. Decode's wo adds onto the residual
    /// stream this way (no residual-add dispatch). Shapes as [`Kernels::q8_gemv`].
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`].
    pub fn q8_gemv_add(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8Gemv, w, x, (y, w.rows, 0), tokens, true)
    }

    /// [`Kernels::q8_gemv`] with four rows per lane group (32 rows per workgroup, the expert GEMVs' row
    /// walk): same contract and result; for matrices of many rows (the lm head), where it keeps more loads
    /// in flight a lane.
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`].
    pub fn q8_gemv_rows4(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8GemvRows4, w, x, (y, w.rows, 0), tokens, false)
    }

    /// [`Kernels::q8_gemv_rows4`] on the input Q8_0-quantised as the kernel reads it, as llama.cpp's
    /// `quantize_row_q8_0` does it: `y[t, r] = Σ_b (Σ_c q[r, c] · xq[t, c]) · scale[r, b] · xs[t, b]` over
    /// the 32-column blocks b ([`cpu::q8_gemv_i8`](crate::cpu::q8_gemv_i8)), each block's sum exact in
    /// int32: what llama.cpp's CPU backend computes for Q8_0 weights. Shapes as [`Kernels::q8_gemv`].
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`].
    pub fn q8_gemv_i8(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8GemvI8, w, x, (y, w.rows, 0), tokens, false)
    }

    /// [`Kernels::q8_gemv_i8`] adding its product onto `y`, as [`Kernels::q8_gemv_add`].
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`].
    pub fn q8_gemv_add_i8(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8GemvI8, w, x, (y, w.rows, 0), tokens, true)
    }

    /// [`Kernels::q8_gemv`] with two rows per lane (16 rows per workgroup): same contract and result,
    /// half the x traffic per weight byte. Kept beside it to compare the two in the bench.
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`].
    pub fn q8_gemv_rows2(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8GemvRows2, w, x, (y, w.rows, 0), tokens, false)
    }

    fn q8_gemv_with(
        &self,
        kernel: Kernel,
        w: Q8Matrix<'_>,
        x: View<'_>,
        (y, stride, offset): (View<'_>, u32, u32),
        tokens: u32,
        accumulate: bool,
    ) -> Result<Dispatch> {
        let b = self.binder(kernel);
        let rows_per_group = match kernel {
            Kernel::Q8GemvRows2 => 16,
            Kernel::Q8GemvRows4 | Kernel::Q8GemvI8 => 32,
            _ => 8,
        };
        let (rows, cols, t) = (u64::from(w.rows), u64::from(w.cols), u64::from(tokens));
        b.ensure(cols > 0 && cols.is_multiple_of(32) && rows > 0, || {
            format!("needs rows > 0 and cols a multiple of 32; got rows {rows}, cols {cols}")
        })?;
        ensure_into(&b, w.rows, stride, offset)?;
        let gy = b.groups("tokens", t)?;
        let out = q8_matrix_parts(&b, w, x, (y, stride), (t, cols), rows_per_group)?
            .into_iter()
            .map(|part| {
                let p = Q8GemvParams {
                    rows: part.rows as u32,
                    cols: w.cols,
                    row_begin: offset + part.begin as u32,
                    out_rows: stride,
                    accumulate: u32::from(accumulate),
                    _pad: [0; 3],
                };
                (p, part.bound, [part.row_groups, gy, 1])
            })
            .collect();
        Ok(b.finish(out))
    }
}

/// One binding part of a dense Q8_0 matrix (the lm head splits past the binding limit): its rows, their
/// bindings and the workgroups along them.
pub(crate) struct MatrixPart<'a> {
    /// First row of the part.
    pub begin: u64,
    /// Rows in the part.
    pub rows: u64,
    /// x, w.q, w.scales, y.
    pub bound: Vec<Bound<'a>>,
    /// Workgroups along the part's rows.
    pub row_groups: u32,
}

/// Checks that `rows` fit in rows of `stride` from column `offset` (a matrix's output among others').
pub(crate) fn ensure_into(b: &Binder<'_>, rows: u32, stride: u32, offset: u32) -> Result<()> {
    b.ensure(u64::from(offset) + u64::from(rows) <= u64::from(stride), || {
        format!("{rows} rows from column {offset} pass the output's rows of {stride}")
    })
}

/// Splits `w` by rows over bindings (whole blocks of `rows_per_group` rows) and binds each part with `x
/// [tokens, x_row]` 4-byte words (`cols` f32, or a [`q8_row_bytes`] row of the int8 GEMMs) and `y [tokens,
/// y_row]` f32, as the dense GEMVs and GEMMs read them.
pub(crate) fn q8_matrix_parts<'a>(
    b: &Binder<'_>,
    w: Q8Matrix<'a>,
    x: View<'a>,
    (y, y_row): (View<'a>, u32),
    (tokens, x_row): (u64, u64),
    rows_per_group: u64,
) -> Result<Vec<MatrixPart<'a>>> {
    let (rows, cols) = (u64::from(w.rows), u64::from(w.cols));
    let scale_row = f16s(cols / 32);
    let parts = b.split_rows("w.q", rows, cols, scale_row, rows_per_group)?;
    let mut out = Vec::with_capacity(parts.len());
    for (begin, end) in parts {
        let n = end - begin;
        let bound = vec![
            b.storage("x", x, 0, f32s(tokens * x_row))?,
            b.storage("w.q", w.q, begin * cols, n * cols)?,
            b.storage("w.scales", w.scales, begin * scale_row, n * scale_row)?,
            b.storage("y", y, 0, f32s(tokens * u64::from(y_row)))?,
        ];
        let row_groups = b.groups("row groups", n.div_ceil(rows_per_group))?;
        out.push(MatrixPart { begin, rows: n, bound, row_groups });
    }
    Ok(out)
}
