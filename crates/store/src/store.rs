//! Opening a complete store, verifying it, and reading its expert records.

use std::alloc::{self, Layout as AllocLayout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use diskformer_gguf::Header;

use crate::ingest::{DENSE_FILE, EXPERTS_FILE, HEADER_FILE};
use crate::manifest::Manifest;
use crate::record_checks::{damaged, drop_cached};
use crate::{
    DenseData, Error, ExpertKey, ExpertLayout, ExpertPart, ExpertsInGguf, Layout, RecordChecks, RecordHasher,
    Result,
};

/// A complete store, opened read-only.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    manifest: Manifest,
    header: Header,
    header_bytes: Vec<u8>,
}

impl Store {
    /// Opens the store in `dir`, refusing one that is incomplete, of another format version, whose files do
    /// not have the sizes its layout gives, or whose experts lie in a GGUF that changed since ingest.
    ///
    /// # Errors
    /// [`Error::NotAStore`], [`Error::BadManifest`], [`Error::Incomplete`], [`Error::WrongFileSize`],
    /// [`Error::SourceChanged`], [`Error::Gguf`] for a damaged `header.bin`, or [`Error::Io`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        let dir = dir.as_ref().to_owned();
        let manifest = Manifest::load(&dir)?.ok_or_else(|| Error::NotAStore { dir: dir.clone() })?;
        if !manifest.complete {
            return Err(Error::Incomplete { dir });
        }
        let header_path = dir.join(HEADER_FILE);
        let header_bytes = std::fs::read(&header_path).map_err(Error::io(&header_path))?;
        let header = Header::parse(&header_bytes)
            .map_err(|source| Error::Gguf { path: header_path.clone(), source })?;
        let mut layout = Layout::plan(&header)?;
        if manifest.experts_in_gguf.is_some() {
            // Where the dense tensors kept in the GGUF lie is the manifest's (its checksums check them).
            let kept = &manifest.layout.dense;
            if kept.iter().any(|t| matches!(t.data, DenseData::Raw { .. })) {
                return Err(Error::BadManifest {
                    path: dir.join(crate::manifest::MANIFEST),
                    what: "it reads its experts from the GGUF but copied its dense tensors, as stores made before \
                           the dense tensors stayed in the GGUF too; ingest the GGUF again"
                        .into(),
                });
            }
            layout.dense_in_gguf(|i| match kept.get(i).map(|t| t.data) {
                Some(DenseData::InGguf { file, data }) => (file, data.offset),
                _ => (usize::MAX, u64::MAX),
            });
            let files = manifest.experts_in_gguf.as_ref().map_or(&[][..], |g| &g.files[..]);
            for t in kept {
                if let DenseData::InGguf { file, data } = t.data
                    && files.get(file).is_none_or(|f| data.end() > f.size)
                {
                    return Err(Error::BadManifest {
                        path: dir.join(crate::manifest::MANIFEST),
                        what: format!(
                            "dense tensor {:?} lies past the end of its GGUF file; ingest again",
                            t.name
                        ),
                    });
                }
            }
        }
        if layout != manifest.layout {
            return Err(Error::BadManifest {
                path: dir.join(crate::manifest::MANIFEST),
                what: "its layout is not the one header.bin gives".into(),
            });
        }
        if let Some(in_gguf) = &manifest.experts_in_gguf {
            in_gguf.check_files()?;
            if let Some(why) = manifest.layout.experts.as_ref().and_then(|x| in_gguf.misplaced(x)) {
                return Err(Error::BadManifest {
                    path: dir.join(crate::manifest::MANIFEST),
                    what: format!("{why}; ingest the GGUF again"),
                });
            }
        }
        let experts_bytes = match &manifest.experts_in_gguf {
            Some(_) => 0,
            None => layout.experts.as_ref().map_or(0, ExpertLayout::file_bytes),
        };
        let store = Store { dir, manifest, header, header_bytes };
        for (name, expected) in [
            (HEADER_FILE, layout.header_bytes),
            (DENSE_FILE, layout.dense_bytes),
            (EXPERTS_FILE, experts_bytes),
        ] {
            let path = store.dir.join(name);
            let size = std::fs::metadata(&path).map_err(Error::io(&path))?.len();
            if size != expected {
                return Err(Error::WrongFileSize { path, size, expected });
            }
        }
        Ok(store)
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.manifest.layout
    }

    /// The source GGUF's header (metadata and tensor infos), re-parsed from `header.bin`.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The bytes of `header.bin`.
    pub fn header_bytes(&self) -> &[u8] {
        &self.header_bytes
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of `dense.bin`.
    pub fn dense_path(&self) -> PathBuf {
        self.dir.join(DENSE_FILE)
    }

    /// Where the experts lie in the source GGUF, when the store did not copy them.
    pub fn experts_in_gguf(&self) -> Option<&ExpertsInGguf> {
        self.manifest.experts_in_gguf.as_ref()
    }

    /// Path of `experts.bin` (one record per expert at [`ExpertLayout::record_offset`]; empty when the
    /// experts are read from the GGUF).
    pub fn experts_path(&self) -> PathBuf {
        self.dir.join(EXPERTS_FILE)
    }

    /// Recomputes every checksum and names the first dense tensor or record that does not match.
    ///
    /// # Errors
    /// [`Error::ChecksumMismatch`] naming the tensor or record, or [`Error::Io`].
    pub fn verify(&self) -> Result<()> {
        self.check_dense(&self.map_dense()?)?;
        match self.damaged_records()?.first() {
            Some(key) => Err(Error::ChecksumMismatch {
                what: format!("expert record (layer {}, expert {})", key.layer, key.expert),
            }),
            None => Ok(()),
        }
    }

    /// Reads every expert record once and returns those that do not match their checksums.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::ShortRead`] from the reads; [`Error::BadManifest`] without a checksum for
    /// each record.
    pub fn damaged_records(&self) -> Result<Vec<ExpertKey>> {
        let Some(x) = &self.layout().experts else { return Ok(Vec::new()) };
        let (reader, checks) = (self.record_reader(false)?, self.record_checks()?);
        let mut buf = RecordBuf::new(x.record_bytes as usize);
        let mut damaged = Vec::new();
        for key in (0..x.n_records()).map(|i| x.key(i)) {
            reader.read(key, &mut buf)?;
            if !checks.matches(key, buf.as_slice()) {
                damaged.push(key);
            }
        }
        Ok(damaged)
    }

    /// A reader of expert records; with `direct`, O_DIRECT is used where the file system supports it, for
    /// `experts.bin` and for the GGUF's files of records read in place (whose slices are not page-aligned:
    /// each read takes the pages around its bytes through an aligned buffer).
    ///
    /// # Errors
    /// [`Error::Io`] when `experts.bin` or a GGUF cannot be opened; [`Error::BadExpertTensors`] for a store
    /// without experts.
    pub fn record_reader(&self, direct: bool) -> Result<RecordReader> {
        let layout = self
            .layout()
            .experts
            .clone()
            .ok_or_else(|| Error::BadExpertTensors { what: "the model has no expert tensors".into() })?;
        let (backing, direct) = match self.experts_in_gguf() {
            Some(in_gguf) => {
                let paths: Vec<&Path> = (0..in_gguf.files.len()).map(|i| in_gguf.path(i)).collect();
                let (files, direct) = open_for_reads(&paths, direct)?;
                (Backing::InGguf { files, in_gguf: in_gguf.clone() }, direct)
            }
            None => {
                let path = self.dir.join(EXPERTS_FILE);
                let (mut files, direct) = open_for_reads(&[&path], direct)?;
                (Backing::Records { file: files.remove(0), path }, direct)
            }
        };
        Ok(RecordReader { backing, layout, direct, checks: None, activity: Mutex::default() })
    }
}

