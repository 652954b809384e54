//! A model as one GGUF or a gguf-split set: shards named `PREFIX-00001-of-0000N.gguf` … `-0000N-of-0000N.gguf`,
//! each a complete GGUF holding whole tensors, the metadata in the first. [`GgufModel::open`] takes the
//! first shard's path and checks the set as llama.cpp's loader does (KQUANTS.md §6): `split.count` and
//! `split.no` are u16 and `split.tensors.count` i32; the first shard's `split.no` is 0; every other shard is
//! present under its derived name and says its own index; tensor names are unique over the set; their
//! number is the first shard's `split.tensors.count`; and each tensor's data lies inside its own shard.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::{Error, GgufFile, GgufWriter, Header, Metadata, Result, TensorInfo, Value};

/// Metadata key: this shard's 0-based index (u16).
pub const SPLIT_NO: &str = "split.no";
/// Metadata key: the number of shards (u16; 0 or absent in a file that is not split).
pub const SPLIT_COUNT: &str = "split.count";
/// Metadata key: the number of tensors over every shard (i32).
pub const SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// A model's GGUF: one file, or every shard of a gguf-split set, mapped.
#[derive(Debug)]
pub struct GgufModel {
    shards: Vec<(PathBuf, GgufFile)>,
    /// Every tensor: its shard and its index in that shard's tensor infos, in shard then file order.
    tensors: Vec<(usize, usize)>,
    by_name: HashMap<String, usize>,
}

impl GgufModel {
    /// Opens the GGUF at `path`; when it is the first shard of a gguf-split set, every shard, checked.
    ///
    /// # Errors
    /// Any error of [`GgufFile::open`] on a shard; [`Error::Split`] naming the set's first shard and what
    /// is wrong with it (a later shard given instead of the first, a missing or foreign shard, a name that
    /// is not gguf-split's, a split key of the wrong type, a tensor in two shards, too few or many tensors).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let first = GgufFile::open(path)?;
        let split = |problem: String| Error::Split { path: path.to_owned(), problem };
        let count = u16_key(first.metadata(), SPLIT_COUNT).map_err(split)?.unwrap_or(0);
        let mut shards = vec![(path.to_owned(), first)];
        if count > 1 {
            let no = u16_key(shards[0].1.metadata(), SPLIT_NO).map_err(split)?;
            if no != Some(0) {
                let no =
                    no.map_or("no split.no".to_owned(), |n| format!("shard {} of {count}", u32::from(n) + 1));
                return Err(split(format!(
                    "this is {no}; open the set's first shard (its name ends in -00001-of-{count:05}.gguf)"
                )));
            }
            let paths = shard_paths(path, count).map_err(split)?;
            for (i, shard_path) in paths.into_iter().enumerate().skip(1) {
                if !shard_path.exists() {
                    return Err(split(format!(
                        "shard {} of {count}, {}, is missing: every shard must lie beside the first",
                        i + 1,
                        shard_path.display()
                    )));
                }
                let shard = GgufFile::open(&shard_path)?;
                match u16_key(shard.metadata(), SPLIT_NO).map_err(split)? {
                    Some(no) if usize::from(no) == i => {}
                    other => {
                        let says =
                            other.map_or("has no split.no".to_owned(), |n| format!("says split.no {n}"));
                        return Err(split(format!(
                            "{} {says}, not {i}: it belongs to another set or was renamed",
                            shard_path.display()
                        )));
                    }
                }
                shards.push((shard_path, shard));
            }
        }

        let mut tensors = Vec::new();
        let mut by_name = HashMap::new();
        for (s, (_, shard)) in shards.iter().enumerate() {
            for (i, t) in shard.tensors().iter().enumerate() {
                if let Some(&earlier) = by_name.get(&t.name) {
                    let (before, _) = tensors[earlier];
                    return Err(split(format!(
                        "tensor {:?} is in shard {} and again in shard {}",
                        t.name,
                        before + 1,
                        s + 1
                    )));
                }
                by_name.insert(t.name.clone(), tensors.len());
                tensors.push((s, i));
            }
        }
        if count > 1 {
            let want = match shards[0].1.metadata().get(SPLIT_TENSORS_COUNT) {
                Some(Value::I32(n)) => i64::from(*n),
                Some(other) => {
                    return Err(split(format!("{SPLIT_TENSORS_COUNT} is {}, not i32", other.type_name())));
                }
                None => return Err(split(format!("the first shard has no {SPLIT_TENSORS_COUNT}"))),
            };
            if want != tensors.len() as i64 {
                return Err(split(format!(
                    "the {count} shards hold {} tensors, the first shard's {SPLIT_TENSORS_COUNT} says {want}",
                    tensors.len()
                )));
            }
        }
        Ok(GgufModel { shards, tensors, by_name })
    }

    /// The metadata (a split set's is in its first shard).
    pub fn metadata(&self) -> &Metadata {
        self.shards[0].1.metadata()
    }

    /// The shards' paths and files, in order (one for a file that is not split).
    pub fn shards(&self) -> impl ExactSizeIterator<Item = (&Path, &GgufFile)> {
        self.shards.iter().map(|(p, g)| (p.as_path(), g))
    }

    /// Every tensor with the index of the shard holding it, shard by shard in file order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = (usize, &TensorInfo)> {
        self.tensors.iter().map(|&(s, i)| (s, &self.shards[s].1.tensors()[i]))
    }

    /// The tensor named `name` and its shard's index.
    pub fn tensor(&self, name: &str) -> Option<(usize, &TensorInfo)> {
        let (s, i) = self.tensors[*self.by_name.get(name)?];
        Some((s, &self.shards[s].1.tensors()[i]))
    }

    /// The header of the one GGUF that merging the set would make (`llama-gguf-split --merge`): the first
    /// shard's metadata without the split keys, and every tensor in shard then file order, its offset in
    /// that merged data section. A file that is not split gives its own header's bytes.
    ///
    /// # Errors
    /// None for a model that opened; the writer's error type.
    pub fn merged_header(&self) -> Result<Vec<u8>> {
        if let [(_, file)] = self.shards.as_slice() {
            // A file without tensors may end before its data section's padding.
            let end = (file.header().data_offset as usize).min(file.bytes().len());
            return Ok(file.bytes()[..end].to_vec());
        }
        let mut w = GgufWriter::new();
        for (key, value) in model_keys(self.metadata()) {
            w.add_metadata(key, value.clone())?;
        }
        for (_, t) in self.tensors() {
            w.add_tensor_fill(t.name.clone(), t.ty, &t.dims, |_| Ok(()))?;
        }
        w.header_bytes()
    }

    /// The model's header as one file's: a file's own, a set's merged one ([`GgufModel::merged_header`]).
    ///
    /// # Errors
    /// None for a model that opened; the writer's and reader's error type.
    pub fn header(&self) -> Result<Cow<'_, Header>> {
        match self.shards.as_slice() {
            [(_, file)] => Ok(Cow::Borrowed(file.header())),
            _ => Ok(Cow::Owned(Header::parse(&self.merged_header()?)?)),
        }
    }

    /// The data of the tensor named `name` (checked to lie inside its shard at open).
    pub fn tensor_data(&self, name: &str) -> Option<&[u8]> {
        let (s, _) = self.tensor(name)?;
        self.shards[s].1.tensor_data(name)
    }
}

