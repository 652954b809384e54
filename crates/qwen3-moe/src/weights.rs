//! The dense weights on the GPU: every non-expert tensor of the store's `dense.bin`, Q8_0 matrices one buffer
//! per plane, K-quant ones (Q4_K, Q5_K, Q6_K) as their GGUF blocks, checked against the config's shapes before
//! anything is uploaded.

use diskformer_gguf::TensorType;
use diskformer_kernels::{BlockMatrix, BlockQuant, Q8Matrix, View};
use diskformer_store::{DenseData, DenseMap, DenseTensor, Store};

use crate::{Config, Error, Result};

/// A dense matrix on the GPU: Q8_0 planes (which every kernel path reads), or GGUF blocks of the K-quants
/// the GEMVs read, in one or more stacked pieces of their own types (q|k|v, whose `attn_v` a Q4_K_M file
/// keeps in Q6_K on some layers).
#[derive(Clone, Debug)]
pub(crate) enum DenseWeight {
    Q8(Q8Weight),
    Blocks(Vec<BlockWeight>),
}

/// One piece of a [`DenseWeight::Blocks`]: `rows` rows of `cols / 256` super-blocks.
#[derive(Clone, Debug)]
pub(crate) struct BlockWeight {
    data: wgpu::Buffer,
    pub quant: BlockQuant,
    pub rows: u32,
    pub cols: u32,
}

impl BlockWeight {
    pub fn m(&self) -> BlockMatrix<'_> {
        BlockMatrix { data: View::from(&self.data), quant: self.quant, rows: self.rows, cols: self.cols }
    }
}

impl DenseWeight {
    /// Output length (the stacked pieces' rows together).
    pub fn rows(&self) -> u32 {
        match self {
            DenseWeight::Q8(w) => w.rows,
            DenseWeight::Blocks(pieces) => pieces.iter().map(|p| p.rows).sum(),
        }
    }
}

/// A Q8_0 matrix on the GPU as the kernels bind it: its two planes.
#[derive(Clone, Debug)]
pub(crate) struct Q8Weight {
    q: wgpu::Buffer,
    s: wgpu::Buffer,
    pub rows: u32,
    pub cols: u32,
}

impl Q8Weight {
    /// The planes `q` (`rows × cols` int8) and `s` (`rows × cols / 32` f16) of a matrix.
    pub fn new(q: wgpu::Buffer, s: wgpu::Buffer, rows: u32, cols: u32) -> Q8Weight {
        Q8Weight { q, s, rows, cols }
    }

    pub fn m(&self) -> Q8Matrix<'_> {
        Q8Matrix { q: View::from(&self.q), scales: View::from(&self.s), rows: self.rows, cols: self.cols }
    }

    /// Rows `first..first + rows` of the matrix, each plane's view starting at the first's bytes.
    pub fn m_rows(&self, first: u32, rows: u32) -> Q8Matrix<'_> {
        let at = u64::from(first) * u64::from(self.cols);
        Q8Matrix { q: View::at(&self.q, at), scales: View::at(&self.s, at / 16), rows, cols: self.cols }
    }
}

/// The token embedding in the mapped dense files (`dense.bin`, or the GGUF): Q8_0 planes, or rows of blocks
/// of any type the gguf crate dequantises.
#[derive(Debug)]
pub(crate) struct HostEmbedding {
    map: DenseMap,
    data: EmbeddingData,
    cols: usize,
    rows: u32,
}

/// Where the embedding's rows lie in the mapped files.
#[derive(Debug)]
enum EmbeddingData {
    /// The int8 plane `[rows, cols]` and the f16 scale plane `[rows, cols / 32]`.
    Q8(DenseData),
    /// The GGUF's rows of blocks of `ty`.
    Blocks { data: DenseData, ty: TensorType },
}