/// Opens `paths` for reading, with O_DIRECT when `direct` asks and every one of their file systems takes it
/// (tmpfs and some others refuse it: then all are read through the page cache); returns whether they are
/// read directly.
fn open_for_reads(paths: &[&Path], direct: bool) -> Result<(Vec<File>, bool)> {
    let buffered = || paths.iter().map(|p| File::open(p).map_err(Error::io(p))).collect::<Result<Vec<_>>>();
    if !direct {
        return Ok((buffered()?, false));
    }
    let mut files = Vec::with_capacity(paths.len());
    for p in paths {
        match OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(p) {
            Ok(f) => files.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok((buffered()?, false)),
            Err(e) => return Err(Error::io(p)(e)),
        }
    }
    Ok((files, true))
}

/// Reads expert records with `pread`; shareable across reader threads (`&self`). With
/// [`with_checks`](RecordReader::with_checks), [`read`](RecordReader::read) checks each record against its
/// checksum, and callers that assemble a record from parts check it with
/// [`with_reread`](RecordReader::with_reread).
#[derive(Debug)]
pub struct RecordReader {
    backing: Backing,
    layout: ExpertLayout,
    direct: bool,
    checks: Option<RecordChecks>,
    activity: Mutex<Activity>,
}

/// What a [`RecordReader`] did: the time it had a read in flight (on any thread) and the bytes read. Over
/// a run, `bytes / busy` is the rate the disk served its reads at, and `busy` over the run's time how much
/// of it the disk worked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadActivity {
    /// Time with at least one read in flight.
    pub busy: Duration,
    /// Bytes read.
    pub bytes: u64,
    /// Records read again after their bytes did not match their checksum.
    pub rereads: u64,
}

