//! Writing GGUF v3 files: metadata and tensors, with the alignment honoured. Tensor data may be given as
//! bytes or streamed by a closure, so multi-gigabyte synthetic models never sit in memory whole.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::layout::{DEFAULT_ALIGNMENT, align_up, tensor_size};
use crate::{Array, Error, MAGIC, Metadata, Result, TensorType, Value};

/// Writes the bytes of one tensor; it must write exactly the tensor's size.
pub type TensorFill<'a> = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + 'a>;

enum TensorSource<'a> {
    Bytes(Cow<'a, [u8]>),
    Fill(TensorFill<'a>),
}

struct PendingTensor<'a> {
    name: String,
    dims: Vec<u64>,
    ty: TensorType,
    n_bytes: u64,
    source: TensorSource<'a>,
}

/// Builds a GGUF v3 file.
///
/// ```
/// use diskformer_gguf::{Gguf, GgufWriter, TensorType, Value};
///
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", Value::String("qwen3moe".into()))?;
/// w.add_tensor("norm.weight", TensorType::F32, &[4], bytemuck::cast_slice(&[1.0f32; 4]))?;
/// let mut bytes = Vec::new();
/// w.write_to(&mut bytes)?;
///
/// let gguf = Gguf::from_bytes(bytes)?;
/// assert_eq!(gguf.metadata().get_str("general.architecture")?, "qwen3moe");
/// assert_eq!(gguf.tensor_data("norm.weight").unwrap().len(), 16);
/// # Ok::<(), diskformer_gguf::Error>(())
/// ```
pub struct GgufWriter<'a> {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor<'a>>,
    names: HashSet<String>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> GgufWriter<'a> {
    /// An empty GGUF v3 writer with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter { version: 3, metadata: Metadata::new(), tensors: Vec::new(), names: HashSet::new() }
    }

    /// Writes version 2 instead of 3 (the two differ only in the version word for little-endian files).
    pub fn version_2(mut self) -> Self {
        self.version = 2;
        self
    }

    /// Sets `general.alignment`.
    ///
    /// # Errors
    /// [`Error::BadAlignment`] unless a power of two; [`Error::DuplicateKey`] when already set.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<()> {
        if !alignment.is_power_of_two() {
            return Err(Error::BadAlignment { alignment: alignment.into() });
        }
        self.add_metadata("general.alignment", Value::U32(alignment))
    }

    /// Adds a metadata pair (written in the order added).
    ///
    /// # Errors
    /// [`Error::DuplicateKey`] when the key was already added.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: Value) -> Result<()> {
        let key = key.into();
        if key == "general.alignment" && !matches!(value, Value::U32(a) if a.is_power_of_two()) {
            return Err(Error::BadAlignment { alignment: value.as_u64().unwrap_or(0) });
        }
        if self.metadata.get(&key).is_some() {
            return Err(Error::DuplicateKey { key });
        }
        self.metadata.insert(key, value);
        Ok(())
    }

    /// Adds a tensor whose data is `data` (borrowed or owned).
    ///
    /// # Errors
    /// [`Error::DuplicateTensor`], any dims error of the reader, or [`Error::TensorSize`] when `data` is not
    /// exactly the tensor's size.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
        dims: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let name = name.into();
        let data = data.into();
        let n_bytes = self.check_tensor(&name, ty, dims)?;
        if data.len() as u64 != n_bytes {
            return Err(Error::TensorSize {
                name,
                ty,
                dims: dims.to_vec(),
                expected: n_bytes,
                got: data.len() as u64,
            });
        }
        self.push(name, ty, dims, n_bytes, TensorSource::Bytes(data));
        Ok(())
    }

    /// Adds a tensor whose data `fill` writes when the file is written; it must write exactly the tensor's
    /// size ([`Error::TensorSize`] at write time otherwise).
    ///
    /// # Errors
    /// [`Error::DuplicateTensor`] or any dims error of the reader.
    pub fn add_tensor_fill(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
        dims: &[u64],
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()> + 'a,
    ) -> Result<()> {
        let name = name.into();
        let n_bytes = self.check_tensor(&name, ty, dims)?;
        self.push(name, ty, dims, n_bytes, TensorSource::Fill(Box::new(fill)));
        Ok(())
    }

    fn check_tensor(&self, name: &str, ty: TensorType, dims: &[u64]) -> Result<u64> {
        if self.names.contains(name) {
            return Err(Error::DuplicateTensor { name: name.to_owned() });
        }
        Ok(tensor_size(name, dims, ty)?.1)
    }

    fn push(&mut self, name: String, ty: TensorType, dims: &[u64], n_bytes: u64, source: TensorSource<'a>) {
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor { name, dims: dims.to_vec(), ty, n_bytes, source });
    }

    fn alignment(&self) -> u64 {
        self.metadata.get_u32("general.alignment").map_or(DEFAULT_ALIGNMENT, u64::from)
    }

    /// Writes the GGUF to `out` and returns the number of bytes written. The last tensor is padded to the
    /// alignment too, as llama.cpp's writers do.
    ///
    /// # Errors
    /// [`Error::Write`] on an i/o failure, [`Error::TensorSize`] when a fill wrote the wrong amount.
    pub fn write_to(self, out: impl Write) -> Result<u64> {
        let alignment = self.alignment();
        let mut out = Counting { inner: out, written: 0 };
        let w = &mut out;
        self.write_header(w)?;
        for t in self.tensors {
            let start = w.written;
            match t.source {
                TensorSource::Bytes(data) => w.write_all(&data).map_err(Error::Write)?,
                TensorSource::Fill(fill) => fill(w).map_err(Error::Write)?,
            }
            let got = w.written - start;
            if got != t.n_bytes {
                return Err(Error::TensorSize {
                    name: t.name,
                    ty: t.ty,
                    dims: t.dims,
                    expected: t.n_bytes,
                    got,
                });
            }
            pad(w, alignment)?;
        }
        out.flush().map_err(Error::Write)?;
        Ok(out.written)
    }

    /// Writes the header: magic, counts, metadata, tensor infos and the padding up to the data section.
    fn write_header<W: Write>(&self, w: &mut Counting<W>) -> Result<()> {
        let alignment = self.alignment();
        w.write_all(&MAGIC).map_err(Error::Write)?;
        put_u32(w, self.version)?;
        put_u64(w, self.tensors.len() as u64)?;
        put_u64(w, self.metadata.len() as u64)?;
        for (key, value) in self.metadata.iter() {
            put_str(w, key)?;
            put_u32(w, value.value_type().id())?;
            put_value(w, value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(w, &t.name)?;
            put_u32(w, t.dims.len() as u32)?;
            for &d in &t.dims {
                put_u64(w, d)?;
            }
            put_u32(w, t.ty.id())?;
            put_u64(w, offset)?;
            offset = align_up(offset + t.n_bytes, alignment).expect("sizes checked when added");
        }
        pad(w, alignment)
    }

    /// The bytes [`GgufWriter::write_to`] would write before the first tensor's data: the header with its
    /// tensor infos and the padding up to the data section. Fills are not called.
    ///
    /// # Errors
    /// None in practice (writing to memory cannot fail); the type is that of the writer's helpers.
    pub fn header_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Counting { inner: Vec::new(), written: 0 };
        self.write_header(&mut out)?;
        Ok(out.inner)
    }

    /// Writes the GGUF to a new file at `path` (replacing any file there).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be created or written; as [`GgufWriter::write_to`] otherwise.
    pub fn write_file(self, path: impl AsRef<Path>) -> Result<u64> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.to_owned(), source };
        let file = File::create(path).map_err(io)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let n = self.write_to(&mut out).map_err(|e| match e {
            Error::Write(source) => io(source),
            other => other,
        })?;
        let file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        Ok(n)
    }
}

