//! GGUF v2/v3 reading and writing for diskformer, hardened against corrupt input.
//!
//! - [`Header::parse`] / [`Header::parse_prefix`] read metadata and tensor infos, the latter saying how many
//!   more bytes it needs when given a short prefix; [`Gguf`] adds the tensor data as zero-copy slices of a
//!   memory map ([`GgufFile::open`]) or of any byte buffer.
//! - Every check of ggml's `gguf.cpp` is made, each failure a typed [`Error`]; counts are checked against the
//!   bytes left before allocating, so no input panics, hangs or allocates more than a few times its size.
//! - [`GgufWriter`] writes metadata and tensors with the alignment honoured (tensor data may be streamed).
//! - [`GgufModel`] opens a model as one file or a gguf-split set of shards, checked as llama.cpp checks them.
//! - [`split_planes`] / [`join_planes`] turn Q8_0 and Q4_0 blocks into a quant plane and an f16 scale plane
//!   and back, bit-exact; [`dequantize`] and [`dequantize_planes`] compute f32 values as ggml does.
//!
//! It does not know about tokenizers or model architectures: those read the [`Metadata`].
//!
//! ```
//! use diskformer_gguf::{Gguf, GgufWriter, Header, PrefixParse, TensorType, Value};
//!
//! let mut w = GgufWriter::new();
//! w.add_metadata("qwen3moe.block_count", Value::U32(48))?;
//! w.add_tensor("token_embd.weight", TensorType::Q8_0, &[32, 2], vec![0u8; 68])?;
//! let mut bytes = Vec::new();
//! w.write_to(&mut bytes)?;
//!
//! // A short prefix says how much more it needs.
//! assert!(matches!(Header::parse_prefix(&bytes[..20])?, PrefixParse::NeedMore(n) if n > 0));
//!
//! let gguf = Gguf::from_bytes(&bytes[..])?;
//! assert_eq!(gguf.metadata().get_u32("qwen3moe.block_count")?, 48);
//! let t = gguf.header().tensor("token_embd.weight").unwrap();
//! assert_eq!((t.dims.as_slice(), t.n_bytes), (&[32, 2][..], 68));
//! # Ok::<(), diskformer_gguf::Error>(())
//! ```

mod dequant;
mod error;
mod layout;
mod metadata;
mod planes;
mod reader;
mod split;
mod tensor_type;
mod value;
mod writer;

pub use dequant::{IQ4_VALUES, dequantize, dequantize_planes, q4_k_scale_min};
pub use error::{Error, Result};
pub use layout::{DEFAULT_ALIGNMENT, MAX_DIMS};
pub use metadata::Metadata;
pub use planes::{join_planes, plane_sizes, split_planes};
pub use reader::{Gguf, GgufFile, Header, MAGIC, MAX_ARRAY_DEPTH, PrefixParse, TensorInfo};
pub use split::{GgufModel, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT, shard_paths, write_split};
pub use tensor_type::TensorType;
pub use value::{Array, Value, ValueType};
pub use writer::{GgufWriter, TensorFill};