impl HostEmbedding {
    /// The rows of `ids`, dequantised exactly (Q8_0 as `embed_q8` does, `f32(q) · f32(scale)`; other types as
    /// ggml does): `[ids.len(), cols]`. Ids must be below the row count (the engine checks them first).
    pub fn rows(&self, ids: &[u32]) -> Vec<f32> {
        let (q, s) = match &self.data {
            EmbeddingData::Q8(planes) => self.map.planes(planes).expect("planes, checked at load"),
            EmbeddingData::Blocks { data, ty } => {
                let row_bytes = self.cols / ty.block_size() as usize * ty.block_bytes() as usize;
                let data = self.map.raw(data).expect("blocks, checked at load");
                let mut out = vec![0f32; ids.len() * self.cols];
                for (&id, row) in ids.iter().zip(out.chunks_exact_mut(self.cols)) {
                    debug_assert!(id < self.rows, "token {id} past the embedding");
                    diskformer_gguf::dequantize(*ty, &data[id as usize * row_bytes..][..row_bytes], row)
                        .expect("whole blocks, checked at load");
                }
                return out;
            }
        };
        let blocks = self.cols / 32;
        let mut out = Vec::with_capacity(ids.len() * self.cols);
        for &id in ids {
            debug_assert!(id < self.rows, "token {id} past the embedding");
            let (qr, sr) =
                (&q[id as usize * self.cols..][..self.cols], &s[id as usize * blocks * 2..][..blocks * 2]);
            for (block, scale) in qr.chunks(32).zip(sr.chunks(2)) {
                let d = half::f16::from_le_bytes([scale[0], scale[1]]).to_f32();
                out.extend(block.iter().map(|&b| f32::from(b as i8) * d));
            }
        }
        out
    }
}

/// One transformer block's dense tensors.
#[derive(Debug)]
pub(crate) struct LayerWeights {
    pub attn_norm: wgpu::Buffer,
    /// Q, K and V stacked in one matrix (their rows in that order): one GEMV (decode) or GEMM (chunks) for
    /// the three, whose output `qkv_rope_store` reads per head.
    pub wqkv: DenseWeight,
    pub wo: DenseWeight,
    pub q_norm: wgpu::Buffer,
    pub k_norm: wgpu::Buffer,
    pub ffn_norm: wgpu::Buffer,
    /// `[experts, hidden]` f32.
    pub router: wgpu::Buffer,
}

/// Every dense tensor of the model on the GPU. The token embedding stays in the mapped dense file (a step
/// needs one row a token; on the GPU its 0.3 GB would be ~60 expert slots fewer at Qwen3-30B-A3B's size),
/// and goes to the GPU as well only when every expert is resident anyway: the GPU then embeds the token it
/// picked itself, so a greedy step can be queued before the host has read the pick. A model that ties its
/// lm head to the embedding uploads it in any case, as the head.
#[derive(Debug)]
pub(crate) struct Weights {
    pub embedding: HostEmbedding,
    /// The embedding on the GPU (the head's buffers when tied), when uploaded.
    pub gpu_embedding: Option<Q8Weight>,
    /// The lm head: `output.weight`, or the embedding when the model ties them.
    pub head: DenseWeight,
    pub out_norm: wgpu::Buffer,
    pub layers: Vec<LayerWeights>,
    /// Bytes uploaded.
    pub bytes: u64,
}

impl Weights {
    /// Whether every layer's output projection is one matrix (the fused decode layer adds it onto the
    /// residual stream in one dispatch).
    pub fn wo_whole(&self) -> bool {
        self.layers.iter().all(|l| !matches!(&l.wo, DenseWeight::Blocks(pieces) if pieces.len() != 1))
    }

    /// Bytes the dense weights of `store` take on the GPU: every dense tensor but the token embedding,
    /// unless `with_embedding` or the model has no `output.weight` (the embedding is then the head).
    pub fn device_bytes(store: &Store, with_embedding: bool) -> u64 {
        let tied = store.layout().dense_tensor("output.weight").is_none();
        store
            .layout()
            .dense
            .iter()
            .filter(|t| tied || with_embedding || t.name != "token_embd.weight")
            .map(|t| t.data.parts().iter().map(|r| r.len.next_multiple_of(4)).sum::<u64>())
            .sum()
    }

