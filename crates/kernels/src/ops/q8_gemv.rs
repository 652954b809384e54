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
    /// 1: the input is `rms_norm(x) · g` (`q8_gemv` only; 0 for `q8_gemv_rows2`).
    pub norm: u32,
    /// 1: `y += W in` instead of `y = W in` (`q8_gemv` only).
    pub accumulate: u32,
    /// RMSNorm epsilon (with `norm`).
    pub eps: f32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<Q8GemvParams>() == 32);

/// What decode folds into a dense GEMV (see [`Kernels::q8_gemv_fused`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct GemvFusion<'a> {
    /// RMSNorm the input first: the norm weight `[cols] f32` and epsilon.
    pub norm: Option<(View<'a>, f32)>,
    /// Add the product to `y` instead of storing it.
    pub accumulate: bool,
}

impl Kernels {
    /// Q8_0 GEMV over T inputs: `y[t] = W x[t]`. The int8 plane is split by rows over several
    /// dispatches when it is larger than one binding (the lm head on lavapipe's 128 MiB limit).
    /// Shapes: `x [T, cols] f32`, `w [rows, cols]` Q8_0, `y [T, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 32 or zero sizes; buffer errors for views too small
    /// or misaligned.
    pub fn q8_gemv(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8Gemv, w, x, y, tokens, GemvFusion::default())
    }

    /// [`Kernels::q8_gemv`] with an RMSNorm before it and/or an add after it, in the same dispatch:
    /// `y[t] (+)= W · in[t]`, `in[t] = rms_norm(x[t]) · norm` (as [`Kernels::rms_norm`], the row's scale
    /// applied to the dot product with `x · norm`) or `x[t]`. Decode runs its attention norm in the q|k|v
    /// GEMV and adds wo's output onto the residual stream this way: two dispatches a layer fewer, each a
    /// dependent launch and drain. Shapes as [`Kernels::q8_gemv`], `norm [cols] f32`.
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`]; a buffer error for a norm weight shorter than `cols`.
    pub fn q8_gemv_fused(
        &self,
        w: Q8Matrix<'_>,
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
        fusion: GemvFusion<'_>,
    ) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8Gemv, w, x, y, tokens, fusion)
    }

    /// [`Kernels::q8_gemv`] with two rows per lane (16 rows per workgroup): same contract and result,
    /// half the x traffic per weight byte. Kept beside it to compare the two in the bench.
    ///
    /// # Errors
    /// As [`Kernels::q8_gemv`].
    pub fn q8_gemv_rows2(&self, w: Q8Matrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.q8_gemv_with(Kernel::Q8GemvRows2, w, x, y, tokens, GemvFusion::default())
    }

    fn q8_gemv_with(
        &self,
        kernel: Kernel,
        w: Q8Matrix<'_>,
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
        fusion: GemvFusion<'_>,
    ) -> Result<Dispatch> {
        let b = self.binder(kernel);
        let rows_per_group = if kernel == Kernel::Q8GemvRows2 { 16 } else { 8 };
        let (rows, cols, t) = (u64::from(w.rows), u64::from(w.cols), u64::from(tokens));
        b.ensure(cols > 0 && cols.is_multiple_of(32) && rows > 0, || {
            format!("needs rows > 0 and cols a multiple of 32; got rows {rows}, cols {cols}")
        })?;
        let gy = b.groups("tokens", t)?;
        // Without a norm the weight binding is x itself, which the shader then never reads as one.
        let (g, eps) = fusion.norm.unwrap_or((x, 0.0));
        let mut out = Vec::new();
        for mut part in q8_matrix_parts(&b, w, x, y, t, rows_per_group)? {
            if kernel == Kernel::Q8Gemv {
                // Before y: outputs come last.
                part.bound.insert(3, b.storage("norm", g, 0, f32s(cols))?);
            }
            let p = Q8GemvParams {
                rows: part.rows as u32,
                cols: w.cols,
                row_begin: part.begin as u32,
                out_rows: w.rows,
                norm: u32::from(fusion.norm.is_some()),
                accumulate: u32::from(fusion.accumulate),
                eps,
                _pad: 0,
            };
            out.push((p, part.bound, [part.row_groups, gy, 1]));
        }
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

/// Splits `w` by rows over bindings (whole blocks of `rows_per_group` rows) and binds each part with `x
/// [tokens, cols]` and `y [tokens, rows]`, as the dense GEMVs and GEMMs read them.
pub(crate) fn q8_matrix_parts<'a>(
    b: &Binder<'_>,
    w: Q8Matrix<'a>,
    x: View<'a>,
    y: View<'a>,
    tokens: u64,
    rows_per_group: u64,
) -> Result<Vec<MatrixPart<'a>>> {
    let (rows, cols) = (u64::from(w.rows), u64::from(w.cols));
    let scale_row = f16s(cols / 32);
    let parts = b.split_rows("w.q", rows, cols, scale_row, rows_per_group)?;
    let mut out = Vec::with_capacity(parts.len());
    for (begin, end) in parts {
        let n = end - begin;
        let bound = vec![
            b.storage("x", x, 0, f32s(tokens * cols))?,
            b.storage("w.q", w.q, begin * cols, n * cols)?,
            b.storage("w.scales", w.scales, begin * scale_row, n * scale_row)?,
            b.storage("y", y, 0, f32s(tokens * rows))?,
        ];
        let row_groups = b.groups("row groups", n.div_ceil(rows_per_group))?;
        out.push(MatrixPart { begin, rows: n, bound, row_groups });
    }
    Ok(out)
}
