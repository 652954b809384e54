//! The store layout, planned from a GGUF header alone so ingest and load always agree.
//!
//! `experts.bin` holds one fixed-size record per (layer, expert) at `(layer · n_experts + expert) · record`.
//! A model whose experts are all Q8_0 (or all Q4_0) has records of planes: the gate‖up quant plane (gate
//! rows, then up rows), the gate‖up f16 scales, the down quant plane, the down scales. Any other mix of types
//! (a K-quant file: Q4_K gate and up, Q6_K down on some layers) has records of blocks as the GGUF holds
//! them, gate, up and down each of its own type, which may change from layer to layer ([`RecordBlocks`]);
//! the record is sized for the largest layer. Every region is 256-byte aligned and the record a multiple of
//! 4096 bytes (so O_DIRECT can read it). `dense.bin` holds every other tensor: Q8_0 as a quant plane and a
//! scale plane, every other type as its GGUF bytes, every region 256-byte aligned.

use diskformer_gguf::{Header, TensorInfo, TensorType};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Alignment of every region inside `dense.bin` and inside a record.
pub const REGION_ALIGN: u64 = 256;
/// Records are padded to a multiple of this, the O_DIRECT granularity.
pub const RECORD_ALIGN: u64 = 4096;

/// A byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// Start.
    pub offset: u64,
    /// Length.
    pub len: u64,
}

impl Region {
    /// One past the end.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }

    fn split_at(&self, at: u64) -> (Region, Region) {
        (Region { offset: self.offset, len: at }, Region { offset: self.offset + at, len: self.len - at })
    }
}

/// Identifies one expert record: the unit the store keeps and the expert pool caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExpertKey {
    /// Layer (`blk.N`).
    pub layer: u32,
    /// Expert index within the layer, `0..expert_count`.
    pub expert: u32,
}

impl ExpertKey {
    /// The key of `expert` in `layer`.
    pub const fn new(layer: u32, expert: u32) -> Self {
        Self { layer, expert }
    }
}

impl std::fmt::Display for ExpertKey {
    /// `L3 E17`: layer 3, expert 17.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "L{} E{}", self.layer, self.expert)
    }
}

/// Records of GGUF blocks: gate's blocks at the start of [`ExpertLayout::gate_up_quants`], up's `up_at`
/// bytes into it, down's at the start of [`ExpertLayout::down_quants`] (the scale regions are empty), each
/// part of the type its layer's tensor has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBlocks {
    /// Per layer, the ggml type names of gate, up and down (`"q4_K"`, `"q6_K"`, …).
    pub types: Vec<[String; 3]>,
    /// Where up's blocks start in `gate_up_quants`: the largest gate over the layers, 256-byte aligned.
    pub up_at: u64,
}

/// Where the planes of one expert sit inside its record, and the record's size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertLayout {
    /// Quant type of gate, up and down: `"q8_0"` or `"q4_0"` (planes), or `"blocks"` ([`RecordBlocks`]).
    pub quant_type: String,
    /// Layers with experts (`blk.0` … `blk.{n_layers-1}`).
    pub n_layers: u32,
    /// Experts per layer.
    pub n_experts: u32,
    /// Model width: gate/up row length and down rows.
    pub hidden: u64,
    /// Expert FFN width: gate/up rows and down row length.
    pub ffn: u64,
    /// Bytes per record.
    pub record_bytes: u64,
    /// Gate rows then up rows, `[2·ffn, hidden]` quants.
    pub gate_up_quants: Region,
    /// `[2·ffn, hidden/32]` f16 scales.
    pub gate_up_scales: Region,
    /// `[hidden, ffn]` quants.
    pub down_quants: Region,
    /// `[hidden, ffn/32]` f16 scales.
    pub down_scales: Region,
    /// Records of blocks: each layer's part types (`None` for planes).
    pub blocks: Option<RecordBlocks>,
}

/// The quant type of records of blocks ([`ExpertLayout::quant_type`]).
pub const BLOCKS: &str = "blocks";

impl ExpertLayout {
    /// The record's offset in `experts.bin`.
    pub fn record_offset(&self, key: ExpertKey) -> u64 {
        (u64::from(key.layer) * u64::from(self.n_experts) + u64::from(key.expert)) * self.record_bytes
    }

    /// Total size of `experts.bin`.
    pub fn file_bytes(&self) -> u64 {
        u64::from(self.n_layers) * u64::from(self.n_experts) * self.record_bytes
    }

