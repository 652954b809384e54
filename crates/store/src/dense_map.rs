//! The dense tensors mapped into memory, for uploading them and embedding tokens: `dense.bin`, and the
//! GGUF's files for those a store keeps there ([`DenseData::InGguf`]).

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::checksum::{combine, part_hash};
use crate::{DenseData, Error, Region, Result, Store};

/// The dense tensors' files mapped read-only.
#[derive(Debug)]
pub struct DenseMap {
    /// `dense.bin`; `None` when it is empty (every dense tensor in the GGUF: an empty file cannot be mapped).
    dense: Option<Mmap>,
    /// The GGUF's files, when the store keeps tensors there.
    gguf: Vec<Mmap>,
}

fn map(path: &Path) -> Result<Mmap> {
    let file = File::open(path).map_err(Error::io(path))?;
    // Safety: a complete store's files, and the GGUF it reads in place (checked unchanged at open), are not
    // rewritten while the store is in use; a file truncated under the mapping by another process would
    // fault, as any reader of the store would fail.
    unsafe { Mmap::map(&file) }.map_err(Error::io(path))
}

impl Store {
    /// Maps `dense.bin` and, for a store that keeps dense tensors in the GGUF, the GGUF's files.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be opened or mapped; [`Error::WrongFileSize`] for a `dense.bin`
    /// shorter than its layout.
    pub fn map_dense(&self) -> Result<DenseMap> {
        let (path, expected) = (self.dense_path(), self.layout().dense_bytes);
        let dense = (expected > 0).then(|| map(&path)).transpose()?;
        let size = dense.as_ref().map_or(0, |m| m.len() as u64);
        if size < expected {
            return Err(Error::WrongFileSize { path, size, expected });
        }
        let gguf = match self.experts_in_gguf() {
            Some(g) if self.layout().dense.iter().any(|t| matches!(t.data, DenseData::InGguf { .. })) => {
                g.files.iter().map(|f| map(&f.path)).collect::<Result<_>>()?
            }
            _ => Vec::new(),
        };
        Ok(DenseMap { dense, gguf })
    }

    /// Checks every dense tensor's bytes in `map` against the manifest's checksums (xxh3, a few GB/s: a
    /// fraction of a second for a 30B model's 2 GB), before anything uses them.
    ///
    /// # Errors
    /// [`Error::ChecksumMismatch`] naming the first tensor that does not match; [`Error::BadManifest`] for a
    /// manifest without a checksum for each.
    pub fn check_dense(&self, map: &DenseMap) -> Result<()> {
        match self.damaged_dense(map)?.first() {
            Some(&t) => Err(Error::ChecksumMismatch {
                what: format!("dense tensor {:?}", self.layout().dense[t].name),
            }),
            None => Ok(()),
        }
    }

    /// The dense tensors (indexes into the layout's) whose bytes in `map` do not match their checksums.
    ///
    /// # Errors
    /// [`Error::BadManifest`] for a manifest without a checksum for each.
    pub fn damaged_dense(&self, map: &DenseMap) -> Result<Vec<usize>> {
        let (tensors, sums) = (self.layout().dense.len(), self.manifest().dense_checksums.len());
        if tensors != sums {
            return Err(Error::BadManifest {
                path: self.dir().join(crate::manifest::MANIFEST),
                what: format!("it has {sums} dense checksums for {tensors} tensors; ingest again"),
            });
        }
        let tensors = self.layout().dense.iter().zip(&self.manifest().dense_checksums).enumerate();
        Ok(tensors
            .filter(|(_, (t, want))| {
                let hashes: Vec<u64> = match map.planes(&t.data) {
                    Some((q, s)) => vec![part_hash(q), part_hash(s)],
                    None => vec![part_hash(map.raw(&t.data).expect("raw or planes"))],
                };
                combine(&hashes) != **want
            })
            .map(|(i, _)| i)
            .collect())
    }
}

impl DenseMap {
    fn dense_at(&self, r: Region) -> &[u8] {
        let map = self.dense.as_deref().unwrap_or(&[]);
        &map[r.offset as usize..r.end() as usize]
    }

    /// The bytes of a tensor kept as in the GGUF (`Raw` in `dense.bin`, or `InGguf`); `None` for planes.
    ///
    /// # Panics
    /// When `data` lies outside the mapped files: it must come from this store's layout, whose places
    /// [`Store::open`] (against the GGUF's sizes) and [`Store::map_dense`] (`dense.bin`'s) checked.
    pub fn raw(&self, data: &DenseData) -> Option<&[u8]> {
        match *data {
            DenseData::Raw { data } => Some(self.dense_at(data)),
            DenseData::InGguf { file, data } => {
                Some(&self.gguf[file][data.offset as usize..data.end() as usize])
            }
            DenseData::Planes { .. } => None,
        }
    }

    /// The quant and scale planes of a Q8_0 tensor; `None` for the others.
    ///
    /// # Panics
    /// As [`DenseMap::raw`].
    pub fn planes(&self, data: &DenseData) -> Option<(&[u8], &[u8])> {
        match *data {
            DenseData::Planes { quants, scales } => Some((self.dense_at(quants), self.dense_at(scales))),
            _ => None,
        }
    }
}