    /// Uploads the dense tensors of `store` (the embedding too with `with_embedding`), calling
    /// `progress(done, total)` in bytes.
    pub fn upload(
        store: &Store,
        config: &Config,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        with_embedding: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Weights> {
        let map = store.map_dense()?;
        // A flipped byte in a tensor is found here, before it is uploaded or embedded from.
        store.check_dense(&map)?;
        let total = Self::device_bytes(store, with_embedding);
        let mut up = Uploader { store, device, queue, map: &map, done: 0, total, progress };
        let (h, v) = (config.embedding_length, up.vocab()?);
        let (q, kv) = (config.head_count * config.key_length, config.head_count_kv * config.key_length);
        let data = up.embedding(v, h)?;
        let tied = store.layout().dense_tensor("output.weight").is_none();
        let head = up.dense(if tied { "token_embd.weight" } else { "output.weight" }, v, h)?;
        // Only a Q8_0 embedding goes to the GPU (`embed_q8`); the host embeds tokens of any other type.
        let gpu_embedding = match (with_embedding, tied, &head, &data) {
            (false, ..) | (_, _, _, EmbeddingData::Blocks { .. }) => None,
            (true, true, DenseWeight::Q8(head), _) => Some(head.clone()),
            (true, ..) => Some(up.q8("token_embd.weight", v, h)?),
        };
        let out_norm = up.f32s("output_norm.weight", &[h])?;
        let mut layers = Vec::with_capacity(config.block_count as usize);
        for l in 0..config.block_count {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            let wqkv = up.stacked([(&n("attn_q"), q), (&n("attn_k"), kv), (&n("attn_v"), kv)], h)?;
            layers.push(LayerWeights {
                attn_norm: up.f32s(&n("attn_norm"), &[h])?,
                wqkv,
                wo: up.dense(&n("attn_output"), h, q)?,
                q_norm: up.f32s(&n("attn_q_norm"), &[config.key_length])?,
                k_norm: up.f32s(&n("attn_k_norm"), &[config.key_length])?,
                ffn_norm: up.f32s(&n("ffn_norm"), &[h])?,
                router: up.f32s(&n("ffn_gate_inp"), &[h, config.expert_count])?,
            });
            queue.submit([]);
        }
        queue.submit([]);
        let bytes = up.done;
        let embedding = HostEmbedding { map, data, cols: h as usize, rows: v };
        Ok(Weights { embedding, gpu_embedding, head, out_norm, layers, bytes })
    }
}

struct Uploader<'a> {
    store: &'a Store,
    device: &'a wgpu::Device,
    queue: &'a wgpu::Queue,
    map: &'a DenseMap,
    done: u64,
    total: u64,
    progress: &'a mut dyn FnMut(u64, u64),
}

impl<'a> Uploader<'a> {
    fn tensor(&self, name: &str) -> Result<&DenseTensor> {
        self.store.layout().dense_tensor(name).ok_or_else(|| Error::BadTensor {
            name: name.into(),
            what: "missing from the model (is it a complete qwen3moe GGUF?)".into(),
        })
    }

    fn vocab(&self) -> Result<u32> {
        let t = self.tensor("token_embd.weight")?;
        let rows = t.dims.get(1).copied().unwrap_or(0);
        u32::try_from(rows).map_err(|_| Error::BadTensor {
            name: t.name.clone(),
            what: format!("{rows} vocabulary rows do not fit in 32 bits"),
        })
    }

