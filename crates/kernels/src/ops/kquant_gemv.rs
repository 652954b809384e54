use super::q8_gemm::Q8GemmParams;
use super::q8_gemv::Q8GemvParams;
use crate::error::Result;
use crate::kernels::{Binder, Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `kquant_gemv.wgsl`: those of the Q8_0 GEMV (`cols` a multiple of 256).
pub type KQuantGemvParams = Q8GemvParams;

/// The GGUF block type a [`BlockMatrix`] holds, read in runs of 256 values (a K-quant's super-block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockQuant {
    /// `block_q4_K`, 144 bytes: 4.5 bits a value.
    Q4K,
    /// `block_q6_K`, 210 bytes: 6.5625 bits a value.
    Q6K,
    /// `block_q5_K`, 176 bytes: 5.5 bits a value.
    Q5K,
    /// `block_q3_K`, 110 bytes: 3.4375 bits a value.
    Q3K,
    /// `block_q2_K`, 84 bytes: 2.625 bits a value.
    Q2K,
    /// `block_q4_0`, 18 bytes a block of 32: 4.5 bits a value.
    Q4_0,
    /// `block_q4_1`, 20 bytes a block of 32: 5 bits a value.
    Q4_1,
    /// `block_q5_0`, 22 bytes a block of 32: 5.5 bits a value.
    Q5_0,
    /// `block_q5_1`, 24 bytes a block of 32: 6 bits a value.
    Q5_1,
    /// `block_q8_0`, 34 bytes a block of 32: 8.5 bits a value.
    Q8_0,
    /// `block_iq4_nl`, 18 bytes a block of 32: 4.5 bits a value.
    IQ4NL,
    /// `block_iq4_xs`, 136 bytes: 4.25 bits a value.
    IQ4XS,
    /// IEEE halves.
    F16,
    /// bfloat16s.
    BF16,
    /// f32s.
    F32,
}

impl BlockQuant {
    /// Every type the block kernels read.
    pub const ALL: [BlockQuant; 15] = [
        BlockQuant::Q2K,
        BlockQuant::Q3K,
        BlockQuant::Q4K,
        BlockQuant::Q5K,
        BlockQuant::Q6K,
        BlockQuant::Q4_0,
        BlockQuant::Q4_1,
        BlockQuant::Q5_0,
        BlockQuant::Q5_1,
        BlockQuant::Q8_0,
        BlockQuant::IQ4NL,
        BlockQuant::IQ4XS,
        BlockQuant::F16,
        BlockQuant::BF16,
        BlockQuant::F32,
    ];

    /// Bytes of 256 values (a K-quant's super-block, 8 blocks of the types with blocks of 32).
    pub const fn block_bytes(self) -> u64 {
        match self {
            BlockQuant::Q4K => 144,
            BlockQuant::Q6K => 210,
            BlockQuant::Q5K => 176,
            BlockQuant::Q3K => 110,
            BlockQuant::Q2K => 84,
            BlockQuant::Q4_0 | BlockQuant::IQ4NL => 144,
            BlockQuant::Q4_1 => 160,
            BlockQuant::Q5_0 => 176,
            BlockQuant::Q5_1 => 192,
            BlockQuant::Q8_0 => 272,
            BlockQuant::IQ4XS => 136,
            BlockQuant::F16 | BlockQuant::BF16 => 512,
            BlockQuant::F32 => 1024,
        }
    }

    /// The type of ggml's name `name` (`"q4_K"`, `"q6_K"`), if the kernels read it.
    pub fn from_name(name: &str) -> Option<BlockQuant> {
        BlockQuant::ALL.into_iter().find(|q| q.name() == name)
    }

