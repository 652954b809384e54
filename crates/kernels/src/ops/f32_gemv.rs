use crate::error::Result;
use crate::kernels::{Kernel, Kernels, PLACEHOLDER_BYTES, View};
use crate::{Dispatch, ops::*};

/// Params of `f32_gemv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F32GemvParams {
    /// Output length.
    pub rows: u32,
    /// Input length, a multiple of 4.
    pub cols: u32,
    /// 1: the input is `rms_norm(x) · g`, also written out; 2: and written Q8_0-quantised.
    pub norm: u32,
    /// RMSNorm epsilon (with `norm`).
    pub eps: f32,
    /// 1: `y += bias`.
    pub bias: u32,
    /// Padding: a uniform's size is a multiple of 16 bytes.
    pub _pad: [u32; 3],
}
const _: () = assert!(size_of::<F32GemvParams>() == 32);

/// The RMSNorm [`Kernels::f32_gemv_norm`] applies to its input, and where the normed rows go.
#[derive(Clone, Copy, Debug)]
pub struct InputNorm<'a> {
    /// The norm weight, `[cols] f32`.
    pub weight: View<'a>,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// `[T, cols] f32`: the normed input rows.
    pub normed: View<'a>,
    /// Where to write the normed rows Q8_0-quantised too, as [`Kernels::quantize_q8`] would (`[T]` rows of
    /// [`q8_row_bytes`]`(cols)`; cols a multiple of 32): the input of [`Kernels::expert_q8_gemv_xq`].
    pub quantised: Option<View<'a>>,
}

impl Kernels {
    /// F32 GEMV over T inputs (the router): `y[t] = W x[t]`.
    /// Shapes: `w [rows, cols] f32`, `x [T, cols] f32`, `y [T, rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 4 or zero sizes; buffer errors for views too small,
    /// misaligned or over the binding limit.
    pub fn f32_gemv(
        &self,
        w: View<'_>,
        rows: u32,
        cols: u32,
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
    ) -> Result<Dispatch> {
        self.f32_gemv_with(w, (rows, cols), x, y, tokens, None, None)
    }

    /// [`Kernels::f32_gemv`] plus `bias` (`[T, rows] f32`): `y[t] = W x[t] + bias[t]`, a forced routing's
    /// mask added in the router's dispatch where the router's input is normed already.
    ///
    /// # Errors
    /// As [`Kernels::f32_gemv`].
    pub fn f32_gemv_bias(
        &self,
        w: View<'_>,
        (rows, cols): (u32, u32),
        x: View<'_>,
        bias: View<'_>,
        y: View<'_>,
        tokens: u32,
    ) -> Result<Dispatch> {
        self.f32_gemv_with(w, (rows, cols), x, y, tokens, None, Some(bias))
    }

    /// [`Kernels::f32_gemv`] of the RMSNorm of its input, which it also writes out, in one dispatch:
    /// `normed[t] = rms_norm(x[t]) · norm.weight` (as [`Kernels::rms_norm`]) and `y[t] = W normed[t]` (the
    /// row's scale applied to the dot product with `x · weight`). Decode's router runs the layer's FFN norm
    /// this way for itself and for the expert GEMVs after it: one dispatch a layer fewer.
    /// Shapes as [`Kernels::f32_gemv`], `norm.weight [cols] f32`, `norm.normed [T, cols] f32`. With
    /// `norm.quantised` the normed rows are also written Q8_0-quantised there, each 32-value block as
    /// llama.cpp's `quantize_row_q8_0` makes it ([`cpu::quantize_q8`](crate::cpu::quantize_q8)). With
    /// `bias` (`[T, rows] f32`), `y[t] = W normed[t] + bias[t]`: a forced routing's mask added in the same
    /// dispatch.
    ///
    /// # Errors
    /// As [`Kernels::f32_gemv`], and a shape error for `norm.quantised` with `cols` not a multiple of 32.
    #[allow(clippy::too_many_arguments)]
    pub fn f32_gemv_norm(
        &self,
        w: View<'_>,
        (rows, cols): (u32, u32),
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
        norm: InputNorm<'_>,
        bias: Option<View<'_>>,
    ) -> Result<Dispatch> {
        self.f32_gemv_with(w, (rows, cols), x, y, tokens, Some(norm), bias)
    }

    #[allow(clippy::too_many_arguments)]
    fn f32_gemv_with(
        &self,
        w: View<'_>,
        (rows, cols): (u32, u32),
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
        norm: Option<InputNorm<'_>>,
        bias: Option<View<'_>>,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::F32Gemv);
        let (r, c, t) = (u64::from(rows), u64::from(cols), u64::from(tokens));
        b.ensure(r > 0 && c > 0 && c.is_multiple_of(4), || {
            format!("needs rows > 0 and cols a multiple of 4; got rows {r}, cols {c}")
        })?;
        let dims = [b.groups("rows", r)?, b.groups("tokens", t)?, 1];
        // Without a norm, x stands in for the weight and the placeholder for the normed rows (and without
        // quantised rows for those): the shader reads and writes neither.
        let (weight, normed, normed_bytes) = match norm {
            Some(n) => (n.weight, n.normed, f32s(t * c)),
            None => (x, self.placeholder(0), PLACEHOLDER_BYTES),
        };
        let quantised = norm.and_then(|n| n.quantised);
        b.ensure(quantised.is_none() || c.is_multiple_of(32), || {
            format!("quantising the normed rows needs cols a multiple of 32; got cols {c}")
        })?;
        let (normed_q, normed_q_bytes) = match quantised {
            Some(q) => (q, t * q8_row_bytes(cols)),
            None => (self.placeholder(1), PLACEHOLDER_BYTES),
        };
        let bound = vec![
            b.storage("x", x, 0, f32s(t * c))?,
            b.storage("w", w, 0, f32s(r * c))?,
            b.storage("norm.weight", weight, 0, f32s(c))?,
            // Without a bias, x (read only too) stands in; the shader does not read it.
            match bias {
                Some(bias) => b.storage("bias", bias, 0, f32s(t * r))?,
                None => b.storage("bias", x, 0, PLACEHOLDER_BYTES)?,
            },
            b.storage("y", y, 0, f32s(t * r))?,
            b.storage("norm.normed", normed, 0, normed_bytes)?,
            b.storage("norm.quantised", normed_q, 0, normed_q_bytes)?,
        ];
        let mode = u32::from(norm.is_some()) + u32::from(quantised.is_some());
        let eps = norm.map_or(0.0, |n| n.eps);
        let p = F32GemvParams { rows, cols, norm: mode, eps, bias: u32::from(bias.is_some()), _pad: [0; 3] };
        Ok(b.finish(vec![(p, bound, dims)]))
    }
}
