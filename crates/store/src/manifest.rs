//! `manifest.json`: what the store holds, where it came from, its checksums, and whether it is complete.
//! Written atomically (temp file, fsync, rename, fsync of the directory), so a crash leaves the old or the
//! new manifest, never a torn one.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checksum::Sha256State;
use crate::{Error, ExpertsInGguf, Layout, Result};

/// The `format` field of every manifest.
pub const FORMAT: &str = "diskformer-store";
/// The layout version this crate reads and writes.
pub const FORMAT_VERSION: u32 = 2;
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";

/// Where the store's data came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// The GGUF's path at ingest (a gguf-split set's first shard).
    pub path: PathBuf,
    /// Its size in bytes (a set's: its shards' sum).
    pub size: u64,
    /// Its modification time, seconds since the Unix epoch (a set's: its newest shard's).
    pub mtime: u64,
    /// sha256 of the whole file (a set's: of its shards concatenated in order), lowercase hex; known once the
    /// ingest is complete.
    pub sha256: Option<String>,
}

/// The state an interrupted ingest resumes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Source segments already written (in source order).
    pub segments_done: usize,
    /// Source bytes consumed (every byte before this has been hashed).
    pub source_offset: u64,
    /// The running sha256 of the source.
    pub sha256: Sha256State,
    /// Part hashes of each record so far, `record · 6 + part` (see [`crate::ExpertLayout::record_parts`]).
    pub record_parts: Vec<Option<u64>>,
    /// Part hashes of each dense tensor so far.
    pub dense_parts: Vec<Vec<Option<u64>>>,
}

/// The manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`FORMAT_VERSION`] for stores this crate writes.
    pub version: u32,
    /// The source GGUF.
    pub source: SourceInfo,
    /// Hash of the header bytes, the layout and the source size: an ingest resumes only into the same identity.
    pub identity: String,
    /// The layout.
    pub layout: Layout,
    /// Checksum per expert record, in record order (empty until complete).
    pub record_checksums: Vec<u64>,
    /// Checksum per dense tensor, in layout order (empty until complete).
    pub dense_checksums: Vec<u64>,
    /// Whether every byte has been written and checked.
    pub complete: bool,
    /// Seconds the ingest took (summed over resumed runs).
    pub ingest_seconds: f64,
    /// Resume state while incomplete.
    pub checkpoint: Option<Checkpoint>,
    /// Where the experts lie in the source GGUF when they were not copied into `experts.bin`.
    #[serde(default)]
    pub experts_in_gguf: Option<ExpertsInGguf>,
}

impl Manifest {
    /// Reads `dir/manifest.json`; `Ok(None)` when there is none.
    ///
    /// # Errors
    /// [`Error::BadManifest`] when it cannot be parsed or is of another format or version.
    pub fn load(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(MANIFEST);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path)(e)),
        };
        let bad = |what: String| Error::BadManifest { path: path.clone(), what };
        // Check the format tag first so a future version's changed fields give the helpful message.
        let probe: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON ({e})")))?;
        if probe.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(bad(format!("not a {FORMAT} manifest")));
        }
        let version = probe.get("version").and_then(|v| v.as_u64());
        if version != Some(u64::from(FORMAT_VERSION)) {
            return Err(bad(format!(
                "store format version {}, this build reads version {FORMAT_VERSION}: ingest the GGUF again \
                 into this directory (examples/ingest, or any run given the GGUF) to rebuild the store",
                version.map_or("missing".to_owned(), |v| v.to_string())
            )));
        }
        serde_json::from_value(probe).map(Some).map_err(|e| bad(format!("malformed ({e})")))
    }

    /// Writes `dir/manifest.json` atomically.
    ///
    /// # Errors
    /// [`Error::Io`] on any failure; the previous manifest then stays in place.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST);
        let tmp = dir.join(format!("{MANIFEST}.tmp"));
        let json = serde_json::to_vec_pretty(self).expect("manifest serialises");
        let mut f = File::create(&tmp).map_err(Error::io(&tmp))?;
        f.write_all(&json).map_err(Error::io(&tmp))?;
        f.sync_all().map_err(Error::io(&tmp))?;
        fs::rename(&tmp, &path).map_err(Error::io(&path))?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(Error::io(dir))?;
        Ok(())
    }
}
