//! Parsing GGUF v2/v3: the header (metadata and tensor infos) from a prefix, whole files through memmap2, and
//! byte buffers. Every check of ggml's `gguf_init_from_file_impl` is made, and every count is checked against
//! the bytes left before anything is allocated.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::layout::{DEFAULT_ALIGNMENT, MAX_DIMS, align_up, tensor_size};
use crate::{Array, Error, Metadata, Result, TensorType, Value, ValueType};

/// The four bytes every GGUF starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Arrays of arrays deeper than this are refused, so a hostile file cannot exhaust the stack.
pub const MAX_ARRAY_DEPTH: usize = 16;

/// One tensor's entry in the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Name, verbatim (`blk.0.ffn_gate_exps.weight`).
    pub name: String,
    /// Dimensions in ggml `ne` order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: TensorType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Number of elements.
    pub n_elements: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
}

/// A parsed GGUF header: version, metadata, tensor infos and where the data section starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Data alignment (`general.alignment`, default 32).
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Metadata,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Offset of the data section from the start of the GGUF (the header's size, padding included).
    pub data_offset: u64,
    tensor_index: HashMap<String, usize>,
}

/// The outcome of parsing a header from a prefix of a GGUF.
#[derive(Clone, Debug, PartialEq)]
pub enum PrefixParse {
    /// The prefix held the whole header.
    Complete(Box<Header>),
    /// The prefix is too short: read at least this many more bytes and try again.
    NeedMore(u64),
}

impl Header {
    /// Parses the header at the start of `bytes`; a short input is an error.
    ///
    /// # Errors
    /// Any validation failure, [`Error::Truncated`] or [`Error::CountTooLarge`] when `bytes` ends early.
    pub fn parse(bytes: &[u8]) -> Result<Header> {
        let mut cursor = Cursor { bytes, pos: 0 };
        let header = read_header(&mut cursor)?;
        Ok(header)
    }

    /// Parses the header from a prefix of a GGUF, saying how many more bytes are needed when it is short.
    ///
    /// A corrupt length field may ask for more bytes than the file has; the caller compares with the file
    /// size and treats that as truncation.
    ///
    /// # Errors
    /// Any validation failure that the prefix already shows.
    pub fn parse_prefix(prefix: &[u8]) -> Result<PrefixParse> {
        match Header::parse(prefix) {
            Ok(header) => Ok(PrefixParse::Complete(Box::new(header))),
            Err(Error::Truncated { needed, available, .. }) => Ok(PrefixParse::NeedMore(needed - available)),
            Err(Error::CountTooLarge { min_bytes, available, .. }) => {
                Ok(PrefixParse::NeedMore(min_bytes - available))
            }
            Err(e) => Err(e),
        }
    }

    /// The tensor info named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Bytes of the data section that the tensors use (end of the last tensor).
    pub fn data_len(&self) -> u64 {
        self.tensors.last().map_or(0, |t| t.offset + t.n_bytes)
    }

    /// Checks every tensor's data lies inside a GGUF of `file_len` bytes (zero-size tensors included: their
    /// slice must start inside it too).
    fn check_bounds(&self, file_len: u64) -> Result<()> {
        let data_len = file_len.saturating_sub(self.data_offset);
        for t in &self.tensors {
            let end = self.data_offset.checked_add(t.offset).and_then(|s| s.checked_add(t.n_bytes));
            if end.is_none_or(|end| end > file_len) {
                return Err(Error::TensorOutOfBounds {
                    name: t.name.clone(),
                    offset: t.offset,
                    size: t.n_bytes,
                    data_len,
                });
            }
        }
        Ok(())
    }
}

/// A whole GGUF: its header and its bytes, held as `B` (a memory map, a `Vec<u8>`, or a borrowed slice).
/// Tensor data are zero-copy slices of those bytes.
#[derive(Debug)]
pub struct Gguf<B> {
    header: Header,
    bytes: B,
}