    /// ggml's name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            BlockQuant::Q4K => "q4_K",
            BlockQuant::Q6K => "q6_K",
            BlockQuant::Q5K => "q5_K",
            BlockQuant::Q3K => "q3_K",
            BlockQuant::Q2K => "q2_K",
            BlockQuant::Q4_0 => "q4_0",
            BlockQuant::Q4_1 => "q4_1",
            BlockQuant::Q5_0 => "q5_0",
            BlockQuant::Q5_1 => "q5_1",
            BlockQuant::Q8_0 => "q8_0",
            BlockQuant::IQ4NL => "iq4_nl",
            BlockQuant::IQ4XS => "iq4_xs",
            BlockQuant::F16 => "f16",
            BlockQuant::BF16 => "bf16",
            BlockQuant::F32 => "f32",
        }
    }
}

/// A dense matrix as GGUF stores it: `rows` rows of `cols / 256` super-blocks of `quant`, one after another
/// from the view's start (a buffer holding it must be padded to whole 4-byte words).
#[derive(Clone, Copy, Debug)]
pub struct BlockMatrix<'a> {
    /// The blocks, `rows * cols / 256 * quant.block_bytes()` bytes.
    pub data: View<'a>,
    /// Their type.
    pub quant: BlockQuant,
    /// Rows (output length of a GEMV).
    pub rows: u32,
    /// Columns (input length), a multiple of 256.
    pub cols: u32,
}

impl BlockMatrix<'_> {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> u64 {
        u64::from(self.cols) / 256 * self.quant.block_bytes()
    }
}

impl Kernels {
    /// K-quant GEMV over T inputs on the blocks as they lie in the file: `y[t] = W x[t]`
    /// ([`cpu::kquant_gemv`](crate::cpu::kquant_gemv)). The matrix is split by rows over several dispatches
    /// when it is larger than one binding. Shapes: `x [T, cols] f32`, `w [rows, cols]` blocks, `y [T,
    /// rows] f32`.
    ///
    /// # Errors
    /// Shape errors for `cols` not a multiple of 256 or zero sizes; buffer errors for views too small or
    /// misaligned.
    pub fn kquant_gemv(&self, w: BlockMatrix<'_>, x: View<'_>, y: View<'_>, tokens: u32) -> Result<Dispatch> {
        self.kquant_gemv_with(w, x, (y, w.rows, 0), tokens, (false, false))
    }

