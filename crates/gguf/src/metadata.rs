//! The ordered key → value map of a GGUF header, with typed getters.

use std::collections::HashMap;

use crate::{Array, Error, Result, Value};

/// Metadata key/value pairs in file order, looked up by key.
///
/// Typed getters are strict: `get_u32` on a `u64` value is [`Error::WrongType`] naming both types, so a file
/// that stores a key with an unexpected type is noticed rather than silently converted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

macro_rules! scalar_getter {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $ty:ty) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// [`Error::MissingKey`] when absent, [`Error::WrongType`] when of another type.
        pub fn $name(&self, key: &str) -> Result<$ty> {
            match self.require(key)? {
                Value::$variant(v) => Ok(*v),
                other => Err(Error::wrong_type(key, stringify!($variant).to_lowercase(), other.type_name())),
            }
        }
    };
}

macro_rules! array_getter {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $ty:ty) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// [`Error::MissingKey`] when absent, [`Error::WrongType`] when not an array of that element type.
        pub fn $name(&self, key: &str) -> Result<&[$ty]> {
            match self.require(key)? {
                Value::Array(Array::$variant(v)) => Ok(v),
                other => Err(Error::wrong_type(
                    key,
                    format!("array of {}", stringify!($variant).to_lowercase()),
                    other.type_name(),
                )),
            }
        }
    };
}

impl Metadata {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts a pair, returning `false` (and changing nothing) when the key is already present.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> bool {
        let key = key.into();
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Pairs in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// The value of `key`.
    ///
    /// # Errors
    /// [`Error::MissingKey`] when absent.
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| Error::MissingKey { key: key.to_owned() })
    }

    scalar_getter!(/// A `u8` value.
        get_u8, U8, u8);
    scalar_getter!(/// An `i8` value.
        get_i8, I8, i8);
    scalar_getter!(/// A `u16` value.
        get_u16, U16, u16);
    scalar_getter!(/// An `i16` value.
        get_i16, I16, i16);
    scalar_getter!(/// A `u32` value.
        get_u32, U32, u32);
    scalar_getter!(/// An `i32` value.
        get_i32, I32, i32);
    scalar_getter!(/// A `u64` value, exact.
        get_u64, U64, u64);
    scalar_getter!(/// An `i64` value, exact.
        get_i64, I64, i64);
    scalar_getter!(/// An `f32` value.
        get_f32, F32, f32);
    scalar_getter!(/// An `f64` value.
        get_f64, F64, f64);
    scalar_getter!(/// A `bool` value.
        get_bool, Bool, bool);

    /// A string value.
    ///
    /// # Errors
    /// [`Error::MissingKey`] when absent, [`Error::WrongType`] when not a string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            other => Err(Error::wrong_type(key, "string", other.type_name())),
        }
    }

    /// Any integer value that is non-negative, widened to `u64` (converters disagree on whether counts are
    /// u32 or u64).
    ///
    /// # Errors
    /// [`Error::MissingKey`] when absent, [`Error::WrongType`] when not a non-negative integer.
    pub fn get_uint(&self, key: &str) -> Result<u64> {
        let value = self.require(key)?;
        value.as_u64().ok_or_else(|| Error::wrong_type(key, "non-negative integer", value.type_name()))
    }

    /// An array value of any element type.
    ///
    /// # Errors
    /// [`Error::MissingKey`] when absent, [`Error::WrongType`] when not an array.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            other => Err(Error::wrong_type(key, "array", other.type_name())),
        }
    }

    array_getter!(/// An array of strings.
        get_str_array, String, String);
    array_getter!(/// An array of `i32`.
        get_i32_array, I32, i32);
    array_getter!(/// An array of `u32`.
        get_u32_array, U32, u32);
    array_getter!(/// An array of `f32`.
        get_f32_array, F32, f32);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metadata {
        let mut m = Metadata::new();
        assert!(m.insert("a.u64", Value::U64(u64::MAX)));
        assert!(m.insert("a.i64", Value::I64(i64::MIN)));
        assert!(m.insert("a.s", Value::String("x".into())));
        assert!(m.insert("a.arr", Value::Array(Array::String(vec!["p".into()]))));
        m
    }

    #[test]
    fn getters_keep_64_bit_values_exact() {
        let m = sample();
        assert_eq!(m.get_u64("a.u64").unwrap(), u64::MAX);
        assert_eq!(m.get_i64("a.i64").unwrap(), i64::MIN);
        assert_eq!(m.get_uint("a.u64").unwrap(), u64::MAX);
    }

    #[test]
    fn wrong_type_names_key_and_both_types() {
        let m = sample();
        match m.get_u32("a.u64") {
            Err(Error::WrongType { key, expected, found }) => {
                assert_eq!((key.as_str(), expected.as_str(), found.as_str()), ("a.u64", "u32", "u64"));
            }
            other => panic!("expected WrongType, got {other:?}"),
        }
        match m.get_i32_array("a.arr") {
            Err(Error::WrongType { expected, found, .. }) => {
                assert_eq!((expected.as_str(), found.as_str()), ("array of i32", "array of string"));
            }
            other => panic!("expected WrongType, got {other:?}"),
        }
        assert!(matches!(m.get_uint("a.i64"), Err(Error::WrongType { .. })));
        assert!(matches!(m.get_str("nope"), Err(Error::MissingKey { .. })));
    }

    #[test]
    fn insert_refuses_duplicates_and_keeps_order() {
        let mut m = sample();
        assert!(!m.insert("a.s", Value::Bool(true)));
        assert_eq!(m.get_str("a.s").unwrap(), "x");
        let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a.u64", "a.i64", "a.s", "a.arr"]);
    }
}