    /// Number of records.
    pub fn n_records(&self) -> usize {
        self.n_layers as usize * self.n_experts as usize
    }

    /// The key of record number `index` (record order).
    pub fn key(&self, index: usize) -> ExpertKey {
        ExpertKey {
            layer: (index / self.n_experts as usize) as u32,
            expert: (index % self.n_experts as usize) as u32,
        }
    }

    /// The checksum parts of a record of `layer`, in the order their hashes are combined: gate quants, up
    /// quants, gate scales, up scales, down quants, down scales (record-relative; for records of blocks
    /// the layer's gate, up and down blocks, and three empty regions).
    pub fn record_parts(&self, layer: u32) -> [Region; 6] {
        if self.blocks.is_some() {
            let part = |p| self.part(layer, p).map_or(Region { offset: 0, len: 0 }, |(_, r)| r);
            let empty = Region { offset: self.gate_up_scales.offset, len: 0 };
            return [
                part(ExpertPart::Gate),
                part(ExpertPart::Up),
                empty,
                empty,
                part(ExpertPart::Down),
                empty,
            ];
        }
        let (gate_q, up_q) = self.gate_up_quants.split_at(self.gate_up_quants.len / 2);
        let (gate_s, up_s) = self.gate_up_scales.split_at(self.gate_up_scales.len / 2);
        [gate_q, up_q, gate_s, up_s, self.down_quants, self.down_scales]
    }

    /// Records of blocks: the type of `part` in `layer` and where its blocks lie in a record; `None` for
    /// records of planes or a layer past the last.
    pub fn part(&self, layer: u32, part: ExpertPart) -> Option<(TensorType, Region)> {
        let blocks = self.blocks.as_ref()?;
        let types = blocks.types.get(layer as usize)?;
        let ty = TensorType::from_name(&types[part as usize])?;
        let (rows, cols) = match part {
            ExpertPart::Gate | ExpertPart::Up => (self.ffn, self.hidden),
            ExpertPart::Down => (self.hidden, self.ffn),
        };
        let offset = match part {
            ExpertPart::Gate => self.gate_up_quants.offset,
            ExpertPart::Up => self.gate_up_quants.offset + blocks.up_at,
            ExpertPart::Down => self.down_quants.offset,
        };
        Some((ty, Region { offset, len: matrix_bytes(ty, rows, cols) }))
    }

    /// The type of every layer's gate, up and down, in order ([`ExpertLayout::part`]'s; `None` for records
    /// of planes).
    pub fn part_types(&self) -> impl Iterator<Item = Option<TensorType>> + '_ {
        (0..self.n_layers)
            .flat_map(move |l| ExpertPart::ALL.into_iter().map(move |p| self.part(l, p).map(|(ty, _)| ty)))
    }
}

/// How a dense tensor is stored in `dense.bin` (or, in place, in the GGUF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenseData {
    /// Bytes as in the GGUF (F32, F16, BF16).
    Raw {
        /// Where.
        data: Region,
    },
    /// Q8_0 split into a quant plane and an f16 scale plane.
    Planes {
        /// `[rows, cols]` int8.
        quants: Region,
        /// `[rows, cols/32]` f16.
        scales: Region,
    },
    /// Bytes as in the GGUF, read from it in place (a store that keeps its experts in the GGUF keeps these
    /// there too): file `file` of the source's ([`crate::ExpertsInGguf::files`]), at `data` in it.
    InGguf {
        /// Which file of a gguf-split set (0 for a single file).
        file: usize,
        /// Where in that file.
        data: Region,
    },
}

impl DenseData {
    /// The checksum parts, in the order their hashes are combined (those of `InGguf` are in the GGUF).
    pub fn parts(&self) -> Vec<Region> {
        match self {
            DenseData::Raw { data } | DenseData::InGguf { data, .. } => vec![*data],
            DenseData::Planes { quants, scales } => vec![*quants, *scales],
        }
    }
}

/// One dense tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenseTensor {
    /// GGUF name.
    pub name: String,
    /// GGUF type name (`"q8_0"`, `"f32"`).
    pub ty: String,
    /// ggml dims.
    pub dims: Vec<u64>,
    /// Where it is in `dense.bin`.
    pub data: DenseData,
}

