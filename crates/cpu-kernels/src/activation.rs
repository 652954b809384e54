//! The input of a matmul: f32 values, or those quantised to Q8_0 as llama.cpp does before every Q8_0 and
//! Q4_0 matmul on its CPU backend (`vec_dot_type` of both is Q8_0).

use half::f16;

use crate::BLOCK;

/// A row quantised to Q8_0: per 32-value block `d = max|x| / 127`, `q = round(x / d)` (halves away from
/// zero), `d` kept as its f16 rounding, as llama.cpp's `quantize_row_q8_0_ref` and the GPU's `quantize_q8`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Q8Row {
    /// The values, `[cols]`.
    pub quants: Vec<i8>,
    /// The block scales (f16-rounded, as f32), `[cols / 32]`.
    pub scales: Vec<f32>,
    /// The sums of each 16 values' quants, `[cols / 16]`: what a K-quant's minimums and offsets multiply
    /// (llama.cpp's Q8_K keeps them too, as `bsums`).
    pub sums: Vec<i32>,
}

impl Q8Row {
    /// Quantises `x` (a multiple of 32 values; a tail is dropped).
    pub fn quantize(x: &[f32]) -> Self {
        let mut row = Q8Row::default();
        row.quantize_from(x);
        row
    }

    /// Quantises `x` into this row, reusing its memory.
    pub fn quantize_from(&mut self, x: &[f32]) {
        let n = x.len() / BLOCK;
        self.quants.resize(n * BLOCK, 0);
        self.scales.resize(n, 0.0);
        for ((block, q), s) in
            x.chunks_exact(BLOCK).zip(self.quants.chunks_exact_mut(BLOCK)).zip(&mut self.scales)
        {
            *s = quantize_block(block, q);
        }
        self.sums = sums_of(&self.quants);
    }

    /// A row of quantised values `quants` and their block `scales` (its sums computed).
    pub fn from_parts(quants: Vec<i8>, scales: Vec<f32>) -> Self {
        let sums = sums_of(&quants);
        Q8Row { quants, scales, sums }
    }

    /// Values.
    pub fn len(&self) -> usize {
        self.quants.len()
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.quants.is_empty()
    }
}

/// The sum of each 16 of `quants`.
fn sums_of(quants: &[i8]) -> Vec<i32> {
    quants.chunks_exact(16).map(|c| c.iter().map(|&q| i32::from(q)).sum()).collect()
}

/// One block into `q`; returns its scale.
pub(crate) fn quantize_block(x: &[f32], q: &mut [i8]) -> f32 {
    let d = x.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, v) in q.iter_mut().zip(x) {
        // `f32::round` rounds halves away from zero, as C's roundf.
        *q = (v * id).round() as i8;
    }
    f16::from_f32(d).to_f32()
}

/// What a matmul multiplies by.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// f32 values: the weights dequantised exactly (`d · q`) and multiplied in f32, as the GPU path does.
    F32(&'a [f32]),
    /// Q8_0-quantised values: exact integer dot products per block, scaled by both blocks' scales, as
    /// llama.cpp's CPU backend does (`ggml_vec_dot_q8_0_q8_0`, `ggml_vec_dot_q4_0_q8_0`).
    Q8(&'a Q8Row),
}

impl Input<'_> {
    /// Values.
    pub fn len(&self) -> usize {
        match self {
            Input::F32(x) => x.len(),
            Input::Q8(x) => x.len(),
        }
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