    /// [`Kernels::kquant_gemv`] into columns `offset .. offset + rows` of rows of `stride` (`y [T,
    /// stride]`): one of several matrices, each of its own type, stacked into one output (q|k|v). One row a
    /// lane group: at attention's shapes four (`_rows4`) made too few workgroups (on the H200, Q4_K 4096 ×
    /// 2048: 11.9 against 8.8 µs).
    ///
    /// # Errors
    /// As [`Kernels::kquant_gemv`], and a shape error for columns past the row.
    pub fn kquant_gemv_into(
        &self,
        w: BlockMatrix<'_>,
        x: View<'_>,
        (y, stride, offset): (View<'_>, u32, u32),
        tokens: u32,
    ) -> Result<Dispatch> {
        self.kquant_gemv_with(w, x, (y, stride, offset), tokens, (false, false))
    }

    /// [`Kernels::kquant_gemv`] with four rows a lane group (32 rows a workgroup), each load of x used for
    /// four rows: same contract and result. Kept beside it to compare the two in the bench.
    ///
    /// # Errors
    /// As [`Kernels::kquant_gemv`].
    pub fn kquant_gemv_rows4(
        &self,
        w: BlockMatrix<'_>,
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
    ) -> Result<Dispatch> {
        self.kquant_gemv_with(w, x, (y, w.rows, 0), tokens, (true, false))
    }

    /// [`Kernels::kquant_gemv`] adding its product onto `y`: `y[t] += W x[t]`.
    ///
    /// # Errors
    /// As [`Kernels::kquant_gemv`].
    pub fn kquant_gemv_add(
        &self,
        w: BlockMatrix<'_>,
        x: View<'_>,
        y: View<'_>,
        tokens: u32,
    ) -> Result<Dispatch> {
        self.kquant_gemv_with(w, x, (y, w.rows, 0), tokens, (false, true))
    }

    /// K-quant GEMM over T inputs through workgroup-memory tiles (prefill): the product of
    /// [`Kernels::kquant_gemv_into`] with each weight read once per 32 tokens instead of once a token
    /// (128 rows × 32 tokens a workgroup, `kquant_tile.wgsl`). Same contract.
    ///
    /// # Errors
    /// As [`Kernels::kquant_gemv_into`].
    pub fn kquant_gemm_into(
        &self,
        w: BlockMatrix<'_>,
        x: View<'_>,
        (y, stride, offset): (View<'_>, u32, u32),
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::BlockGemm(w.quant));
        let (rows, cols, t) = (u64::from(w.rows), u64::from(w.cols), u64::from(tokens));
        check_shape(&b, w, t, (stride, offset))?;
        let gy = b.groups("token blocks", t.div_ceil(32))?;
        let row_bytes = w.row_bytes();
        let mut out = Vec::new();
        for (begin, end) in b.split_rows("w", rows, row_bytes, row_bytes, 128)? {
            let n = end - begin;
            let bound = vec![
                b.storage("x", x, 0, f32s(t * cols))?,
                b.storage("w", w.data, begin * row_bytes, n * row_bytes)?,
                b.storage("y", y, 0, f32s(t * u64::from(stride)))?,
            ];
            let p = Q8GemmParams {
                rows: n as u32,
                cols: w.cols,
                row_begin: offset + begin as u32,
                out_rows: stride,
                tokens,
                _pad: [0; 3],
            };
            out.push((p, bound, [b.groups("row blocks", n.div_ceil(128))?, gy, 1]));
        }
        Ok(b.finish(out))
    }

    fn kquant_gemv_with(
        &self,
        w: BlockMatrix<'_>,
        x: View<'_>,
        (y, stride, offset): (View<'_>, u32, u32),
        tokens: u32,
        (rows4, accumulate): (bool, bool),
    ) -> Result<Dispatch> {
        let rows_per_group: u64 = if rows4 { 32 } else { 8 };
        let b = self.binder(if rows4 { Kernel::BlockGemvRows4(w.quant) } else { Kernel::BlockGemv(w.quant) });
        let (rows, cols, t) = (u64::from(w.rows), u64::from(w.cols), u64::from(tokens));
        check_shape(&b, w, t, (stride, offset))?;
        let gy = b.groups("tokens", t)?;
        let row_bytes = w.row_bytes();
        let mut out = Vec::new();
        for (begin, end) in b.split_rows("w", rows, row_bytes, row_bytes, rows_per_group)? {
            let n = end - begin;
            let bound = vec![
                b.storage("x", x, 0, f32s(t * cols))?,
                b.storage("w", w.data, begin * row_bytes, n * row_bytes)?,
                b.storage("y", y, 0, f32s(t * u64::from(stride)))?,
            ];
            let p = KQuantGemvParams {
                rows: n as u32,
                cols: w.cols,
                row_begin: offset + begin as u32,
                out_rows: stride,
                accumulate: u32::from(accumulate),
                _pad: [0; 3],
            };
            out.push((p, bound, [b.groups("row groups", n.div_ceil(rows_per_group))?, gy, 1]));
        }
        Ok(b.finish(out))
    }
}

/// The shape checks of the K-quant GEMVs and GEMMs: rows and tokens, and `cols` whole super-blocks; the
/// output columns `offset .. offset + rows` inside rows of `stride`.
fn check_shape(b: &Binder<'_>, w: BlockMatrix<'_>, tokens: u64, (stride, offset): (u32, u32)) -> Result<()> {
    let (rows, cols) = (u64::from(w.rows), u64::from(w.cols));
    b.ensure(cols > 0 && cols.is_multiple_of(256) && rows > 0 && tokens > 0, || {
        format!(
            "needs rows, tokens > 0 and cols a multiple of 256 ({}); got rows {rows}, cols {cols}, tokens \
             {tokens}",
            w.quant.name()
        )
    })?;
    b.ensure(u64::from(offset) + rows <= u64::from(stride), || {
        format!("output columns {offset}..{} past rows of {stride}", u64::from(offset) + rows)
    })
}
