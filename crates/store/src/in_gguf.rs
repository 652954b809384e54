//! Experts read in place from the source GGUF: a store ingested without copying its experts
//! (`IngestOptions::copy_experts` off) keeps where each layer's gate, up and down slices lie in the GGUF's
//! files instead of `experts.bin`, and reads a record as those three slices, placed where the record layout
//! puts them. Only records of blocks can be read so (records of planes split each block).

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::{Error, ExpertKey, ExpertLayout, ExpertPart, Result};

/// A file the experts are read from: a GGUF, or one shard of a gguf-split set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GgufFileInfo {
    /// Its path at ingest.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, seconds since the Unix epoch.
    pub mtime: u64,
}

/// Where one part (gate, up or down) of a layer's experts lies: expert e's slice at `offset + e · slice`
/// of file `file`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInFile {
    /// Index into [`ExpertsInGguf::files`].
    pub file: usize,
    /// Byte offset of expert 0's slice in that file.
    pub offset: u64,
    /// Bytes of one expert's slice.
    pub slice: u64,
}

/// Where every expert of a store that did not copy them lies in its source GGUF.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertsInGguf {
    /// The files, in a gguf-split set's order.
    pub files: Vec<GgufFileInfo>,
    /// Per layer: gate, up and down.
    pub parts: Vec<[PartInFile; 3]>,
}

impl ExpertsInGguf {
    /// Why the expert slices' places cannot be `layout`'s in these files (a damaged manifest): a layer or
    /// file that is not there, a slice of another size than the record's part, or slices past a file's end.
    pub fn misplaced(&self, layout: &ExpertLayout) -> Option<String> {
        if self.parts.len() != layout.n_layers as usize {
            return Some(format!("{} layers of expert places for {}", self.parts.len(), layout.n_layers));
        }
        for (l, parts) in self.parts.iter().enumerate() {
            for (p, part) in ExpertPart::ALL.iter().zip(parts) {
                let want = layout.part(l as u32, *p).map(|(_, r)| r.len);
                let end = part
                    .slice
                    .checked_mul(u64::from(layout.n_experts))
                    .and_then(|b| part.offset.checked_add(b));
                let past_end = match (self.files.get(part.file), end) {
                    (Some(f), Some(end)) => end > f.size,
                    _ => true,
                };
                if want != Some(part.slice) || past_end {
                    return Some(format!("layer {l}'s {p:?} slices do not fit its record or its file"));
                }
            }
        }
        None
    }

    /// Refuses files that are gone or changed since ingest (size or modification time): the store's
    /// checksums and layout describe the bytes they held then.
    ///
    /// # Errors
    /// [`Error::SourceChanged`] naming the file.
    pub fn check_files(&self) -> Result<()> {
        for f in &self.files {
            let changed = |what: String| Error::SourceChanged { path: f.path.clone(), what };
            let meta = std::fs::metadata(&f.path).map_err(|e| changed(format!("cannot be read ({e})")))?;
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            if meta.len() != f.size || mtime != f.mtime {
                return Err(changed(format!(
                    "is {} bytes modified at {mtime}, not the {} bytes modified at {} it was at ingest",
                    meta.len(),
                    f.size,
                    f.mtime
                )));
            }
        }
        Ok(())
    }

    /// The path of file `i`.
    pub fn path(&self, i: usize) -> &Path {
        &self.files[i].path
    }

    /// Where part `part` of the record of `key` lies: its file and byte range there.
    pub fn locate(&self, key: ExpertKey, part: ExpertPart) -> (usize, u64, u64) {
        let p = self.parts[key.layer as usize][part as usize];
        (p.file, p.offset + u64::from(key.expert) * p.slice, p.slice)
    }

    /// For each part of a record of `layer` (gate, up, down), its region in the record layout `x`: where
    /// its slice goes in a record buffer.
    pub fn record_regions(x: &ExpertLayout, layer: u32) -> [(ExpertPart, crate::Region); 3] {
        ExpertPart::ALL.map(|p| (p, x.part(layer, p).expect("records of blocks have every part").1))
    }
}