/// The metadata pairs that describe the model, not how its file is split.
fn model_keys(metadata: &Metadata) -> impl Iterator<Item = (&str, &Value)> {
    metadata.iter().filter(|(key, _)| ![SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS_COUNT].contains(key))
}

/// A u16 metadata value, `None` where absent, or what is wrong with it.
fn u16_key(metadata: &Metadata, key: &str) -> std::result::Result<Option<u16>, String> {
    match metadata.get(key) {
        None => Ok(None),
        Some(Value::U16(v)) => Ok(Some(*v)),
        Some(other) => Err(format!("{key} is {}, not u16 as gguf-split writes it", other.type_name())),
    }
}

/// The paths of the `count` shards of the set whose first shard is `first` (`PREFIX-00001-of-0000N.gguf`,
/// numbers 1-based and zero-padded to 5 digits, as llama.cpp's `llama_split_path` names them), or what is
/// wrong with `first`'s name.
pub fn shard_paths(first: &Path, count: u16) -> std::result::Result<Vec<PathBuf>, String> {
    let suffix = format!("-00001-of-{count:05}.gguf");
    let name = first.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let Some(prefix) = name.strip_suffix(&suffix) else {
        return Err(format!(
            "the first shard of a set of {count} must be named PREFIX{suffix} (as gguf-split names it), \
             not {name:?}"
        ));
    };
    Ok((1..=count).map(|i| first.with_file_name(format!("{prefix}-{i:05}-of-{count:05}.gguf"))).collect())
}

/// Writes `file` as a gguf-split set of `count` shards whose first is `first` (named
/// `PREFIX-00001-of-0000N.gguf`), as `llama-gguf-split --split` lays one out: the metadata in the first
/// shard, the split keys in every shard, the tensors in file order spread so each shard holds about the same
/// bytes. Returns the shards' paths.
///
/// # Errors
/// [`Error::Split`] for a bad `first` name or a `count` below 2; [`Error::Io`] on a write failure.
pub fn write_split(file: &GgufFile, count: u16, first: &Path) -> Result<Vec<PathBuf>> {
    let split = |problem: String| Error::Split { path: first.to_owned(), problem };
    if count < 2 {
        return Err(split(format!("a set has at least 2 shards, not {count}")));
    }
    let paths = shard_paths(first, count).map_err(split)?;
    let tensors = file.tensors();
    let total: u64 = tensors.iter().map(|t| t.n_bytes).sum::<u64>().max(1);
    let n_tensors = i32::try_from(tensors.len()).map_err(|_| split("more tensors than i32 counts".into()))?;
    let mut before = 0u64;
    let mut shard_of = Vec::with_capacity(tensors.len());
    for t in tensors {
        shard_of.push(((u128::from(before) * u128::from(count)) / u128::from(total)) as u16);
        before += t.n_bytes;
    }
    for (s, path) in paths.iter().enumerate() {
        let s = s as u16;
        let mut w = GgufWriter::new();
        if s == 0 {
            for (key, value) in model_keys(file.metadata()) {
                w.add_metadata(key, value.clone())?;
            }
        } else if let Some(a) = file.metadata().get("general.alignment") {
            w.add_metadata("general.alignment", a.clone())?;
        }
        w.add_metadata(SPLIT_NO, Value::U16(s))?;
        w.add_metadata(SPLIT_COUNT, Value::U16(count))?;
        w.add_metadata(SPLIT_TENSORS_COUNT, Value::I32(n_tensors))?;
        for (t, _) in tensors.iter().zip(&shard_of).filter(|(_, of)| **of == s) {
            let data = file.tensor_data(&t.name).expect("the file's own tensor");
            w.add_tensor(t.name.clone(), t.ty, &t.dims, data)?;
        }
        w.write_file(path)?;
    }
    Ok(paths)
}
