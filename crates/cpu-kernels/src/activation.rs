//! The input of a matmul: f32 values, those quantised to Q8_0 as llama.cpp does before every Q8_0 and Q4_0
//! matmul on its CPU backend (`vec_dot_type` of both is Q8_0), or quantised to 16 bits as two int8 halves,
//! which the int8 kernels multiply at nearly their Q8_0 speed with an error ~256 times smaller.

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
        self.make_sums();
    }

    /// `sums` from `quants`, reusing their memory.
    fn make_sums(&mut self) {
        self.sums.resize(self.quants.len() / 16, 0);
        sums_of_16(&self.quants, &mut self.sums);
    }

    /// A row of quantised values `quants` and their block `scales` (its sums computed).
    pub fn from_parts(quants: Vec<i8>, scales: Vec<f32>) -> Self {
        let mut row = Q8Row { quants, scales, sums: Vec::new() };
        row.make_sums();
        row
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

/// Each 16 of `quants`' sums into `sums`.
pub(crate) fn sums_of_16(quants: &[i8], sums: &mut [i32]) {
    for (sum, q) in sums.iter_mut().zip(quants.chunks_exact(16)) {
        *sum = q.iter().map(|&v| i32::from(v)).sum();
    }
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

/// A row quantised to 16 bits as two Q8_0-shaped halves: per 32-value block `d = max|x| / 127` (exact, not
/// f16-rounded), `hi = round(x / d)` and `lo = round((x / d − hi) · 256)` (clamped to ±127), so that `x ≈ d
/// · hi + (d / 256) · lo` within `d / 512`, or `d / 256` for the 1 in 256 values clamped (plus f32
/// rounding). `row · x` is then `row · hi + row · lo`, which the K-quant kernels add as integers (`256 · Σ
/// w·hi + Σ w·lo`) before one scaling. Where llama.cpp's Q8_0 input moves a log-probability by ~1e-2, this
/// moves it by about what f32 rounding does (the goldens: 3.5e-4–4.9e-4 from llama.cpp's F32 twins, as
/// the GPU's f32 path).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Q16Row {
    /// The high halves, with the blocks' scales `d`.
    pub hi: Q8Row,
    /// The low halves, with the scales `d / 256`.
    pub lo: Q8Row,
    /// Each 32-value run's sum as the halves hold it (`d · Σ hi + d / 256 · Σ lo`), `[cols / 32]`: what a
    /// Q4_K or Q5_K block's minimums multiply, made once for the row rather than in every block of every
    /// weight row (the Q16 kernels' minimums then take one load and one multiply-add a block).
    pub totals: Vec<f32>,
}

impl Q16Row {
    /// The row of the halves `hi` and `lo` (the scales of `lo` those of `hi` over 256), its totals made.
    pub fn from_halves(hi: Q8Row, lo: Q8Row) -> Self {
        let mut row = Q16Row { hi, lo, totals: Vec::new() };
        row.make_totals();
        row
    }

    /// `totals` from the halves' sums of 16 and scales.
    fn make_totals(&mut self) {
        let run = |h: &Q8Row, j: usize| (h.sums[2 * j] + h.sums[2 * j + 1]) as f32 * h.scales[j];
        let runs = self.hi.scales.len();
        self.totals.resize(runs, 0.0);
        for (j, t) in self.totals.iter_mut().enumerate() {
            *t = run(&self.hi, j) + run(&self.lo, j);
        }
    }

    /// Quantises `x` (a multiple of 32 values; a tail is dropped).
    pub fn quantize(x: &[f32]) -> Self {
        let mut row = Q16Row::default();
        row.quantize_from(x);
        row
    }

    /// Quantises `x` into this row, reusing its memory.
    pub fn quantize_from(&mut self, x: &[f32]) {
        let n = x.len() / BLOCK;
        for half in [&mut self.hi, &mut self.lo] {
            half.quants.resize(n * BLOCK, 0);
            half.scales.resize(n, 0.0);
        }
        for (b, block) in x.chunks_exact(BLOCK).enumerate() {
            let (hi, lo) =
                (&mut self.hi.quants[b * BLOCK..][..BLOCK], &mut self.lo.quants[b * BLOCK..][..BLOCK]);
            let d = quantize_block_16(block, hi, lo);
            self.hi.scales[b] = d;
            self.lo.scales[b] = d / 256.0;
        }
        self.hi.make_sums();
        self.lo.make_sums();
        self.make_totals();
    }

    /// Values.
    pub fn len(&self) -> usize {
        self.hi.len()
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.hi.is_empty()
    }
}

/// One block into its halves `hi` and `lo`; returns its scale `d` (the low halves' is `d / 256`).
pub(crate) fn quantize_block_16(x: &[f32], hi: &mut [i8], lo: &mut [i8]) -> f32 {
    let d = x.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for ((h, l), v) in hi.iter_mut().zip(lo.iter_mut()).zip(x) {
        let scaled = (v * id).clamp(-127.0, 127.0);
        let high = round_even(scaled);
        *h = high as i8;
        // |scaled − high| ≤ 0.5, so 256 times it lies in −128..=128; clamped to ±127 (off by at most one
        // step then), since the Q8_0 kernels negate an input value where the weight is negative.
        *l = round_even((scaled - high) * 256.0).clamp(-127.0, 127.0) as i8;
    }
    d
}

/// `v` rounded to the nearest integer, ties to even, for |v| ≤ 2^22: adding and taking away 1.5 · 2^23
/// leaves no fraction bits. Plain arithmetic, so the block's loop vectorises, where `f32::round` is a
/// libm call a value (Q16's own halves need no particular tie rule; Q8_0's keep llama.cpp's `roundf`).
fn round_even(v: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    (v + SHIFT) - SHIFT
}

/// What a matmul multiplies by.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// f32 values: the weights dequantised exactly (`d · q`) and multiplied in f32, as the GPU path does.
    F32(&'a [f32]),
    /// Q8_0-quantised values: exact integer dot products per block, scaled by both blocks' scales, as
    /// llama.cpp's CPU backend does (`ggml_vec_dot_q8_0_q8_0`, `ggml_vec_dot_q4_0_q8_0`).
    Q8(&'a Q8Row),
    /// Values quantised to 16 bits as two int8 halves ([`Q16Row`]): the Q8_0 path's integer products, twice.
    Q16(&'a Q16Row),
}

impl Input<'_> {
    /// Values.
    pub fn len(&self) -> usize {
        match self {
            Input::F32(x) => x.len(),
            Input::Q8(x) => x.len(),
            Input::Q16(x) => x.len(),
        }
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
