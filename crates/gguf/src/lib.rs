#![doc = include_str!("../README.md")]

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
