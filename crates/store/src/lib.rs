//! The on-disk tier of diskformer: the expert store.
//!
//! - [`Layout::plan`] plans the store from a GGUF header alone (so ingest and load always agree): one
//!   fixed-size record per (layer, expert) in `experts.bin` holding the gate‖up and down quant and scale
//!   planes (Q8_0 or Q4_0 experts) or gate, up and down as GGUF blocks, each of its own type (any other mix,
//!   such as a K-quant file's), and every dense tensor in `dense.bin` (Q8_0 as planes, the others as the
//!   GGUF holds them), 256-byte aligned.
//! - [`ingest`] makes a store from a local GGUF (one file, or a gguf-split set read as its shards' concatenation
//!   and stored as its merge would be) in one sequential pass with bounded memory, checkpointing at least every
//!   GiB so an ingest killed at any moment resumes and ends byte-identical to a clean one; the manifest records
//!   the source's size, mtime and sha256 and a checksum per record and tensor. With
//!   [`IngestOptions::copy_experts`] off, records of blocks stay in the GGUF ([`ExpertsInGguf`]): the
//!   [`RecordReader`] reads each record's three slices from it and [`ExpertMap`] maps them, the dense
//!   tensors but the Q8_0 ones stay there too ([`DenseData::InGguf`]; [`DenseMap`] maps `dense.bin` and
//!   them), and the store refuses to open once the GGUF changed.
//! - [`Store::open`] refuses incomplete or foreign stores; [`Store::verify`] names the first bad record or
//!   tensor; [`RecordReader`] reads records with `pread`, O_DIRECT where supported, and
//!   [`RecordReader::probe_readers`] finds how many reader threads the disk serves fastest.
//!
//! It does not download models, run anything on a GPU, or know model architectures beyond the expert tensor
//! names `blk.N.ffn_{gate,up,down}_exps.weight`.
//!
//! ```
//! use diskformer_gguf::{GgufWriter, TensorType};
//! use diskformer_store::{ExpertKey, IngestOptions, RecordBuf, Store, ingest};
//!
//! let dir = std::env::temp_dir().join(format!("store-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! // A one-layer model with 2 experts, hidden 32, expert FFN 32 (Q8_0).
//! let mut w = GgufWriter::new();
//! let q8 = |n: usize| vec![1u8; n / 32 * 34];
//! w.add_tensor("blk.0.ffn_gate_exps.weight", TensorType::Q8_0, &[32, 32, 2], q8(2048))?;
//! w.add_tensor("blk.0.ffn_up_exps.weight", TensorType::Q8_0, &[32, 32, 2], q8(2048))?;
//! w.add_tensor("blk.0.ffn_down_exps.weight", TensorType::Q8_0, &[32, 32, 2], q8(2048))?;
//! w.add_tensor("output_norm.weight", TensorType::F32, &[32], vec![0u8; 128])?;
//! w.write_file(dir.join("model.gguf"))?;
//!
//! ingest(&dir.join("model.gguf"), &dir.join("store"), &IngestOptions::default(), &mut |_| {})?;
//! let store = Store::open(dir.join("store"))?;
//! store.verify()?;
//! let reader = store.record_reader(true)?;
//! let mut buf = RecordBuf::new(reader.layout().record_bytes as usize);
//! reader.read(ExpertKey { layer: 0, expert: 1 }, &mut buf)?;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod checksum;
mod dense_map;
mod error;
mod expert_map;
mod in_gguf;
mod ingest;
mod layout;
mod manifest;
mod probe;
mod record_checks;
mod repair;
mod source;
mod store;

pub use checksum::Sha256State;
pub use dense_map::DenseMap;
pub use error::{Error, Result};
pub use expert_map::{ExpertMap, RecordBytes};
pub use in_gguf::{ExpertsInGguf, GgufFileInfo, PartInFile};
pub use ingest::{
    DENSE_FILE, EXPERTS_FILE, HEADER_FILE, IngestOptions, IngestSummary, Pin, Progress, ingest,
};
pub use layout::{
    BLOCKS, DenseData, DenseTensor, ExpertKey, ExpertLayout, ExpertPart, Layout, RECORD_ALIGN, REGION_ALIGN,
    RecordBlocks, Region,
};
pub use manifest::{Checkpoint, FORMAT, FORMAT_VERSION, MANIFEST, Manifest, SourceInfo};
pub use probe::{ReaderProbe, ThreadsRate};
pub use record_checks::{RecordChecks, RecordHasher};
pub use repair::{RepairSummary, repair};
pub use store::{BUFFER_ALIGN, ReadActivity, RecordBuf, RecordReader, Store, part_bytes};