#[derive(Debug, Default)]
struct Activity {
    done: ReadActivity,
    in_flight: usize,
    /// When `in_flight` last rose from 0.
    since: Option<Instant>,
}

/// Where a [`RecordReader`] reads records from.
#[derive(Debug)]
enum Backing {
    /// `experts.bin`, a record at its [`ExpertLayout::record_offset`].
    Records { file: File, path: PathBuf },
    /// The GGUF's files: each part of a record its expert's slice ([`ExpertsInGguf`]).
    InGguf { files: Vec<File>, in_gguf: ExpertsInGguf },
}

/// Alignment of record buffers (O_DIRECT's granularity).
pub const BUFFER_ALIGN: usize = 4096;

/// Bytes of each part when a record of `record_bytes` is read in `parts` reads: whole [`BUFFER_ALIGN`] pages,
/// so that O_DIRECT can read each part on its own (the last part may be shorter).
pub fn part_bytes(record_bytes: usize, parts: usize) -> usize {
    record_bytes.div_ceil(parts.max(1)).next_multiple_of(BUFFER_ALIGN)
}

impl RecordReader {
    /// Checks every record [`read`](Self::read) reads, and those checked with
    /// [`with_reread`](Self::with_reread), against `checks`.
    pub fn with_checks(mut self, checks: RecordChecks) -> Self {
        self.checks = Some(checks);
        self
    }

    /// Whether reads are checked.
    pub fn checks_reads(&self) -> bool {
        self.checks.is_some()
    }

    /// Whether `record` (a record of `key`, at least a record long) matches its checksum; `true` when reads
    /// are not checked.
    pub fn matches(&self, key: ExpertKey, record: &[u8]) -> bool {
        self.checks.as_ref().is_none_or(|c| c.matches(key, record))
    }

    /// A check of `key`'s record to take as its bytes pass by ([`RecordHasher`]); `None` when reads are not
    /// checked.
    pub fn hasher(&self, key: ExpertKey) -> Option<RecordHasher> {
        self.checks.as_ref().map(|c| c.hasher(key))
    }

    /// Runs `attempt`, a read of the record of `key` that returns whether its bytes
    /// [`match`](Self::matches); when they do not, drops the record's pages from the page cache (so that a
    /// fault on the way from the disk is read again, not served from memory) and runs it once more.
    ///
    /// # Errors
    /// `attempt`'s error, or [`Error::DamagedRecord`] naming the record and its file when the second read
    /// does not match either.
    pub fn with_reread<E: From<Error>>(
        &self,
        key: ExpertKey,
        mut attempt: impl FnMut() -> Result<bool, E>,
    ) -> Result<(), E> {
        if attempt()? {
            return Ok(());
        }
        self.forget(key);
        self.activity.lock().unwrap_or_else(PoisonError::into_inner).done.rereads += 1;
        if attempt()? {
            return Ok(());
        }
        let (file, in_gguf) = match &self.backing {
            Backing::Records { path, .. } => (path.clone(), false),
            Backing::InGguf { in_gguf, .. } => {
                (in_gguf.path(in_gguf.locate(key, ExpertPart::Gate).0).to_owned(), true)
            }
        };
        Err(damaged(key, file, in_gguf).into())
    }

