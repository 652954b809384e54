//! Quant matrices where they lie: a store record's planes or a GGUF tensor's interleaved blocks, borrowed.

use diskformer_gguf::TensorType;
use half::f16;

use crate::{Error, Result};

/// Values a quant block holds (Q8_0 and Q4_0).
pub const BLOCK: usize = 32;
/// Bytes of a block's f16 scale.
const SCALE_BYTES: usize = 2;

/// A weight type the kernels multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WeightType {
    /// 32 int8 values and an f16 scale a block.
    Q8_0,
    /// 32 4-bit values (offset 8; byte j holds value j low and j + 16 high) and an f16 scale a block.
    Q4_0,
}

impl WeightType {
    fn of(ty: TensorType, what: &'static str) -> Result<Self> {
        match ty {
            TensorType::Q8_0 => Ok(WeightType::Q8_0),
            TensorType::Q4_0 => Ok(WeightType::Q4_0),
            _ => Err(Error::UnsupportedType { what, ty }),
        }
    }

    /// Bytes of quants a block.
    pub(crate) fn quant_bytes(self) -> usize {
        match self {
            WeightType::Q8_0 => 32,
            WeightType::Q4_0 => 16,
        }
    }

    fn tensor_type(self) -> TensorType {
        match self {
            WeightType::Q8_0 => TensorType::Q8_0,
            WeightType::Q4_0 => TensorType::Q4_0,
        }
    }
}

/// One row's blocks: block `b`'s quants at `quants[b · quant_stride..]`, its f16 scale at
/// `scales[b · scale_stride..]`. Both layouts are this with other strides, so one kernel reads either.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowRef<'a> {
    pub(crate) quants: &'a [u8],
    pub(crate) quant_stride: usize,
    pub(crate) scales: &'a [u8],
    pub(crate) scale_stride: usize,
    pub(crate) blocks: usize,
}

impl RowRef<'_> {
    /// Block `b`'s scale.
    #[inline(always)]
    pub(crate) fn scale(&self, b: usize) -> f32 {
        let s = &self.scales[b * self.scale_stride..];
        f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32()
    }

    /// Block `b`'s scale bits.
    #[inline(always)]
    pub(crate) fn scale_bits(&self, b: usize) -> u16 {
        let s = &self.scales[b * self.scale_stride..];
        u16::from_le_bytes([s[0], s[1]])
    }

    /// Block `b`'s quant bytes.
    #[inline(always)]
    pub(crate) fn block_quants(&self, b: usize, len: usize) -> &[u8] {
        &self.quants[b * self.quant_stride..][..len]
    }
}

#[derive(Clone, Copy, Debug)]
enum Data<'a> {
    Planes { quants: &'a [u8], scales: &'a [u8] },
    Blocks(&'a [u8]),
}

/// A `[rows, cols]` Q8_0 or Q4_0 matrix borrowed where it lies (ggml order: `cols` values a row).
#[derive(Clone, Copy, Debug)]
pub struct QuantMatrix<'a> {
    ty: WeightType,
    rows: usize,
    cols: usize,
    data: Data<'a>,
}

impl<'a> QuantMatrix<'a> {
    /// A matrix in planes, as a store record holds it: every block's quants in row order, then (in
    /// `scales`) every block's f16 scale, little-endian, in the same order.
    ///
    /// # Errors
    /// [`Error::UnsupportedType`] for types other than Q8_0 and Q4_0, [`Error::PartialBlock`] when `cols` is
    /// not a multiple of 32, [`Error::BadLength`] when a plane's length is not what the shape needs.
    pub fn planes(
        what: &'static str,
        ty: TensorType,
        (rows, cols): (usize, usize),
        quants: &'a [u8],
        scales: &'a [u8],
    ) -> Result<Self> {
        let ty = WeightType::of(ty, what)?;
        let blocks = blocks(what, rows, cols)?;
        check_len(what, blocks.saturating_mul(ty.quant_bytes()), quants.len())?;
        check_len(what, blocks.saturating_mul(SCALE_BYTES), scales.len())?;
        Ok(Self { ty, rows, cols, data: Data::Planes { quants, scales } })
    }

    /// A matrix of interleaved blocks, as a GGUF tensor holds it (`block_q8_0 { f16 d; int8 qs[32]; }`,
    /// `block_q4_0 { f16 d; uint8 qs[16]; }`, ggml-common.h).
    ///
    /// # Errors
    /// As [`QuantMatrix::planes`].
    pub fn blocks(
        what: &'static str,
        ty: TensorType,
        (rows, cols): (usize, usize),
        data: &'a [u8],
    ) -> Result<Self> {
        let ty = WeightType::of(ty, what)?;
        let blocks = blocks(what, rows, cols)?;
        check_len(what, blocks.saturating_mul(SCALE_BYTES + ty.quant_bytes()), data.len())?;
        Ok(Self { ty, rows, cols, data: Data::Blocks(data) })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values a row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Its GGUF type.
    pub fn tensor_type(&self) -> TensorType {
        self.ty.tensor_type()
    }

    /// Bytes of weights (quants and scales) the kernels read for the whole matrix.
    pub fn weight_bytes(&self) -> usize {
        self.rows * self.cols / BLOCK * (self.ty.quant_bytes() + SCALE_BYTES)
    }

    pub(crate) fn weight_type(&self) -> WeightType {
        self.ty
    }

    /// Row `r`'s blocks.
    #[inline]
    pub(crate) fn row(&self, r: usize) -> RowRef<'a> {
        let nb = self.cols / BLOCK;
        let qb = self.ty.quant_bytes();
        match self.data {
            Data::Planes { quants, scales } => RowRef {
                quants: &quants[r * nb * qb..][..nb * qb],
                quant_stride: qb,
                scales: &scales[r * nb * SCALE_BYTES..][..nb * SCALE_BYTES],
                scale_stride: SCALE_BYTES,
                blocks: nb,
            },
            Data::Blocks(data) => {
                let bb = qb + SCALE_BYTES;
                let row = &data[r * nb * bb..][..nb * bb];
                RowRef {
                    quants: &row[SCALE_BYTES..],
                    quant_stride: bb,
                    scales: row,
                    scale_stride: bb,
                    blocks: nb,
                }
            }
        }
    }

    /// Row `r` as f32, as ggml dequantises it (`d · q`, Q4_0 `d · (q − 8)`).
    pub fn dequantize_row(&self, r: usize) -> Vec<f32> {
        let row = self.row(r);
        let mut out = Vec::with_capacity(self.cols);
        for b in 0..row.blocks {
            let d = row.scale(b);
            match self.ty {
                WeightType::Q8_0 => {
                    out.extend(row.block_quants(b, 32).iter().map(|&q| d * f32::from(q as i8)))
                }
                WeightType::Q4_0 => {
                    let qs = row.block_quants(b, 16);
                    out.extend(qs.iter().map(|&q| d * (f32::from(q & 0x0f) - 8.0)));
                    out.extend(qs.iter().map(|&q| d * (f32::from(q >> 4) - 8.0)));
                }
            }
        }
        out
    }
}

fn blocks(what: &'static str, rows: usize, cols: usize) -> Result<usize> {
    if !cols.is_multiple_of(BLOCK) {
        return Err(Error::PartialBlock { what, cols, block: BLOCK });
    }
    rows.checked_mul(cols / BLOCK).ok_or(Error::BadLength { what, expected: usize::MAX, got: 0 })
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(Error::BadLength { what, expected, got });
    }
    Ok(())
}
