//! Repairing a store: its damaged expert records and dense tensors rewritten from the GGUF it was made from,
//! then every checksum checked again.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::path::Path;

use crate::checksum::combine;
use crate::ingest::{DENSE_FILE, EXPERTS_FILE, PartRef, SegmentWriter, fresh_checkpoint, segments};
use crate::source::Source;
use crate::{DenseData, Error, ExpertKey, Result, Sha256State, Store};

/// What [`repair`] rewrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairSummary {
    /// The expert records rewritten.
    pub records: Vec<ExpertKey>,
    /// The dense tensors rewritten, by name.
    pub tensors: Vec<String>,
}

/// Finds the expert records and dense tensors of the complete store in `dir` that do not match their
/// checksums, rewrites just those from `source` (the GGUF, or a gguf-split set's first shard, the store was
/// made from: its header and size are checked first), and verifies the whole store again. Records and
/// tensors the store reads in place from the GGUF are the GGUF's own bytes: damage there cannot be
/// repaired from it, and the final verification names it.
///
/// # Errors
/// As [`Store::open`] and [`Store::verify`]; [`Error::NotTheSource`] for another GGUF than the store's (nothing
/// written then); [`Error::Io`] from the reads and writes.
pub fn repair(source: &Path, dir: &Path) -> Result<RepairSummary> {
    let store = Store::open(dir)?;
    let src = Source::open(source)?;
    let not_source = |what: &str| Error::NotTheSource { path: source.to_owned(), what: what.into() };
    if src.header_bytes != store.header_bytes() {
        return Err(not_source("its header differs"));
    }
    if src.size != store.manifest().source.size {
        return Err(not_source(&format!(
            "{} bytes, the store's source had {}",
            src.size,
            store.manifest().source.size
        )));
    }
    let layout = store.layout().clone();
    let in_gguf = store.experts_in_gguf().is_some();
    let records = if in_gguf { Vec::new() } else { store.damaged_records()? };
    let tensors: Vec<usize> = (store.damaged_dense(&store.map_dense()?)?.into_iter())
        .filter(|&t| !matches!(layout.dense[t].data, DenseData::InGguf { .. }))
        .collect();
    if !records.is_empty() || !tensors.is_empty() {
        let x = layout.experts.as_ref();
        let damaged: HashSet<usize> =
            records.iter().map(|k| (k.layer * x.map_or(0, |x| x.n_experts) + k.expert) as usize).collect();
        let segs: Vec<_> = (segments(&src, &layout, in_gguf).into_iter())
            .filter(|s| match s.part() {
                PartRef::Record { record, .. } => damaged.contains(&record),
                PartRef::Dense { tensor, .. } => tensors.contains(&tensor),
            })
            .collect();
        let paths = [dir.join(DENSE_FILE), dir.join(EXPERTS_FILE)];
        let open = |p: &Path| OpenOptions::new().write(true).open(p).map_err(Error::io(p));
        let (dense, experts) = (open(&paths[0])?, open(&paths[1])?);
        let mut writer = SegmentWriter::new(
            &src,
            [(&dense, &paths[0]), (&experts, &paths[1])],
            Sha256State::default(),
            1 << 20,
        );
        // First the replacements' checksums from the source, against the manifest's: a GGUF of the same
        // shape but other weights is refused before a byte is written.
        let mut state = fresh_checkpoint(&layout);
        for seg in &segs {
            writer.segment(&seg.hashed_only(), &mut state, &mut |_| {})?;
        }
        let m = store.manifest();
        let sum =
            |parts: &[Option<u64>]| combine(&parts.iter().map(|p| p.unwrap_or_default()).collect::<Vec<_>>());
        let records_match =
            damaged.iter().all(|&r| sum(&state.record_parts[r * 6..r * 6 + 6]) == m.record_checksums[r]);
        let tensors_match = tensors.iter().all(|&t| sum(&state.dense_parts[t]) == m.dense_checksums[t]);
        if !(records_match && tensors_match) {
            return Err(not_source(
                "its bytes for the damaged records or tensors do not match the store's checksums",
            ));
        }
        for seg in &segs {
            writer.segment(seg, &mut state, &mut |_| {})?;
        }
        dense.sync_all().map_err(Error::io(&paths[0]))?;
        experts.sync_all().map_err(Error::io(&paths[1]))?;
    }
    // Maps opened now see the rewritten bytes.
    Store::open(dir)?.verify()?;
    Ok(RepairSummary { records, tensors: tensors.iter().map(|&t| layout.dense[t].name.clone()).collect() })
}
