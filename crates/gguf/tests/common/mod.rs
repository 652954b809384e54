//! Helpers shared by the integration tests: a raw GGUF byte builder that can write what the real writer
//! refuses to (for corruption tests), and proptest strategies for arbitrary GGUF contents.

#![allow(dead_code)]

use diskformer_gguf::{Array, TensorType, Value};
use proptest::prelude::*;

/// Builds GGUF bytes field by field, with no validation.
pub struct Raw {
    pub bytes: Vec<u8>,
}

impl Raw {
    /// Magic, version, tensor count and kv count.
    pub fn start(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw { bytes: b"GGUF".to_vec() };
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.bytes.extend_from_slice(s.as_bytes());
        self
    }
    /// A `key: u32` metadata pair.
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info.
    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    /// Zero padding up to `alignment`, then `n` data bytes.
    pub fn data(&mut self, alignment: usize, n: usize) -> &mut Self {
        while !self.bytes.len().is_multiple_of(alignment) {
            self.bytes.push(0);
        }
        self.bytes.extend((0..n).map(|i| i as u8));
        self
    }
}

pub use diskformer_testkit::Rng;

pub fn arbitrary_array(depth: u32) -> BoxedStrategy<Array> {
    let leaf = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Array::U8),
        prop::collection::vec(any::<i8>(), 0..8).prop_map(Array::I8),
        prop::collection::vec(any::<u16>(), 0..8).prop_map(Array::U16),
        prop::collection::vec(any::<i16>(), 0..8).prop_map(Array::I16),
        prop::collection::vec(any::<u32>(), 0..8).prop_map(Array::U32),
        prop::collection::vec(any::<i32>(), 0..8).prop_map(Array::I32),
        prop::collection::vec(any::<f32>().prop_filter("NaN != NaN", |f| !f.is_nan()), 0..8)
            .prop_map(Array::F32),
        prop::collection::vec(any::<bool>(), 0..8).prop_map(Array::Bool),
        prop::collection::vec(".{0,12}", 0..8).prop_map(Array::String),
        prop::collection::vec(any::<u64>(), 0..8).prop_map(Array::U64),
        prop::collection::vec(any::<i64>(), 0..8).prop_map(Array::I64),
        prop::collection::vec(any::<f64>().prop_filter("NaN != NaN", |f| !f.is_nan()), 0..8)
            .prop_map(Array::F64),
    ];
    if depth == 0 {
        leaf.boxed()
    } else {
        prop_oneof![3 => leaf, 1 => prop::collection::vec(arbitrary_array(depth - 1), 0..4).prop_map(Array::Array)]
            .boxed()
    }
}

pub fn arbitrary_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i8>().prop_map(Value::I8),
        any::<u16>().prop_map(Value::U16),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i32>().prop_map(Value::I32),
        any::<f32>().prop_filter("NaN != NaN", |f| !f.is_nan()).prop_map(Value::F32),
        any::<bool>().prop_map(Value::Bool),
        ".{0,24}".prop_map(Value::String),
        arbitrary_array(2).prop_map(Value::Array),
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        any::<f64>().prop_filter("NaN != NaN", |f| !f.is_nan()).prop_map(Value::F64),
    ]
}

/// Metadata pairs with distinct keys (never `general.alignment`, which the test sets itself).
pub fn arbitrary_metadata() -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::btree_map("[a-z]{1,6}(\\.[a-z_]{1,8}){0,2}", arbitrary_value(), 0..10)
        .prop_map(|m| m.into_iter().collect())
}

/// A tensor: name, type, dims, data.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub ty: TensorType,
    pub dims: Vec<u64>,
    pub data: Vec<u8>,
}

pub fn arbitrary_tensor() -> impl Strategy<Value = TensorSpec> {
    (
        prop::sample::select(TensorType::ALL.to_vec()),
        1u64..3,
        prop::collection::vec(1u64..4, 0..3),
        any::<u64>(),
    )
        .prop_map(|(ty, blocks, rest, seed)| {
            let mut dims = vec![blocks * ty.block_size()];
            dims.extend(rest);
            let n: u64 = dims.iter().product();
            let data = Rng(seed).bytes(ty.bytes_for(n).unwrap() as usize);
            TensorSpec { name: String::new(), ty, dims, data }
        })
}

pub fn arbitrary_tensors() -> impl Strategy<Value = Vec<TensorSpec>> {
    prop::collection::vec(arbitrary_tensor(), 0..6).prop_map(|mut ts| {
        for (i, t) in ts.iter_mut().enumerate() {
            t.name = format!("blk.{i}.weight");
        }
        ts
    })
}
