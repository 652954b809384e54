//! The expert records mapped into memory, for computing experts where they lie (the engine's CPU tier):
//! `experts.bin`, or the GGUF's files when the experts were not copied ([`ExpertsInGguf`]).

use std::fs::File;

use memmap2::Mmap;

use std::path::PathBuf;

use crate::record_checks::{damaged, drop_cached};
use crate::{Error, ExpertKey, ExpertLayout, ExpertPart, ExpertsInGguf, RecordChecks, Result, Store};

/// A record's bytes as mapped: whole (`experts.bin`), or its three parts (in the GGUF).
#[derive(Clone, Copy, Debug)]
pub enum RecordBytes<'a> {
    /// The record, laid out as [`ExpertLayout`] says.
    Whole(&'a [u8]),
    /// Gate, up and down (records of blocks only).
    Parts([&'a [u8]; 3]),
}

impl<'a> RecordBytes<'a> {
    /// The bytes of `part` of a record of `layer` (records of blocks).
    ///
    /// # Panics
    /// When `layout` has no such part (records of planes).
    pub fn part(&self, layout: &ExpertLayout, layer: u32, part: ExpertPart) -> &'a [u8] {
        match *self {
            RecordBytes::Whole(record) => {
                let (_, r) = layout.part(layer, part).expect("records of blocks have every part");
                &record[r.offset as usize..r.end() as usize]
            }
            RecordBytes::Parts(parts) => parts[part as usize],
        }
    }
}

/// The experts' files mapped read-only.
#[derive(Debug)]
pub struct ExpertMap {
    maps: Vec<Mmap>,
    /// The files mapped, open (to drop a damaged record's pages from the page cache), and their paths.
    files: Vec<(File, PathBuf)>,
    layout: ExpertLayout,
    in_gguf: Option<ExpertsInGguf>,
}

impl Store {
    /// Maps the files holding the expert records.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be opened or mapped; [`Error::BadExpertTensors`] for a store without
    /// experts; [`Error::WrongFileSize`] for an `experts.bin` shorter than its layout.
    pub fn map_experts(&self) -> Result<ExpertMap> {
        let layout = self
            .layout()
            .experts
            .clone()
            .ok_or_else(|| Error::BadExpertTensors { what: "the model has no expert tensors".into() })?;
        let in_gguf = self.experts_in_gguf().cloned();
        let paths = match &in_gguf {
            Some(g) => g.files.iter().map(|f| f.path.clone()).collect(),
            None => vec![self.experts_path()],
        };
        let files = paths
            .into_iter()
            .map(|path| Ok((File::open(&path).map_err(Error::io(&path))?, path)))
            .collect::<Result<Vec<_>>>()?;
        let maps = files
            .iter()
            .map(|(file, path)| {
                // Safety: a complete store's files, and the GGUF it reads in place (checked unchanged at
                // open), are not rewritten while the store is in use; a file truncated under the mapping by
                // another process would fault, as any reader of the store would fail.
                unsafe { Mmap::map(file) }.map_err(Error::io(path))
            })
            .collect::<Result<Vec<_>>>()?;
        if in_gguf.is_none() && (maps[0].len() as u64) < layout.file_bytes() {
            let (path, size, expected) = (files[0].1.clone(), maps[0].len() as u64, layout.file_bytes());
            return Err(Error::WrongFileSize { path, size, expected });
        }
        Ok(ExpertMap { maps, files, layout, in_gguf })
    }
}

impl ExpertMap {
    /// The record layout.
    pub fn layout(&self) -> &ExpertLayout {
        &self.layout
    }

    /// The bytes of the record of `key`.
    pub fn record(&self, key: ExpertKey) -> RecordBytes<'_> {
        let slice = |&(map, offset, len): &(usize, usize, usize)| &self.maps[map][offset..offset + len];
        match self.ranges(key).as_slice() {
            [a, b, c] => RecordBytes::Parts([slice(a), slice(b), slice(c)]),
            [whole] => RecordBytes::Whole(slice(whole)),
            _ => unreachable!("a record is one range or three"),
        }
    }

    /// Maps in the pages of the record of `key` in one call per range (`MADV_POPULATE_READ`): touched one by
    /// one, a 5 MB record's 1,220 page faults cost more than reading it. Best effort: kernels before Linux
    /// 5.14 refuse the advice, and the pages then fault in as read.
    pub fn populate(&self, key: ExpertKey) {
        for (map, offset, len) in self.ranges(key) {
            #[cfg(target_os = "linux")]
            let _ = self.maps[map].advise_range(memmap2::Advice::PopulateRead, offset, len);
            #[cfg(not(target_os = "linux"))]
            let _ = (map, offset, len);
        }
    }

    /// Maps in the record of `key` ([`populate`](Self::populate)) and checks it against `checks`; when it does
    /// not match, drops its pages from this mapping and the page cache, so that they are read from the disk
    /// again (a transient fault), and checks it once more.
    ///
    /// # Errors
    /// [`Error::DamagedRecord`] naming the record and its (first) file when the second check fails too.
    pub fn check(&self, key: ExpertKey, checks: &RecordChecks) -> Result<()> {
        let matches = || match self.record(key) {
            RecordBytes::Whole(record) => checks.matches(key, record),
            RecordBytes::Parts(parts) => checks.matches_blocks(key, parts),
        };
        self.populate(key);
        if matches() {
            return Ok(());
        }
        for (map, offset, len) in self.ranges(key) {
            // Safety: read-only shared file mappings: dropping their pages makes the next access fault them
            // in from the file again; nothing borrows these pages across this call but the checks above.
            #[cfg(target_os = "linux")]
            let _ = unsafe {
                self.maps[map].unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            };
            drop_cached(&self.files[map].0, offset as u64, len as u64);
        }
        self.populate(key);
        if matches() {
            return Ok(());
        }
        let first = self.ranges(key)[0].0;
        Err(damaged(key, self.files[first].1.clone(), self.in_gguf.is_some()))
    }

    /// Whether every page of the record of `key` is in the page cache (`mincore`; `false` where it cannot
    /// tell). `resident` is scratch.
    pub fn cached(&self, key: ExpertKey, resident: &mut Vec<u8>) -> bool {
        self.ranges(key).into_iter().all(|(map, offset, len)| cached(&self.maps[map], offset, len, resident))
    }

    /// Where the record of `key` lies: (map, offset, length), one range in `experts.bin` or gate, up and
    /// down in the GGUF's files.
    fn ranges(&self, key: ExpertKey) -> Vec<(usize, usize, usize)> {
        match &self.in_gguf {
            None => vec![(0, self.layout.record_offset(key) as usize, self.layout.record_bytes as usize)],
            Some(g) => ExpertPart::ALL
                .iter()
                .map(|&p| {
                    let (file, at, len) = g.locate(key, p);
                    (file, at as usize, len as usize)
                })
                .collect(),
        }
    }
}

