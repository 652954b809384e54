#![doc = include_str!("../README.md")]

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