    fn buffer(&mut self, name: &str, bytes: &[u8]) -> wgpu::Buffer {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(name),
            size: (bytes.len() as u64).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let whole = bytes.len() / 4 * 4;
        self.queue.write_buffer(&buffer, 0, &bytes[..whole]);
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(&buffer, whole as u64, &tail);
        }
        self.done += buffer.size();
        (self.progress)(self.done, self.total);
        buffer
    }

    /// The quant and scale plane bytes of a Q8_0 tensor of `rows × cols`.
    fn q8_planes(&self, name: &str, rows: u32, cols: u32) -> Result<(&'a [u8], &'a [u8])> {
        let t = self.tensor(name)?;
        let want = [u64::from(cols), u64::from(rows)];
        let map: &'a DenseMap = self.map;
        match map.planes(&t.data) {
            Some(planes) if t.dims == want => Ok(planes),
            _ => Err(Error::BadTensor {
                name: name.into(),
                what: format!("is {} {:?}; the engine needs q8_0 {want:?}", t.ty, t.dims),
            }),
        }
    }

    /// Where the embedding's rows lie in the mapped file: Q8_0 planes, or blocks of a type the gguf crate
    /// dequantises.
    fn embedding(&self, rows: u32, cols: u32) -> Result<EmbeddingData> {
        let name = "token_embd.weight";
        let t = self.tensor(name)?;
        match (&t.data, TensorType::from_name(&t.ty)) {
            (DenseData::Planes { .. }, _) if t.dims == [u64::from(cols), u64::from(rows)] => {
                Ok(EmbeddingData::Q8(t.data))
            }
            (DenseData::Raw { .. } | DenseData::InGguf { .. }, Some(ty))
                if t.dims == [u64::from(cols), u64::from(rows)]
                    && ty.dequantizable()
                    && u64::from(cols).is_multiple_of(ty.block_size()) =>
            {
                Ok(EmbeddingData::Blocks { data: t.data, ty })
            }
            _ => Err(Error::BadTensor {
                name: name.into(),
                what: format!("is {} {:?}; the engine needs [{cols}, {rows}] of whole blocks", t.ty, t.dims),
            }),
        }
    }

    /// A dense matrix of `rows × cols`: Q8_0 planes, or the blocks of a K-quant the GEMVs read.
    fn dense(&mut self, name: &str, rows: u32, cols: u32) -> Result<DenseWeight> {
        let t = self.tensor(name)?;
        match &t.data {
            DenseData::Planes { .. } => Ok(DenseWeight::Q8(self.q8(name, rows, cols)?)),
            DenseData::Raw { .. } | DenseData::InGguf { .. } => {
                Ok(DenseWeight::Blocks(vec![self.blocks(name, rows, cols)?]))
            }
        }
    }

    /// The GGUF blocks of a K-quant matrix of `rows × cols`.
    fn blocks(&mut self, name: &str, rows: u32, cols: u32) -> Result<BlockWeight> {
        self.blocks_stacked(&[(name, rows)], cols)
    }

    /// The GGUF blocks of K-quant matrices of one type and `cols` columns, their rows stacked in order.
    fn blocks_stacked(&mut self, parts: &[(&str, u32)], cols: u32) -> Result<BlockWeight> {
        let mut bytes = Vec::new();
        let mut quant = None;
        for &(name, rows) in parts {
            let (data, q) = self.block_bytes(name, rows, cols)?;
            bytes.extend_from_slice(data);
            quant = Some(q);
        }
        let quant = quant.expect("at least one part");
        let rows = parts.iter().map(|p| p.1).sum();
        Ok(BlockWeight { data: self.buffer(parts[0].0, &bytes), quant, rows, cols })
    }

    /// The bytes and type of a K-quant matrix of `rows × cols`.
    fn block_bytes(&self, name: &str, rows: u32, cols: u32) -> Result<(&'a [u8], BlockQuant)> {
        let t = self.tensor(name)?;
        let want = [u64::from(cols), u64::from(rows)];
        let map: &'a DenseMap = self.map;
        match (map.raw(&t.data), BlockQuant::from_name(&t.ty)) {
            (Some(bytes), Some(quant)) if t.dims == want && cols.is_multiple_of(256) => Ok((bytes, quant)),
            _ => Err(Error::BadTensor {
                name: name.into(),
                what: format!(
                    "is {} {:?}; the engine's GPU kernels multiply {BLOCK_TYPES} matrices of {want:?}",
                    t.ty, t.dims
                ),
            }),
        }
    }

    /// q, k and v stacked: Q8_0 planes concatenated when all three are Q8_0, else three pieces of blocks.
    fn stacked(&mut self, parts: [(&str, u32); 3], cols: u32) -> Result<DenseWeight> {
        let planar = parts.iter().map(|&(name, _)| self.tensor(name)).collect::<Result<Vec<_>>>()?;
        if planar.iter().all(|t| matches!(t.data, DenseData::Planes { .. })) {
            return Ok(DenseWeight::Q8(self.q8_stacked(parts, cols)?));
        }
        // Runs of one type are concatenated (their rows stack): one GEMV a run.
        let types: Vec<String> = planar.iter().map(|t| t.ty.clone()).collect();
        let mut pieces = Vec::with_capacity(3);
        let mut start = 0;
        for end in 1..=parts.len() {
            if end == parts.len() || types[end] != types[start] {
                pieces.push(self.blocks_stacked(&parts[start..end], cols)?);
                start = end;
            }
        }
        Ok(DenseWeight::Blocks(pieces))
    }

    fn q8(&mut self, name: &str, rows: u32, cols: u32) -> Result<Q8Weight> {
        let (q, s) = self.q8_planes(name, rows, cols)?;
        let (q, s) = (self.buffer(name, q), self.buffer(name, s));
        Ok(Q8Weight { q, s, rows, cols })
    }

    /// Three matrices of `cols` columns stacked into one (the first's rows, then the second's, …): the
    /// quant planes concatenated, and the scale planes.
    fn q8_stacked(&mut self, parts: [(&str, u32); 3], cols: u32) -> Result<Q8Weight> {
        let planes: Vec<(&'a [u8], &'a [u8])> =
            parts.iter().map(|&(name, rows)| self.q8_planes(name, rows, cols)).collect::<Result<_>>()?;
        let concat = |i: usize| {
            planes.iter().flat_map(|p| if i == 0 { p.0 } else { p.1 }).copied().collect::<Vec<u8>>()
        };
        let (q, s) = (self.buffer(parts[0].0, &concat(0)), self.buffer(parts[0].0, &concat(1)));
        let rows = parts.iter().map(|p| p.1).sum();
        Ok(Q8Weight { q, s, rows, cols })
    }

    fn f32s(&mut self, name: &str, dims: &[u32]) -> Result<wgpu::Buffer> {
        let t = self.tensor(name)?;
        let want: Vec<u64> = dims.iter().map(|&d| u64::from(d)).collect();
        let map: &'a DenseMap = self.map;
        match map.raw(&t.data) {
            Some(bytes) if t.ty == "f32" && t.dims == want => Ok(self.buffer(name, bytes)),
            _ => Err(Error::BadTensor {
                name: name.into(),
                what: format!("is {} {:?}; the engine needs f32 {want:?}", t.ty, t.dims),
            }),
        }
    }
}

