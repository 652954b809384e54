//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong planning, ingesting, opening, verifying or reading a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file of the store or the source could not be opened, read or written.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The disk filled while the store was written.
    #[error(
        "the disk holding {path} is full: free some space and run the ingest again (it resumes from its last \
         checkpoint)"
    )]
    DiskFull {
        /// The file being written.
        path: PathBuf,
    },
    /// The store's directory cannot be written.
    #[error("{path} is on a read-only file system: give a store directory that can be written")]
    ReadOnly {
        /// The file or directory.
        path: PathBuf,
    },
    /// The source GGUF (or the store's header.bin) is not a valid GGUF.
    #[error("{path}: {source}")]
    Gguf {
        /// The file parsed.
        path: PathBuf,
        /// What the GGUF reader found.
        source: diskformer_gguf::Error,
    },
    /// The source file is shorter than its header says.
    #[error(
        "{path} is truncated: its tensors need {needed} bytes but the file has {size}; download it again"
    )]
    SourceTruncated {
        /// The source.
        path: PathBuf,
        /// Bytes the header says the file has at least.
        needed: u64,
        /// The file's size.
        size: u64,
    },
    /// A GGUF a store reads its experts from is gone or changed since ingest.
    #[error(
        "{path}, which this store reads its experts from, {what}: ingest the GGUF again (or ingest it with \
         its experts copied, so the store stands alone)"
    )]
    SourceChanged {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
    /// A later shard of a gguf-split set: a set is opened from its first shard.
    #[error(
        "{path} is shard {} of a gguf-split set of {count}; open the set's first shard (its name ends in \
         -00001-of-{count:05}.gguf), with every shard beside it",
        u32::from(*no) + 1
    )]
    SplitShard {
        /// The shard given.
        path: PathBuf,
        /// Its `split.no` (0-based).
        no: u16,
        /// The set's `split.count`.
        count: u16,
    },
    /// The GGUF header claims to be larger than any real one.
    #[error("{path}: its header claims at least {needed} bytes (more than {max}); the file is corrupt")]
    HeaderTooLarge {
        /// The source.
        path: PathBuf,
        /// Bytes the header claims.
        needed: u64,
        /// The limit.
        max: u64,
    },
    /// An expert tensor of a type the store cannot hold.
    #[error(
        "expert tensor {name:?} is {ty}; the store holds experts of the types diskformer-gguf dequantises \
         (Q2_K-Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, F16, BF16, F32)"
    )]
    UnsupportedExpertType {
        /// The tensor.
        name: String,
        /// Its type.
        ty: String,
    },
    /// A dense tensor of a type the store cannot hold.
    #[error(
        "dense tensor {name:?} is {ty}; the store holds dense tensors of the types diskformer-gguf dequantises \
         (Q2_K-Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, F16, BF16, F32)"
    )]
    UnsupportedDenseType {
        /// The tensor.
        name: String,
        /// Its type.
        ty: String,
    },
    /// The expert tensors are incomplete or disagree in shape.
    #[error("expert tensors are inconsistent: {what}")]
    BadExpertTensors {
        /// What is wrong.
        what: String,
    },
    /// A repair was given another GGUF than the store was made from.
    #[error("{path} is not the GGUF the store was made from ({what}); repair it from that file")]
    NotTheSource {
        /// The file given.
        path: PathBuf,
        /// What differs.
        what: String,
    },
    /// The source does not match the size or sha256 it was pinned to.
    #[error("source {path} does not match its pin: {what}; check you have the right file")]
    PinMismatch {
        /// The source.
        path: PathBuf,
        /// Which property differs and how.
        what: String,
    },
    /// Not enough free disk space for the store.
    #[error("not enough disk space in {dir}: the store needs {needed} more bytes, {available} are free")]
    InsufficientSpace {
        /// The store directory.
        dir: PathBuf,
        /// Bytes still to be allocated.
        needed: u64,
        /// Bytes free.
        available: u64,
    },
    /// There is no manifest: the directory is not a store.
    #[error("{dir} is not a store (no manifest.json); create it with `ingest MODEL.gguf --store {dir}`")]
    NotAStore {
        /// The directory.
        dir: PathBuf,
    },
    /// The manifest is unreadable or of another format or version.
    #[error("{path}: {what}; re-ingest the model into a fresh store")]
    BadManifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A reader probe was asked for impossible counts.
    #[error("bad reader probe: {what}")]
    BadProbe {
        /// What is wrong.
        what: String,
    },
    /// The store's ingest never finished.
    #[error(
        "the store in {dir} is incomplete (its ingest was interrupted); run the ingest again to resume it"
    )]
    Incomplete {
        /// The directory.
        dir: PathBuf,
    },
    /// A store file is shorter or longer than the layout says.
    #[error("{path} is {size} bytes, the layout needs {expected}; the store is damaged, re-ingest it")]
    WrongFileSize {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The size the layout gives.
        expected: u64,
    },
    /// A record or tensor does not match its checksum.
    #[error(
        "{what} does not match its checksum; the store is damaged: `ingest GGUF --repair STORE` rewrites what is \
         damaged from the GGUF it was made from (or ingest it again)"
    )]
    ChecksumMismatch {
        /// The record (`expert record (layer 3, expert 17)`) or tensor (`dense tensor "output.weight"`).
        what: String,
    },
    /// An expert record read twice (the second time past the page cache where it can be) did not match its
    /// checksum either time.
    #[error(
        "expert record (layer {layer}, expert {expert}) read from {file} does not match its checksum, read twice; {what}"
    )]
    DamagedRecord {
        /// Layer.
        layer: u32,
        /// Expert.
        expert: u32,
        /// The file it was read from (the first of its parts' files in a GGUF).
        file: PathBuf,
        /// What to do.
        what: &'static str,
    },
    /// A record read returned fewer bytes than the record has.
    #[error(
        "reading expert record (layer {layer}, expert {expert}) returned {got} of {expected} bytes; the store file is truncated"
    )]
    ShortRead {
        /// Layer.
        layer: u32,
        /// Expert.
        expert: u32,
        /// Bytes read.
        got: u64,
        /// Bytes expected.
        expected: u64,
    },
    /// A record that does not exist was asked for.
    #[error(
        "no expert record (layer {layer}, expert {expert}): the store has {n_layers} layers of {n_experts} experts"
    )]
    NoSuchRecord {
        /// Layer asked for.
        layer: u32,
        /// Expert asked for.
        expert: u32,
        /// Layers in the store.
        n_layers: u32,
        /// Experts per layer.
        n_experts: u32,
    },
    /// A buffer handed to the reader is too small or misaligned.
    #[error(
        "record buffer of {len} bytes at alignment {align} cannot take a {needed}-byte record (O_DIRECT needs {needed_align}-byte alignment)"
    )]
    BadBuffer {
        /// Buffer length.
        len: usize,
        /// Its address alignment.
        align: usize,
        /// Record size.
        needed: u64,
        /// Alignment needed.
        needed_align: usize,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| match source.raw_os_error() {
            Some(libc::ENOSPC) => Error::DiskFull { path },
            Some(libc::EROFS) => Error::ReadOnly { path },
            _ => Error::Io { path, source },
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