    /// Drops the pages of the record of `key` from the page cache where the kernel lets it (clean pages no
    /// other mapping pins); best effort.
    fn forget(&self, key: ExpertKey) {
        let ranges: Vec<(&File, u64, u64)> = match &self.backing {
            Backing::Records { file, .. } => {
                vec![(file, self.layout.record_offset(key), self.layout.record_bytes)]
            }
            Backing::InGguf { files, in_gguf } => ExpertPart::ALL
                .iter()
                .map(|&p| {
                    let (f, at, len) = in_gguf.locate(key, p);
                    (&files[f], at, len)
                })
                .collect(),
        };
        for (file, offset, len) in ranges {
            drop_cached(file, offset, len);
        }
    }

    /// Whether reads bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The record layout.
    pub fn layout(&self) -> &ExpertLayout {
        &self.layout
    }

    /// The reads since the reader opened or [`reset_activity`](Self::reset_activity), the one in flight
    /// counted up to now.
    pub fn activity(&self) -> ReadActivity {
        let a = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        let running = a.since.map_or(Duration::ZERO, |t| t.elapsed());
        ReadActivity { busy: a.done.busy + running, ..a.done }
    }

    /// Zeroes the activity (a read in flight counts from now).
    pub fn reset_activity(&self) {
        let mut a = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        a.done = ReadActivity::default();
        a.since = a.since.map(|_| Instant::now());
    }

    /// Marks a read of `len` bytes in flight until `f` returns (its bytes count if it succeeded).
    fn timed(&self, len: usize, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let lock = || self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        {
            let mut a = lock();
            a.in_flight += 1;
            a.since.get_or_insert_with(Instant::now);
        }
        let out = f();
        let mut a = lock();
        a.in_flight -= 1;
        if out.is_ok() {
            a.done.bytes += len as u64;
        }
        if a.in_flight == 0
            && let Some(since) = a.since.take()
        {
            a.done.busy += since.elapsed();
        }
        out
    }

    /// Reads the record of `key` into `buf` (at least one record long); with checks, reads it again when it
    /// does not match its checksum ([`with_reread`](Self::with_reread)).
    ///
    /// # Errors
    /// [`Error::NoSuchRecord`], [`Error::BadBuffer`], [`Error::ShortRead`] naming the record,
    /// [`Error::DamagedRecord`], or [`Error::Io`].
    pub fn read(&self, key: ExpertKey, buf: &mut RecordBuf) -> Result<()> {
        self.with_reread(key, || {
            self.read_into(key, buf.as_mut_slice())?;
            Ok(self.matches(key, buf.as_slice()))
        })
    }

    /// Reads the record of `key` into the first record's bytes of `dst`: any memory (mapped GPU staging, so a
    /// record is copied once on its way to the device). With O_DIRECT, `dst` must start on a
    /// [`BUFFER_ALIGN`] boundary.
    ///
    /// # Errors
    /// As [`read`](Self::read); [`Error::BadBuffer`] for a short or (with O_DIRECT) misaligned `dst`.
    pub fn read_into(&self, key: ExpertKey, dst: &mut [u8]) -> Result<()> {
        self.read_part_into(key, 0, dst, self.layout.record_bytes as usize)
    }

    /// Reads record bytes `start..start + dst.len()` of `key` into `dst` as
    /// [`read_part_into`](Self::read_part_into) does, and hands them to `hasher` on the way: in chunks of
    /// `bounce`'s length read into `bounce` (small enough to stay in the CPU's cache), hashed there and copied
    /// on, so that a checked read crosses memory once, as an unchecked one does, even where `dst` is
    /// write-combined staging memory (slow to read back for a hash).
    ///
    /// # Errors
    /// As [`read_part_into`](Self::read_part_into); [`Error::BadBuffer`] for an empty `bounce`.
    pub fn read_part_hashed(
        &self,
        key: ExpertKey,
        start: usize,
        dst: &mut [u8],
        bounce: &mut [u8],
        hasher: &mut RecordHasher,
    ) -> Result<()> {
        if bounce.is_empty() {
            return Err(Error::BadBuffer { len: 0, align: 0, needed: 1, needed_align: 1 });
        }
        let chunk = bounce.len();
        for (i, out) in dst.chunks_mut(chunk).enumerate() {
            let (at, bounce) = (start + i * chunk, &mut bounce[..out.len()]);
            self.read_part_into(key, at, bounce, out.len())?;
            hasher.update(at, bounce);
            out.copy_from_slice(bounce);
        }
        Ok(())
    }

