//! The Qwen3-MoE engine of diskformer. So far: [`Config`], the model's hyper-parameters read from GGUF
//! metadata with the architecture checked first and every missing key reported at once.
//!
//! ```
//! use diskformer_gguf::{Metadata, Value};
//! use diskformer_qwen3_moe::{Config, Error};
//!
//! let mut m = Metadata::new();
//! m.insert("general.architecture", Value::String("qwen3moe".into()));
//! m.insert("qwen3moe.block_count", Value::U32(48));
//! match Config::from_metadata(&m) {
//!     Err(Error::MissingKeys { keys }) => assert_eq!(keys.len(), 11),
//!     other => panic!("{other:?}"),
//! }
//! ```

mod config;
mod error;

pub use config::{ARCHITECTURE, Config};
pub use error::{Error, Result};