/// A GGUF file mapped into memory.
pub type GgufFile = Gguf<Mmap>;

impl<B: AsRef<[u8]>> Gguf<B> {
    /// Parses a GGUF held in `bytes` (which may be a sub-slice of a larger buffer: offsets are relative to
    /// its start) and checks that every tensor's data is present.
    ///
    /// # Errors
    /// Any header validation failure, or [`Error::TensorOutOfBounds`].
    pub fn from_bytes(bytes: B) -> Result<Self> {
        let header = Header::parse(bytes.as_ref())?;
        header.check_bounds(bytes.as_ref().len() as u64)?;
        Ok(Gguf { header, bytes })
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.header.metadata
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// The bytes of the whole GGUF.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// The data of the tensor named `name`, if there is one.
    pub fn tensor_data(&self, name: &str) -> Option<&[u8]> {
        let t = self.header.tensor(name)?;
        let start = (self.header.data_offset + t.offset) as usize;
        // In bounds: checked in `from_bytes`.
        Some(&self.bytes.as_ref()[start..start + t.n_bytes as usize])
    }
}

impl Gguf<Mmap> {
    /// Maps and parses the GGUF file at `path`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened or mapped; any parse error.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.to_owned(), source };
        let file = File::open(path).map_err(io)?;
        // Safety: the map is read-only; like every mmap-based model loader we rely on the file not being
        // truncated or rewritten while it is open (doing so is the caller's bug, documented on the type).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Gguf::from_bytes(map)
    }
}

/// A position in the bytes being parsed.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        let out = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: impl FnOnce() -> String) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Checks that `count` items of at least `min_each` bytes can fit in what is left.
    fn check_count(&self, count: u64, min_each: u64, what: impl FnOnce() -> String) -> Result<()> {
        let min_bytes = count.saturating_mul(min_each);
        if min_bytes > self.remaining() {
            return Err(Error::CountTooLarge {
                what: what(),
                offset: self.pos as u64,
                count,
                min_bytes,
                available: self.remaining(),
            });
        }
        Ok(())
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.u64(|| format!("length of {}", what()))?;
        self.check_count(len, 1, || format!("length of {}", what()))?;
        let offset = self.pos as u64;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidUtf8 { what: what(), offset })
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType> {
        let type_id = self.u32(|| format!("value type of {key:?}"))?;
        ValueType::from_id(type_id).ok_or_else(|| Error::UnknownValueType { key: key.to_owned(), type_id })
    }

    fn value(&mut self, key: &str, ty: ValueType) -> Result<Value> {
        let what = || format!("value of {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(what)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::Bool => Value::Bool(self.array::<1>(what)?[0] != 0),
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => Value::Array(self.array_value(key, 1)?),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(Error::ArrayTooDeep { key: key.to_owned(), max: MAX_ARRAY_DEPTH });
        }
        let ty = self.value_type(key)?;
        let count = self.u64(|| format!("array length of {key:?}"))?;
        self.check_count(count, ty.min_encoded_len(), || format!("array of {key:?}"))?;
        let n = count as usize;
        let what = || format!("array of {key:?}");
        macro_rules! numbers {
            ($variant:ident, $t:ty) => {{
                let raw = self.take(count * std::mem::size_of::<$t>() as u64, what)?;
                Array::$variant(
                    raw.chunks_exact(std::mem::size_of::<$t>())
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("exact chunk")))
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(count, what)?.to_vec()),
            ValueType::I8 => numbers!(I8, i8),
            ValueType::U16 => numbers!(U16, u16),
            ValueType::I16 => numbers!(I16, i16),
            ValueType::U32 => numbers!(U32, u32),
            ValueType::I32 => numbers!(I32, i32),
            ValueType::F32 => numbers!(F32, f32),
            ValueType::Bool => Array::Bool(self.take(count, what)?.iter().map(|&b| b != 0).collect()),
            ValueType::U64 => numbers!(U64, u64),
            ValueType::I64 => numbers!(I64, i64),
            ValueType::F64 => numbers!(F64, f64),
            ValueType::String => {
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    out.push(self.string(&|| format!("element {i} of {key:?}"))?);
                }
                Array::String(out)
            }
            ValueType::Array => {
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    out.push(self.array_value(key, depth + 1)?);
                }
                Array::Array(out)
            }
        })
    }
}