    /// Reads `len` bytes of the record of `key`, from byte `start` of the record, into the start of `dst`:
    /// several threads can read one record's parts at once. With O_DIRECT on `experts.bin`, `dst`, `start`
    /// and `len` must be [`BUFFER_ALIGN`]-aligned (the record's last part may end at the record's end);
    /// records read in place from the GGUF take any.
    ///
    /// # Errors
    /// As [`read_into`](Self::read_into); [`Error::BadBuffer`] for a part past the record.
    pub fn read_part_into(&self, key: ExpertKey, start: usize, dst: &mut [u8], len: usize) -> Result<()> {
        let x = &self.layout;
        if key.layer >= x.n_layers || key.expert >= x.n_experts {
            return Err(Error::NoSuchRecord {
                layer: key.layer,
                expert: key.expert,
                n_layers: x.n_layers,
                n_experts: x.n_experts,
            });
        }
        let record = x.record_bytes as usize;
        let addr = dst.as_ptr() as usize;
        let misaligned = self.direct
            && matches!(self.backing, Backing::Records { .. })
            && !(addr.is_multiple_of(BUFFER_ALIGN)
                && start.is_multiple_of(BUFFER_ALIGN)
                && (len.is_multiple_of(BUFFER_ALIGN) || start + len == record));
        if dst.len() < len || start + len > record || misaligned {
            return Err(Error::BadBuffer {
                len: dst.len(),
                align: addr & addr.wrapping_neg(),
                needed: x.record_bytes,
                needed_align: BUFFER_ALIGN,
            });
        }
        let dst = &mut dst[..len];
        match &self.backing {
            Backing::Records { file, path } => {
                let offset = x.record_offset(key) + start as u64;
                self.timed(len, || pread(key, (file, path), dst, offset))
            }
            Backing::InGguf { files, in_gguf } => self.timed(len, || {
                // The record's bytes from `start`: each part's slice where the record layout puts it, the
                // gaps between parts zero (written once: `dst` may be write-combined staging memory).
                let (start, end) = (start as u64, (start + len) as u64);
                let mut regions = ExpertsInGguf::record_regions(x, key.layer);
                regions.sort_by_key(|(_, r)| r.offset);
                let mut done = start;
                for (part, r) in regions {
                    let (from, to) = (r.offset.max(start), r.end().min(end));
                    if from >= to {
                        continue;
                    }
                    dst[(done - start) as usize..(from - start) as usize].fill(0);
                    let (file, at, _) = in_gguf.locate(key, part);
                    let out = &mut dst[(from - start) as usize..(to - start) as usize];
                    let at = at + (from - r.offset);
                    if self.direct {
                        pread_unaligned_direct(key, (&files[file], in_gguf.path(file)), out, at)?;
                    } else {
                        pread(key, (&files[file], in_gguf.path(file)), out, at)?;
                    }
                    done = to;
                }
                dst[(done.max(start) - start) as usize..].fill(0);
                Ok(())
            }),
        }
    }
}

/// Reads all of `dst` from `offset` of `file`, naming `key` in a short read.
fn pread(key: ExpertKey, (file, path): (&File, &Path), dst: &mut [u8], offset: u64) -> Result<()> {
    let got = read_up_to(file, path, dst, offset)?;
    if got < dst.len() {
        return Err(Error::ShortRead {
            layer: key.layer,
            expert: key.expert,
            got: got as u64,
            expected: dst.len() as u64,
        });
    }
    Ok(())
}

/// Reads `dst` from `offset` of `file` until it is full or the file ends; returns the bytes read.
fn read_up_to(file: &File, path: &Path, dst: &mut [u8], offset: u64) -> Result<usize> {
    let mut got = 0usize;
    while got < dst.len() {
        match file.read_at(&mut dst[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path)(e)),
        }
    }
    Ok(got)
}