/// A writer that counts the bytes passing through.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn pad<W: Write>(w: &mut Counting<W>, alignment: u64) -> Result<()> {
    let target = align_up(w.written, alignment).expect("file size fits u64");
    let zeros = [0u8; 256];
    let mut left = target - w.written;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        w.write_all(&zeros[..n]).map_err(Error::Write)?;
        left -= n as u64;
    }
    Ok(())
}

fn put(w: &mut impl Write, bytes: &[u8]) -> Result<()> {
    w.write_all(bytes).map_err(Error::Write)
}

fn put_u32(w: &mut impl Write, v: u32) -> Result<()> {
    put(w, &v.to_le_bytes())
}

fn put_u64(w: &mut impl Write, v: u64) -> Result<()> {
    put(w, &v.to_le_bytes())
}

fn put_str(w: &mut impl Write, s: &str) -> Result<()> {
    put_u64(w, s.len() as u64)?;
    put(w, s.as_bytes())
}

fn put_value(w: &mut impl Write, value: &Value) -> Result<()> {
    match value {
        Value::U8(v) => put(w, &v.to_le_bytes()),
        Value::I8(v) => put(w, &v.to_le_bytes()),
        Value::U16(v) => put(w, &v.to_le_bytes()),
        Value::I16(v) => put(w, &v.to_le_bytes()),
        Value::U32(v) => put(w, &v.to_le_bytes()),
        Value::I32(v) => put(w, &v.to_le_bytes()),
        Value::F32(v) => put(w, &v.to_le_bytes()),
        Value::Bool(v) => put(w, &[u8::from(*v)]),
        Value::String(s) => put_str(w, s),
        Value::Array(a) => put_array(w, a),
        Value::U64(v) => put(w, &v.to_le_bytes()),
        Value::I64(v) => put(w, &v.to_le_bytes()),
        Value::F64(v) => put(w, &v.to_le_bytes()),
    }
}

fn put_array(w: &mut impl Write, array: &Array) -> Result<()> {
    put_u32(w, array.element_type().id())?;
    put_u64(w, array.len() as u64)?;
    macro_rules! each {
        ($v:expr) => {{
            for x in $v {
                put(w, &x.to_le_bytes())?;
            }
            Ok(())
        }};
    }
    match array {
        Array::U8(v) => put(w, v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::Bool(v) => v.iter().try_for_each(|&b| put(w, &[u8::from(b)])),
        Array::String(v) => v.iter().try_for_each(|s| put_str(w, s)),
        Array::Array(v) => v.iter().try_for_each(|a| put_array(w, a)),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
    }
}
