//! Every expert record's checksum from the manifest, to check a record's bytes where they are read (the
//! GPU pool's loads, the host tier, the CPU tier's mapped records) before anything computes on them.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::checksum::{combine, part_hash};
use crate::manifest::MANIFEST;
use crate::{Error, ExpertKey, ExpertLayout, Result, Store};

/// The manifest's checksum of each expert record (xxh3 over its parts' hashes), shareable across threads.
#[derive(Clone, Debug)]
pub struct RecordChecks {
    layout: ExpertLayout,
    sums: Arc<[u64]>,
}

impl Store {
    /// The checksums of the expert records.
    ///
    /// # Errors
    /// [`Error::BadExpertTensors`] for a store without experts; [`Error::BadManifest`] for a manifest
    /// without a checksum for each record.
    pub fn record_checks(&self) -> Result<RecordChecks> {
        let layout = self
            .layout()
            .experts
            .clone()
            .ok_or_else(|| Error::BadExpertTensors { what: "the model has no expert tensors".into() })?;
        let sums = &self.manifest().record_checksums;
        if sums.len() != layout.n_records() {
            return Err(Error::BadManifest {
                path: self.dir().join(MANIFEST),
                what: format!(
                    "it has {} record checksums for {} records; ingest again",
                    sums.len(),
                    layout.n_records()
                ),
            });
        }
        Ok(RecordChecks { layout, sums: sums.as_slice().into() })
    }
}

impl RecordChecks {
    /// Whether `record` (the record of `key` as [`ExpertLayout`] lays it out, at least a record long) holds
    /// the bytes its checksum was taken over. Keys past the layout do not match.
    pub fn matches(&self, key: ExpertKey, record: &[u8]) -> bool {
        let parts = self.layout.record_parts(key.layer);
        if parts.iter().any(|p| p.end() as usize > record.len()) {
            return false;
        }
        self.matches_parts(key, parts.map(|p| &record[p.offset as usize..p.end() as usize]))
    }

    /// As [`matches`](Self::matches), for a record of blocks given as its gate, up and down slices (mapped
    /// from the GGUF where they lie).
    pub fn matches_blocks(&self, key: ExpertKey, [gate, up, down]: [&[u8]; 3]) -> bool {
        // The parts in checksum order: records of blocks have no scale planes (empty parts).
        self.matches_parts(key, [gate, up, &[], &[], down, &[]])
    }

    fn matches_parts(&self, key: ExpertKey, parts: [&[u8]; 6]) -> bool {
        let x = &self.layout;
        if key.layer >= x.n_layers || key.expert >= x.n_experts {
            return false;
        }
        let index = key.layer as usize * x.n_experts as usize + key.expert as usize;
        combine(&parts.map(part_hash)) == self.sums[index]
    }
}

/// The error for a record whose bytes from `file` did not match its checksum, read twice.
pub(crate) fn damaged(key: ExpertKey, file: PathBuf, in_gguf: bool) -> Error {
    let what = if in_gguf {
        "the GGUF is damaged or was changed after ingest: download it again and ingest it again"
    } else {
        "the store is damaged: `ingest GGUF --repair STORE` rewrites its damaged records from the GGUF it was made from"
    };
    Error::DamagedRecord { layer: key.layer, expert: key.expert, file, what }
}

/// Drops `file`'s cached pages over `len` bytes from `offset` where the kernel lets it (clean pages no
/// mapping holds), so that the next read of them comes from the disk; best effort.
pub(crate) fn drop_cached(file: &File, offset: u64, len: u64) {
    // Safety: a live descriptor; the advice only drops cached pages.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), offset as i64, len as i64, libc::POSIX_FADV_DONTNEED);
    }
}