/// The whole layout of a store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Bytes of `header.bin` (the GGUF up to its data section).
    pub header_bytes: u64,
    /// The experts, if the model has any.
    pub experts: Option<ExpertLayout>,
    /// Dense tensors in GGUF order.
    pub dense: Vec<DenseTensor>,
    /// Size of `dense.bin`.
    pub dense_bytes: u64,
}

/// Which of gate, up and down an expert tensor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertPart {
    /// `ffn_gate_exps`: `[ffn, hidden]` an expert.
    Gate,
    /// `ffn_up_exps`: `[ffn, hidden]` an expert.
    Up,
    /// `ffn_down_exps`: `[hidden, ffn]` an expert.
    Down,
}

impl ExpertPart {
    /// The three, in record order.
    pub const ALL: [ExpertPart; 3] = [ExpertPart::Gate, ExpertPart::Up, ExpertPart::Down];

    /// The GGUF tensor name's part (`gate`, `up`, `down`).
    pub const fn name(self) -> &'static str {
        match self {
            ExpertPart::Gate => "gate",
            ExpertPart::Up => "up",
            ExpertPart::Down => "down",
        }
    }
}

/// Bytes of a `[rows, cols]` matrix of `ty` (`cols` whole blocks).
fn matrix_bytes(ty: TensorType, rows: u64, cols: u64) -> u64 {
    rows * cols / ty.block_size() * ty.block_bytes()
}

/// `blk.{layer}.ffn_{gate,up,down}_exps.weight` → (layer, part).
pub(crate) fn expert_tensor(name: &str) -> Option<(u32, ExpertPart)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let part = match rest {
        "ffn_gate_exps.weight" => ExpertPart::Gate,
        "ffn_up_exps.weight" => ExpertPart::Up,
        "ffn_down_exps.weight" => ExpertPart::Down,
        _ => return None,
    };
    Some((layer.parse().ok()?, part))
}

fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Bytes of quants for `n` values of a planar type.
fn quant_bytes(ty: TensorType, n: u64) -> u64 {
    if ty == TensorType::Q4_0 { n / 2 } else { n }
}

impl Layout {
    /// Plans the store for the GGUF whose header this is.
    ///
    /// # Errors
    /// [`Error::UnsupportedExpertType`], [`Error::UnsupportedDenseType`] or [`Error::BadExpertTensors`].
    pub fn plan(header: &Header) -> Result<Layout> {
        let experts = plan_experts(header)?;
        let planar = planar_architecture(header);
        let mut dense = Vec::new();
        let mut end = 0u64;
        let mut place = |len: u64| {
            let r = Region { offset: align(end, REGION_ALIGN), len };
            end = r.end();
            r
        };
        for t in header.tensors.iter().filter(|t| expert_tensor(&t.name).is_none()) {
            let data = match t.ty {
                TensorType::Q8_0 if planar => {
                    let blocks = t.n_elements / 32;
                    DenseData::Planes { quants: place(blocks * 32), scales: place(blocks * 2) }
                }
                ty if ty.dequantizable() => DenseData::Raw { data: place(t.n_bytes) },
                other => {
                    return Err(Error::UnsupportedDenseType {
                        name: t.name.clone(),
                        ty: other.name().to_owned(),
                    });
                }
            };
            dense.push(DenseTensor {
                name: t.name.clone(),
                ty: t.ty.name().to_owned(),
                dims: t.dims.clone(),
                data,
            });
        }
        Ok(Layout { header_bytes: header.data_offset, experts, dense, dense_bytes: align(end, REGION_ALIGN) })
    }

    /// Keeps every raw dense tensor in the GGUF: `at(i)` is where dense tensor `i`'s bytes lie there (file,
    /// offset; asked only of the raw ones); `dense.bin` then holds the Q8_0 planes alone, placed again one
    /// after another.
    pub fn dense_in_gguf(&mut self, mut at: impl FnMut(usize) -> (usize, u64)) {
        let mut end = 0u64;
        let mut place = |len: u64| {
            let r = Region { offset: align(end, REGION_ALIGN), len };
            end = r.end();
            r
        };
        for (i, t) in self.dense.iter_mut().enumerate() {
            t.data = match t.data {
                DenseData::Raw { data } => {
                    let (file, offset) = at(i);
                    DenseData::InGguf { file, data: Region { offset, len: data.len } }
                }
                DenseData::Planes { quants, scales } => {
                    DenseData::Planes { quants: place(quants.len), scales: place(scales.len) }
                }
                other => other,
            };
        }
        self.dense_bytes = align(end, REGION_ALIGN);
    }

