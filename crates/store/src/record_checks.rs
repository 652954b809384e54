//! Every expert record's checksum from the manifest, to check a record's bytes where they are read (the
//! GPU pool's loads, the host tier, the CPU tier's mapped records) before anything computes on them.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3Default;

use crate::checksum::{combine, part_hash};
use crate::layout::Region;
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
        self.sum(key).is_some_and(|sum| combine(&parts.map(part_hash)) == sum)
    }

    /// The checksum of `key`'s record; `None` past the layout.
    fn sum(&self, key: ExpertKey) -> Option<u64> {
        let x = &self.layout;
        if key.layer >= x.n_layers || key.expert >= x.n_experts {
            return None;
        }
        Some(self.sums[key.layer as usize * x.n_experts as usize + key.expert as usize])
    }

    /// Checks `key`'s record as its bytes stream past in pieces ([`RecordHasher`]).
    pub fn hasher(&self, key: ExpertKey) -> RecordHasher {
        let parts = if key.layer < self.layout.n_layers {
            self.layout.record_parts(key.layer)
        } else {
            [Region { offset: 0, len: 0 }; 6]
        };
        RecordHasher { parts, fed: [0; 6], states: Default::default(), sum: self.sum(key), in_order: true }
    }
}

/// A record's check taken as its bytes pass by in record order, in pieces of any size: a load hashes each
/// piece while it is in the cache on its way to the device, instead of reading the whole record once more
/// from memory after it was copied. Bytes between the checksum's parts are ignored.
#[derive(Clone)]
pub struct RecordHasher {
    parts: [Region; 6],
    /// Bytes of each part hashed so far.
    fed: [u64; 6],
    states: [Xxh3Default; 6],
    /// The manifest's checksum; `None` for a key past the layout (which never matches).
    sum: Option<u64>,
    /// Every piece so far continued each part where the last left it.
    in_order: bool,
}

impl RecordHasher {
    /// Hashes `bytes`, the record's bytes from offset `start`. Pieces must come in record order, each byte
    /// once; anything else makes [`matches`](Self::matches) false.
    pub fn update(&mut self, start: usize, bytes: &[u8]) {
        let (start, end) = (start as u64, (start + bytes.len()) as u64);
        for ((part, fed), state) in self.parts.iter().zip(&mut self.fed).zip(&mut self.states) {
            let (from, to) = (start.max(part.offset), end.min(part.end()));
            if from >= to {
                continue;
            }
            if from != part.offset + *fed {
                self.in_order = false;
                return;
            }
            state.update(&bytes[(from - start) as usize..(to - start) as usize]);
            *fed += to - from;
        }
    }

    /// Whether every part was hashed whole and the record matches its checksum.
    pub fn matches(&self) -> bool {
        let whole = self.parts.iter().zip(&self.fed).all(|(part, &fed)| fed == part.len);
        let hashes = self.states.each_ref().map(Xxh3Default::digest);
        self.in_order && whole && self.sum == Some(combine(&hashes))
    }
}

impl std::fmt::Debug for RecordHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordHasher").field("parts", &self.parts).field("fed", &self.fed).finish()
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