/// Whether every page of `map[offset..][..len]` is in the page cache.
fn cached(map: &Mmap, offset: usize, len: usize, resident: &mut Vec<u8>) -> bool {
    #[cfg(unix)]
    {
        // Safety: `sysconf` has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        if offset + len > map.len() {
            return false;
        }
        // mincore takes whole pages: from the one holding the range's first byte (maps start on a page).
        let start = offset / page * page;
        let len = offset + len - start;
        resident.resize(len.div_ceil(page), 0);
        // Safety: the range lies inside the live mapping (checked), starts on a page, and `resident` holds a
        // byte for each of its pages.
        let rc = unsafe {
            libc::mincore(map.as_ptr().add(start) as *mut libc::c_void, len, resident.as_mut_ptr().cast())
        };
        rc == 0 && resident.iter().all(|r| r & 1 == 1)
    }
    #[cfg(not(unix))]
    {
        let _ = (map, offset, len, resident);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_just_written_is_cached_from_any_offset_and_a_range_past_the_map_is_not() {
        let path = std::env::temp_dir().join(format!("diskformer-cached-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 3 * 4096]).unwrap();
        let file = File::open(&path).unwrap();
        // Safety: this test's own file, unchanged while mapped.
        let map = unsafe { Mmap::map(&file) }.unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut resident = Vec::new();
        if cfg!(target_os = "linux") {
            assert!(cached(&map, 0, 3 * 4096, &mut resident));
            assert!(cached(&map, 100, 4096, &mut resident), "a range inside pages that are cached");
        }
        assert!(!cached(&map, 4096, 3 * 4096, &mut resident), "past the mapping");
    }
}
