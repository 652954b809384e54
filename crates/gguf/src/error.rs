//! The one error type of this crate.

use std::path::PathBuf;

use crate::TensorType;

/// Everything that can go wrong reading, writing or converting GGUF data.
///
/// Messages are lowercase and say what was wrong and, where it helps, what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened, mapped, read or written.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Writing a GGUF to a stream failed.
    #[error("writing gguf failed: {0}")]
    Write(#[source] std::io::Error),
    /// The first four bytes are not `GGUF`.
    #[error("not a gguf file: magic is {found:02x?}, expected \"GGUF\" (47 47 55 46)")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A GGUF version this reader does not handle (v1, big-endian files, future versions).
    #[error(
        "unsupported gguf version {version}: only v2 and v3 little-endian files are read; re-convert the model with a current llama.cpp"
    )]
    UnsupportedVersion {
        /// The version word as read (little-endian).
        version: u32,
    },
    /// The data ends before an item that must be there.
    #[error(
        "gguf truncated while reading {what} at byte {offset}: need {needed} more bytes, have {available}"
    )]
    Truncated {
        /// What was being read.
        what: String,
        /// Offset of the item from the start of the GGUF.
        offset: u64,
        /// Bytes the item needs.
        needed: u64,
        /// Bytes left in the data.
        available: u64,
    },
    /// A count or length cannot possibly fit in the bytes that are left (checked before allocating).
    #[error(
        "{what} at byte {offset} claims {count} items needing at least {min_bytes} bytes, but only {available} bytes are left; the file is corrupt or truncated"
    )]
    CountTooLarge {
        /// What was being counted.
        what: String,
        /// Offset of the count from the start of the GGUF.
        offset: u64,
        /// The count as read.
        count: u64,
        /// The least number of bytes that many items need.
        min_bytes: u64,
        /// Bytes left in the data.
        available: u64,
    },
    /// A string is not valid UTF-8.
    #[error("{what} at byte {offset} is not valid utf-8")]
    InvalidUtf8 {
        /// Which string.
        what: String,
        /// Offset of the string from the start of the GGUF.
        offset: u64,
    },
    /// A metadata value type id this reader does not know.
    #[error("metadata key {key:?} has unknown value type id {type_id}")]
    UnknownValueType {
        /// The key whose value has the type.
        key: String,
        /// The type id as read.
        type_id: u32,
    },
    /// Arrays nested deeper than [`crate::MAX_ARRAY_DEPTH`].
    #[error("metadata key {key:?} nests arrays deeper than {max} levels")]
    ArrayTooDeep {
        /// The key holding the array.
        key: String,
        /// The depth limit.
        max: usize,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key {key:?}")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// The same tensor name appears twice.
    #[error("duplicate tensor name {name:?}")]
    DuplicateTensor {
        /// The repeated name.
        name: String,
    },
    /// `general.alignment` is zero or not a power of two.
    #[error("general.alignment is {alignment}; it must be a non-zero power of two")]
    BadAlignment {
        /// The value found.
        alignment: u64,
    },
    /// A tensor with more than four dimensions.
    #[error("tensor {name:?} has {n_dims} dimensions; ggml allows at most {max}")]
    TooManyDims {
        /// The tensor.
        name: String,
        /// Dimensions claimed.
        n_dims: u32,
        /// The limit.
        max: u32,
    },
    /// A dimension is negative (as the signed 64-bit value ggml stores).
    #[error("tensor {name:?} has negative dimension ne[{index}] = {value}")]
    NegativeDim {
        /// The tensor.
        name: String,
        /// Which dimension.
        index: usize,
        /// Its value.
        value: i64,
    },
    /// The element count or byte size of a tensor overflows 64 bits.
    #[error("tensor {name:?} with dims {dims:?} overflows the 64-bit element count or byte size")]
    ElementCountOverflow {
        /// The tensor.
        name: String,
        /// Its dims, `ne` order.
        dims: Vec<u64>,
    },
    /// A gguf-split set that cannot be opened as one model (`path`: the shard given).
    #[error("gguf-split set {path}: {problem}")]
    Split {
        /// The shard the set was opened from.
        path: PathBuf,
        /// What is wrong, and what to do.
        problem: String,
    },
    /// A tensor type id this crate does not read.
    #[error(
        "tensor {name:?} is {} (ggml type {type_id}), which diskformer does not read; use a file quantised to \
         F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K…Q6_K, IQ4_NL or IQ4_XS",
        crate::tensor_type::ggml_type_name(*type_id).unwrap_or("an unknown type")
    )]
    UnknownTensorType {
        /// The tensor.
        name: String,
        /// The type id as read.
        type_id: u32,
    },
    /// `ne[0]` is not a multiple of the type's block size, so rows do not hold whole blocks.
    #[error("tensor {name:?}: row length ne[0] = {ne0} is not a multiple of {ty}'s block size {block_size}")]
    RowNotBlockAligned {
        /// The tensor.
        name: String,
        /// Row length.
        ne0: u64,
        /// Tensor type.
        ty: TensorType,
        /// The type's block size.
        block_size: u64,
    },
    /// A tensor's data starts before the previous tensor's data ends.
    #[error(
        "tensor {name:?} data at offset {offset} overlaps the previous tensor, which ends at {previous_end}"
    )]
    TensorOverlap {
        /// The tensor.
        name: String,
        /// Its data offset (relative to the data section).
        offset: u64,
        /// Where the previous tensor's data ends.
        previous_end: u64,
    },
    /// A tensor's data is not at the aligned running offset ggml expects.
    #[error(
        "tensor {name:?} data at offset {offset}, expected {expected} (tensors must follow one another, each aligned)"
    )]
    TensorMisplaced {
        /// The tensor.
        name: String,
        /// Its data offset (relative to the data section).
        offset: u64,
        /// The offset ggml computes.
        expected: u64,
    },
    /// A tensor's data runs past the end of the file.
    #[error(
        "tensor {name:?} data [{offset}, {offset}+{size}) runs past the end of the data section ({data_len} bytes); the file is truncated"
    )]
    TensorOutOfBounds {
        /// The tensor.
        name: String,
        /// Its data offset (relative to the data section).
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// Bytes present in the data section.
        data_len: u64,
    },
    /// A metadata key that was asked for is absent.
    #[error("metadata key {key:?} is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value has another type than the one asked for.
    #[error("metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// The type asked for.
        expected: String,
        /// The type found.
        found: String,
    },
    /// A buffer handed to a conversion has the wrong length.
    #[error("{what}: expected {expected} bytes, got {got}")]
    BadLength {
        /// Which buffer.
        what: String,
        /// The length it must have.
        expected: u64,
        /// The length it has.
        got: u64,
    },
    /// A type that the operation does not handle.
    #[error("{operation} does not support tensor type {ty}")]
    UnsupportedType {
        /// What was attempted.
        operation: &'static str,
        /// The type.
        ty: TensorType,
    },
    /// A tensor added to a writer has data of the wrong size for its type and dims.
    #[error("tensor {name:?}: its {ty} dims {dims:?} need {expected} bytes, but {got} were given")]
    TensorSize {
        /// The tensor.
        name: String,
        /// Its type.
        ty: TensorType,
        /// Its dims.
        dims: Vec<u64>,
        /// Bytes it needs.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
}

impl Error {
    /// The type of a metadata value, for [`Error::WrongType`].
    pub(crate) fn wrong_type(key: &str, expected: impl ToString, found: impl ToString) -> Self {
        Error::WrongType { key: key.to_owned(), expected: expected.to_string(), found: found.to_string() }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