    /// The dense tensor named `name`.
    pub fn dense_tensor(&self, name: &str) -> Option<&DenseTensor> {
        self.dense.iter().find(|t| t.name == name)
    }
}

/// The architecture whose Q8_0 dense tensors, and uniform Q8_0 or Q4_0 experts, the store splits into planes
/// of quants and scales.
pub const PLANAR_ARCHITECTURE: &str = "qwen3moe";

/// Whether `header`'s model is [`PLANAR_ARCHITECTURE`]'s: planes serve the qwen3moe engine's Q8_0 and Q4_0
/// kernels; every other architecture's kernels read the GGUF's blocks (which also lets its tensors stay in
/// the GGUF, read in place).
fn planar_architecture(header: &Header) -> bool {
    header.metadata.get_str("general.architecture").is_ok_and(|a| a == PLANAR_ARCHITECTURE)
}

fn plan_experts(header: &Header) -> Result<Option<ExpertLayout>> {
    let found: Vec<(u32, ExpertPart, &TensorInfo)> =
        header.tensors.iter().filter_map(|t| expert_tensor(&t.name).map(|(l, p)| (l, p, t))).collect();
    let Some(&(_, _, first)) = found.first() else { return Ok(None) };
    for &(_, _, t) in &found {
        if !t.ty.dequantizable() {
            return Err(Error::UnsupportedExpertType { name: t.name.clone(), ty: t.ty.name().to_owned() });
        }
    }
    let n_layers = found.iter().map(|&(l, ..)| l).max().unwrap_or(0) + 1;
    let bad = |what: String| Error::BadExpertTensors { what };
    // Shape from the first gate tensor: [hidden, ffn, experts]; up the same; down [ffn, hidden, experts].
    let gate0 = found
        .iter()
        .find(|f| f.1 == ExpertPart::Gate)
        .map(|f| f.2)
        .ok_or_else(|| bad("no ffn_gate_exps".into()))?;
    let [hidden, ffn, n_experts] = gate0.dims[..] else {
        return Err(bad(format!(
            "{} has dims {:?}, expected [hidden, ffn, experts]",
            gate0.name, gate0.dims
        )));
    };
    let mut types = Vec::with_capacity(n_layers as usize);
    for layer in 0..n_layers {
        let mut layer_types = [first.ty; 3];
        for (part, dims) in [
            (ExpertPart::Gate, [hidden, ffn, n_experts]),
            (ExpertPart::Up, [hidden, ffn, n_experts]),
            (ExpertPart::Down, [ffn, hidden, n_experts]),
        ] {
            let t = found
                .iter()
                .find(|f| f.0 == layer && f.1 == part)
                .ok_or_else(|| bad(format!("layer {layer} has no ffn_{}_exps tensor", part.name())))?;
            let t = t.2;
            if t.dims != dims {
                return Err(bad(format!("{} has dims {:?}, expected {dims:?}", t.name, t.dims)));
            }
            if !dims[0].is_multiple_of(t.ty.block_size()) {
                return Err(bad(format!(
                    "{} is {} with rows of {} values, not whole {}-value blocks",
                    t.name,
                    t.ty.name(),
                    dims[0],
                    t.ty.block_size()
                )));
            }
            layer_types[part as usize] = t.ty;
        }
        types.push(layer_types);
    }
    if ffn % 32 != 0 || hidden % 32 != 0 || n_experts > u64::from(u32::MAX) {
        return Err(bad(format!("hidden {hidden} and ffn {ffn} must be multiples of 32")));
    }
    let n_experts = n_experts as u32;
    let uniform = types.iter().flatten().all(|&t| t == first.ty);
    Ok(Some(match first.ty {
        TensorType::Q8_0 | TensorType::Q4_0 if uniform && planar_architecture(header) => {
            ExpertLayout::new(first.ty, n_layers, n_experts, hidden, ffn)
        }
        _ => ExpertLayout::with_blocks(&types, n_experts, hidden, ffn),
    }))
}