/// The aligned buffer an O_DIRECT read of bytes that are not page-aligned goes through, a thread's own.
const UNALIGNED_BOUNCE: usize = 1 << 20;

thread_local! {
    static BOUNCE: std::cell::RefCell<Option<RecordBuf>> = const { std::cell::RefCell::new(None) };
}

/// Reads all of `dst` from `offset` of `file`, opened with O_DIRECT, where neither need be page-aligned: the
/// pages around them through the thread's aligned buffer, [`UNALIGNED_BOUNCE`] bytes at a time (the last
/// page may end past the file's end). Names `key` in a short read.
fn pread_unaligned_direct(
    key: ExpertKey,
    (file, path): (&File, &Path),
    dst: &mut [u8],
    offset: u64,
) -> Result<()> {
    let expected = dst.len() as u64;
    let short =
        |got: usize| Error::ShortRead { layer: key.layer, expert: key.expert, got: got as u64, expected };
    BOUNCE.with(|bounce| {
        let mut bounce = bounce.borrow_mut();
        let bounce = bounce.get_or_insert_with(|| RecordBuf::new(UNALIGNED_BOUNCE));
        let mut done = 0;
        while done < dst.len() {
            let at = offset + done as u64;
            let page = at - at % BUFFER_ALIGN as u64;
            let skip = (at - page) as usize;
            let want = (skip + dst.len() - done).next_multiple_of(BUFFER_ALIGN).min(bounce.len());
            let buf = &mut bounce.as_mut_slice()[..want];
            let got = read_up_to(file, path, buf, page)?;
            if got <= skip {
                return Err(short(done));
            }
            let n = (got - skip).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&buf[skip..skip + n]);
            done += n;
        }
        Ok(())
    })
}

/// A buffer aligned to [`BUFFER_ALIGN`], as O_DIRECT reads need, in memory of its own that goes back to the
/// system when it drops.
pub struct RecordBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// Mapped on its own (anonymous memory); otherwise from the global allocator.
    mapped: bool,
}

// Safety: RecordBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for RecordBuf {}
// Safety: shared access only reads.
unsafe impl Sync for RecordBuf {}

impl RecordBuf {
    /// A zeroed buffer of `len` bytes (rounded up to the alignment).
    pub fn new(len: usize) -> RecordBuf {
        let len = len.div_ceil(BUFFER_ALIGN).max(1) * BUFFER_ALIGN;
        // Not from malloc: once glibc frees a block it had mapped, it raises its mapping threshold to that
        // block's size, so that later record-sized buffers come from its arenas and stay resident after they
        // are freed (6.6 GB after an engine with a 16 GB host tier closed). Populated at once, as the
        // allocator's zeroing touched every page: host-tier reads take buffers whose pages are in.
        if let Some(ptr) = map_anonymous(len) {
            return RecordBuf { ptr, len, mapped: true };
        }
        let layout = AllocLayout::from_size_align(len, BUFFER_ALIGN).expect("valid layout");
        // Safety: the layout has non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        RecordBuf { ptr, len, mapped: false }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: at least one aligned block).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // Safety: ptr is valid for len initialised (zeroed) bytes for self's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // Safety: as in as_slice, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for RecordBuf {
    fn drop(&mut self) {
        if self.mapped {
            // Safety: mapped in `new` with this length, and unmapped only here.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            return;
        }
        // Safety: allocated in `new` with this exact layout.
        unsafe {
            alloc::dealloc(self.ptr.as_ptr(), AllocLayout::from_size_align_unchecked(self.len, BUFFER_ALIGN))
        }
    }
}

/// `len` bytes of zeroed anonymous memory, page-aligned (so [`BUFFER_ALIGN`]-aligned), its pages mapped in
/// where the system offers it; `None` where the system refuses (the caller falls back to the allocator).
fn map_anonymous(len: usize) -> Option<std::ptr::NonNull<u8>> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // Safety: a new private anonymous mapping aliases nothing.
    let ptr =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if ptr == libc::MAP_FAILED { None } else { std::ptr::NonNull::new(ptr.cast()) }
}

impl std::fmt::Debug for RecordBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordBuf({} bytes)", self.len)
    }
}