fn read_header(c: &mut Cursor<'_>) -> Result<Header> {
    let magic: [u8; 4] = c.array(|| "magic".into())?;
    if magic != MAGIC {
        return Err(Error::BadMagic { found: magic });
    }
    let version = c.u32(|| "version".into())?;
    if !(2..=3).contains(&version) {
        return Err(Error::UnsupportedVersion { version });
    }
    let n_tensors = c.u64(|| "tensor count".into())?;
    let n_kv = c.u64(|| "metadata count".into())?;
    // Smallest key/value: 8-byte key length, 4-byte type, 1-byte value.
    c.check_count(n_kv, 13, || "metadata pairs".into())?;

    let mut metadata = Metadata::new();
    for i in 0..n_kv {
        let key = c.string(&|| format!("key of metadata pair {i}"))?;
        let ty = c.value_type(&key)?;
        let value = c.value(&key, ty)?;
        if metadata.get(&key).is_some() {
            return Err(Error::DuplicateKey { key });
        }
        metadata.insert(key, value);
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(_) => u64::from(metadata.get_u32("general.alignment")?),
    };
    if !alignment.is_power_of_two() {
        return Err(Error::BadAlignment { alignment });
    }

    // Smallest tensor info: name length 8, n_dims 4, type 4, offset 8.
    c.check_count(n_tensors, 24, || "tensor infos".into())?;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names = HashSet::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = c.string(&|| format!("name of tensor {i}"))?;
        if !names.insert(name.clone()) {
            return Err(Error::DuplicateTensor { name });
        }
        let n_dims = c.u32(|| format!("dimension count of {name:?}"))?;
        if n_dims > MAX_DIMS {
            return Err(Error::TooManyDims { name, n_dims, max: MAX_DIMS });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(|| format!("dimensions of {name:?}"))?);
        }
        let type_id = c.u32(|| format!("type of {name:?}"))?;
        let ty = TensorType::from_id(type_id)
            .ok_or_else(|| Error::UnknownTensorType { name: name.clone(), type_id })?;
        let offset = c.u64(|| format!("data offset of {name:?}"))?;
        let (n_elements, n_bytes) = tensor_size(&name, &dims, ty)?;
        tensors.push(TensorInfo { name, dims, ty, offset, n_elements, n_bytes });
    }
    check_placement(&tensors, alignment)?;

    let data_offset = align_up(c.pos as u64, alignment).ok_or(Error::BadAlignment { alignment })?;
    let tensor_index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
    Ok(Header { version, alignment, metadata, tensors, data_offset, tensor_index })
}

/// ggml requires each tensor's data at the running offset: the previous tensor's end, aligned.
fn check_placement(tensors: &[TensorInfo], alignment: u64) -> Result<()> {
    let mut previous_end = 0u64;
    for t in tensors {
        let expected = align_up(previous_end, alignment)
            .ok_or_else(|| Error::ElementCountOverflow { name: t.name.clone(), dims: t.dims.clone() })?;
        if t.offset < previous_end {
            return Err(Error::TensorOverlap { name: t.name.clone(), offset: t.offset, previous_end });
        }
        if t.offset != expected {
            return Err(Error::TensorMisplaced { name: t.name.clone(), offset: t.offset, expected });
        }
        previous_end = t
            .offset
            .checked_add(t.n_bytes)
            .ok_or_else(|| Error::ElementCountOverflow { name: t.name.clone(), dims: t.dims.clone() })?;
    }
    Ok(())
}
