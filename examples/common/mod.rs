//! Helpers the examples share (not an example itself: cargo only builds `examples/*.rs` and
//! `examples/*/main.rs`).

pub use diskformer::cli::{parse_bytes, runtime_dir_for_drivers};