/// The types the GPU kernels multiply, for errors.
pub(crate) const BLOCK_TYPES: &str = "q8_0 and (in rows of whole 256-value runs) q2_K to q6_K, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, f16, bf16 and f32";

/// Checks that every dense matrix of `layout` is of a type the GPU kernels multiply (Q8_0 planes, or blocks
/// of a [`BlockQuant`] in rows of whole 256-value runs): what [`Weights::upload`] would find, before
/// anything is copied or uploaded.
///
/// # Errors
/// [`Error::BadTensor`] naming the first matrix of another type or row length.
pub(crate) fn check_dense_types(layout: &diskformer_store::Layout) -> Result<()> {
    let tied = layout.dense_tensor("output.weight").is_none();
    let matrix = |name: &str| {
        ["attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"].iter().any(|m| {
            name.strip_prefix("blk.").and_then(|rest| rest.split_once('.')).is_some_and(|(_, n)| n == *m)
        }) || name == "output.weight"
            || (tied && name == "token_embd.weight")
    };
    for t in layout.dense.iter().filter(|t| matrix(&t.name) && !matches!(t.data, DenseData::Planes { .. })) {
        let what = if BlockQuant::from_name(&t.ty).is_none() {
            format!("is {}; the engine's GPU kernels multiply {BLOCK_TYPES} matrices", t.ty)
        } else if !t.dims[0].is_multiple_of(256) {
            format!(
                "is {} in rows of {} values; the GPU block kernels read rows of whole 256-value runs",
                t.ty, t.dims[0]
            )
        } else {
            continue;
        };
        return Err(Error::BadTensor { name: t.name.clone(), what });
    }
    Ok(())
}

/// The size [`storage`] gives a buffer asked for `bytes`: whole words, at least one.
pub(crate) fn storage_size(bytes: u64) -> u64 {
    bytes.max(4).next_multiple_of(4)
}

/// A storage buffer of `bytes` (rounded up to whole words), for scratch and caches.
pub(crate) fn storage(
    device: &wgpu::Device,
    label: &str,
    bytes: u64,
    extra: wgpu::BufferUsages,
) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: storage_size(bytes),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | extra,
        mapped_at_creation: false,
    })
}