impl ExpertLayout {
    /// The record layout for `n_layers` × `n_experts` experts of type `ty` (Q8_0 or Q4_0), model width
    /// `hidden` and expert FFN width `ffn` (both multiples of 32): what [`Layout::plan`] gives for such a
    /// model, for callers that size pools or benches without a GGUF.
    pub fn new(ty: TensorType, n_layers: u32, n_experts: u32, hidden: u64, ffn: u64) -> ExpertLayout {
        let mut end = 0u64;
        let mut place = |len: u64| {
            let r = Region { offset: align(end, REGION_ALIGN), len };
            end = r.end();
            r
        };
        let gate_up_quants = place(quant_bytes(ty, 2 * ffn * hidden));
        let gate_up_scales = place(2 * ffn * (hidden / 32) * 2);
        let down_quants = place(quant_bytes(ty, hidden * ffn));
        let down_scales = place(hidden * (ffn / 32) * 2);
        ExpertLayout {
            quant_type: ty.name().to_owned(),
            n_layers,
            n_experts,
            hidden,
            ffn,
            record_bytes: align(end, RECORD_ALIGN),
            gate_up_quants,
            gate_up_scales,
            down_quants,
            down_scales,
            blocks: None,
        }
    }

    /// The layout of records of blocks ([`RecordBlocks`]) for layers whose gate, up and down types are
    /// `types` (each row whole blocks), `n_experts` a layer: each region sized for the layer where it is
    /// largest.
    pub fn with_blocks(types: &[[TensorType; 3]], n_experts: u32, hidden: u64, ffn: u64) -> ExpertLayout {
        let largest = |part: ExpertPart, rows: u64, cols: u64| {
            types.iter().map(|t| matrix_bytes(t[part as usize], rows, cols)).max().unwrap_or(0)
        };
        let up_at = align(largest(ExpertPart::Gate, ffn, hidden), REGION_ALIGN);
        let gate_up_quants = Region { offset: 0, len: up_at + largest(ExpertPart::Up, ffn, hidden) };
        let gate_up_scales = Region { offset: align(gate_up_quants.end(), REGION_ALIGN), len: 0 };
        let down_quants =
            Region { offset: gate_up_scales.offset, len: largest(ExpertPart::Down, hidden, ffn) };
        let down_scales = Region { offset: align(down_quants.end(), REGION_ALIGN), len: 0 };
        ExpertLayout {
            quant_type: BLOCKS.to_owned(),
            n_layers: types.len() as u32,
            n_experts,
            hidden,
            ffn,
            record_bytes: align(down_scales.offset, RECORD_ALIGN).max(RECORD_ALIGN),
            gate_up_quants,
            gate_up_scales,
            down_quants,
            down_scales,
            blocks: Some(RecordBlocks {
                types: types.iter().map(|t| t.map(|ty| ty.name().to_owned())).collect(),
                up_at,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_expert_tensors() {
        assert_eq!(expert_tensor("blk.12.ffn_up_exps.weight"), Some((12, ExpertPart::Up)));
        assert_eq!(expert_tensor("blk.1.ffn_up.weight"), None);
        assert_eq!(expert_tensor("blk.x.ffn_up_exps.weight"), None);
        assert_eq!(expert_tensor("output.weight"), None);
    }

    /// Uniform Q8_0 experts and Q8_0 dense tensors are split into planes for qwen3moe alone; another
    /// architecture's are the GGUF's blocks.
    #[test]
    fn planes_only_for_the_planar_architecture() {
        use diskformer_gguf::{GgufWriter, Value};
        let plan = |arch: &str| {
            let mut w = GgufWriter::new();
            w.add_metadata("general.architecture", Value::String(arch.into())).unwrap();
            for part in ["gate", "up", "down"] {
                let dims: &[u64] = if part == "down" { &[32, 64, 2] } else { &[64, 32, 2] };
                let n = dims.iter().product::<u64>();
                let zeros = vec![0u8; (n / 32 * 34) as usize];
                w.add_tensor(format!("blk.0.ffn_{part}_exps.weight"), TensorType::Q8_0, dims, zeros).unwrap();
            }
            w.add_tensor("output.weight", TensorType::Q8_0, &[64, 2], vec![0u8; 4 * 34]).unwrap();
            let header = Header::parse(&w.header_bytes().unwrap()).unwrap();
            let layout = Layout::plan(&header).unwrap();
            (
                layout.experts.unwrap().blocks.is_none(),
                matches!(layout.dense[0].data, DenseData::Planes { .. }),
            )
        };
        assert_eq!(plan(PLANAR_ARCHITECTURE), (true, true));
        assert_eq!(plan("qwen35moe"), (false, false));
    }
}
