//! Quant matrices where they lie: a store record's planes or a GGUF tensor's interleaved blocks, borrowed.

use diskformer_gguf::TensorType;
use half::f16;

use crate::{Error, Result};

/// Values a quant block holds (Q8_0 and Q4_0).
pub const BLOCK: usize = 32;
/// Values a K-quant super-block holds: a multiple of every type's block.
pub const K_BLOCK: usize = 256;
/// Bytes of a block's f16 scale.
const SCALE_BYTES: usize = 2;

/// A weight type the kernels multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WeightType {
    /// 32 int8 values and an f16 scale a block.
    Q8_0,
    /// 32 4-bit values (offset 8; byte j holds value j low and j + 16 high) and an f16 scale a block.
    Q4_0,
    /// Any other type diskformer-gguf dequantises ([`TensorType::dequantizable`]): blocks read whole as
    /// ggml lays them out (ggml-common.h), dequantised as ggml does and multiplied in f32.
    Dequantised(TensorType),
}

impl WeightType {
    fn of(ty: TensorType, what: &'static str) -> Result<Self> {
        match ty {
            TensorType::Q8_0 => Ok(WeightType::Q8_0),
            TensorType::Q4_0 => Ok(WeightType::Q4_0),
            other if other.dequantizable() => Ok(WeightType::Dequantised(other)),
            _ => Err(Error::UnsupportedType { what, ty }),
        }
    }

    /// Whether blocks are dequantised to f32 before they are multiplied (f32 inputs only).
    pub(crate) fn is_dequantised(self) -> bool {
        matches!(self, WeightType::Dequantised(_))
    }

    /// Whether rows of this type multiply Q8_0-quantised inputs ([`crate::takes_quantised_input`]).
    pub(crate) fn takes_q8(self) -> bool {
        crate::takes_quantised_input(self.tensor_type())
    }

    /// Values a block.
    pub(crate) fn block_values(self) -> usize {
        self.tensor_type().block_size() as usize
    }

    /// Bytes of quants a block (for the dequantised types the whole block, scales included).
    pub(crate) fn quant_bytes(self) -> usize {
        match self {
            WeightType::Q8_0 => 32,
            WeightType::Q4_0 => 16,
            WeightType::Dequantised(ty) => ty.block_bytes() as usize,
        }
    }

    /// Bytes a block takes in a GGUF's interleaved layout.
    fn block_bytes(self) -> usize {
        self.tensor_type().block_bytes() as usize
    }

    pub(crate) fn tensor_type(self) -> TensorType {
        match self {
            WeightType::Q8_0 => TensorType::Q8_0,
            WeightType::Q4_0 => TensorType::Q4_0,
            WeightType::Dequantised(ty) => ty,
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

/// A `[rows, cols]` matrix of any type diskformer-gguf dequantises, borrowed where it lies (ggml order:
/// `cols` values a row). Q8_0 and Q4_0 come as planes or blocks and multiply f32 or Q8_0-quantised inputs
/// with integer dot products; the other types come as a GGUF holds them ([`QuantMatrix::blocks`]) and
/// multiply f32 inputs, each block dequantised as ggml does.
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
        let ty = match WeightType::of(ty, what)? {
            t if t.is_dequantised() => return Err(Error::UnsupportedType { what, ty }),
            t => t,
        };
        let blocks = blocks(what, ty, rows, cols)?;
        check_len(what, blocks.saturating_mul(ty.quant_bytes()), quants.len())?;
        check_len(what, blocks.saturating_mul(SCALE_BYTES), scales.len())?;
        Ok(Self { ty, rows, cols, data: Data::Planes { quants, scales } })
    }

    /// A matrix of interleaved blocks, as a GGUF tensor holds it (`block_q8_0 { f16 d; int8 qs[32]; }`,
    /// `block_q4_0 { f16 d; uint8 qs[16]; }`, and every other type's blocks; ggml-common.h).
    ///
    /// # Errors
    /// As [`QuantMatrix::planes`], with every [`TensorType::dequantizable`] type taken (rows of whole
    /// blocks).
    pub fn blocks(
        what: &'static str,
        ty: TensorType,
        (rows, cols): (usize, usize),
        data: &'a [u8],
    ) -> Result<Self> {
        let ty = WeightType::of(ty, what)?;
        let blocks = blocks(what, ty, rows, cols)?;
        check_len(what, blocks.saturating_mul(ty.block_bytes()), data.len())?;
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
        self.rows * self.cols / self.ty.block_values() * self.ty.block_bytes()
    }

    pub(crate) fn weight_type(&self) -> WeightType {
        self.ty
    }

    /// Row `r`'s blocks.
    #[inline]
    pub(crate) fn row(&self, r: usize) -> RowRef<'a> {
        let nb = self.cols / self.ty.block_values();
        let qb = self.ty.quant_bytes();
        match self.data {
            // Blocks read whole: `quants` is the row's bytes, a block each `qb`; their scales lie inside.
            Data::Blocks(data) if self.ty.is_dequantised() => RowRef {
                quants: &data[r * nb * qb..][..nb * qb],
                quant_stride: qb,
                scales: &[],
                scale_stride: 0,
                blocks: nb,
            },
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

    /// Row `r` as f32, as ggml dequantises it (`d · q`, Q4_0 `d · (q − 8)`, the other types as
    /// [`diskformer_gguf::dequantize`]).
    pub fn dequantize_row(&self, r: usize) -> Vec<f32> {
        let row = self.row(r);
        if self.ty.is_dequantised() {
            let mut out = vec![0f32; self.cols];
            diskformer_gguf::dequantize(self.ty.tensor_type(), row.quants, &mut out)
                .expect("a row of whole blocks (checked at construction)");
            return out;
        }
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
                WeightType::Dequantised(_) => unreachable!("returned above"),
            }
        }
        out
    }
}

fn blocks(what: &'static str, ty: WeightType, rows: usize, cols: usize) -> Result<usize> {
    let block = ty.block_values();
    if !cols.is_multiple_of(block) {
        return Err(Error::PartialBlock { what, cols, block });
    }
    rows.checked_mul(cols / block).ok_or(Error::BadLength { what, expected: usize::MAX, got: 0 })
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(Error::BadLength { what, expected, got });
    }
    Ok(())
}
