//! Ingest: one sequential pass over a local GGUF that writes `header.bin`, `dense.bin` and `experts.bin`,
//! hashing as it goes, with a checkpoint at least every `checkpoint_bytes` of source so an ingest killed at
//! any moment resumes and ends byte-identical to a clean one.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use diskformer_gguf::TensorType;
use xxhash_rust::xxh3::Xxh3;

use crate::checksum::{Sha256State, combine};
use crate::layout::expert_tensor;
use crate::manifest::{Checkpoint, FORMAT, FORMAT_VERSION, Manifest, SourceInfo};
use crate::source::Source;
use crate::{DenseData, Error, ExpertPart, ExpertsInGguf, Layout, PartInFile, Region, Result};

/// File names inside a store directory.
pub const HEADER_FILE: &str = "header.bin";
/// Dense tensors.
pub const DENSE_FILE: &str = "dense.bin";
/// Expert records.
pub const EXPERTS_FILE: &str = "experts.bin";

/// An expected size and sha256 of the source (a gguf-split set's: of its shards concatenated in order); a
/// different file is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// Size in bytes.
    pub size: u64,
    /// sha256, hex (either case).
    pub sha256: String,
}

/// How to ingest.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    /// Checkpoint after at least this many source bytes (default 1 GiB).
    pub checkpoint_bytes: u64,
    /// Largest single read of the source (default 16 MiB); memory use is about twice this.
    pub chunk_bytes: usize,
    /// Refuse a source that is not this file.
    pub pin: Option<Pin>,
    /// Copy the experts into `experts.bin` (default). Off, a model whose records are of blocks (any type mix
    /// but uniform Q8_0 or Q4_0) keeps its experts in the GGUF, read in place ([`ExpertsInGguf`]), and its
    /// dense tensors but the Q8_0 ones ([`DenseData::InGguf`]): the store then holds the header and the Q8_0
    /// planes alone, and needs the GGUF where it was, unchanged.
    pub copy_experts: bool,
    /// Take a complete store of this same source made the other way (experts copied, or kept in the GGUF)
    /// as it is, instead of ingesting it again (default off; `Engine::open_gguf` sets it, so that a flag left
    /// at its default neither copies a model again nor throws a copy away).
    pub either_mode: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            checkpoint_bytes: 1 << 30,
            chunk_bytes: 16 << 20,
            pin: None,
            copy_experts: true,
            either_mode: false,
        }
    }
}

/// Progress of an ingest, reported after every chunk.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Source bytes consumed, including those done before a resume.
    pub done: u64,
    /// Source size.
    pub total: u64,
    /// Bytes per second in this run.
    pub bytes_per_sec: f64,
}

/// What an ingest did.
#[derive(Clone, Debug)]
pub struct IngestSummary {
    /// Source bytes read in this run.
    pub bytes_read: u64,
    /// Seconds this run took.
    pub seconds: f64,
    /// Where this run resumed from, if it resumed.
    pub resumed_from: Option<u64>,
    /// The store was already complete for this source; nothing was done.
    pub up_to_date: bool,
    /// sha256 of the source.
    pub sha256: String,
}

/// Which store file a segment writes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Dense,
    Experts,
    /// Hashed for the record checksums, not written: experts read in place from the GGUF.
    Nowhere,
}

/// Which part hash a destination range feeds.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PartRef {
    Record { record: usize, part: usize },
    Dense { tensor: usize, part: usize },
}

/// A contiguous source range and where its bytes go.
#[derive(Clone, Debug)]
pub(crate) struct Segment {
    source: Region,
    target: Target,
    /// Q8_0/Q4_0: split into planes; None: copied as it is.
    planar: Option<TensorType>,
    /// Destination of the quants (or of the raw bytes), and its part.
    first: (u64, PartRef),
    /// Destination of the scales, and its part (planar only).
    second: Option<(u64, PartRef)>,
}

impl Segment {
    /// The record or dense tensor the segment writes a part of.
    pub(crate) fn part(&self) -> PartRef {
        self.first.1
    }

    /// The segment hashed for its part hashes, written nowhere.
    pub(crate) fn hashed_only(&self) -> Segment {
        Segment { target: Target::Nowhere, ..self.clone() }
    }
}

/// Every source range the store takes, in source order (the experts' to `Target::Nowhere` when they stay in
/// the GGUF).
pub(crate) fn segments(src: &Source, layout: &Layout, in_gguf: bool) -> Vec<Segment> {
    let mut out = Vec::new();
    let tensors = || src.header.tensors.iter().zip(&src.data_at);
    for (tensor, ((info, &at), dense)) in
        tensors().filter(|(t, _)| expert_tensor(&t.name).is_none()).zip(&layout.dense).enumerate()
    {
        let source = Region { offset: at, len: info.n_bytes };
        let part = |part| PartRef::Dense { tensor, part };
        out.push(match dense.data {
            DenseData::Raw { data } => Segment {
                source,
                target: Target::Dense,
                planar: None,
                first: (data.offset, part(0)),
                second: None,
            },
            DenseData::Planes { quants, scales } => Segment {
                source,
                target: Target::Dense,
                planar: Some(info.ty),
                first: (quants.offset, part(0)),
                second: Some((scales.offset, part(1))),
            },
            // Hashed as it passes, written nowhere.
            DenseData::InGguf { .. } => {
                Segment { source, target: Target::Nowhere, planar: None, first: (0, part(0)), second: None }
            }
        });
    }
    if let Some(x) = &layout.experts {
        for (info, &at) in tensors() {
            let Some((layer, which)) = expert_tensor(&info.name) else { continue };
            let slice = info.n_bytes / u64::from(x.n_experts);
            let half_q = x.gate_up_quants.len / 2;
            let half_s = x.gate_up_scales.len / 2;
            // Records of blocks take each part as it is; records of planes split it.
            let (q_at, s_at, q_part, s_part) = match (x.part(layer, which), which) {
                (Some((_, r)), _) => (r.offset, None, [0, 1, 4][which as usize], None),
                (None, ExpertPart::Gate) => {
                    (x.gate_up_quants.offset, Some(x.gate_up_scales.offset), 0, Some(2))
                }
                (None, ExpertPart::Up) => {
                    (x.gate_up_quants.offset + half_q, Some(x.gate_up_scales.offset + half_s), 1, Some(3))
                }
                (None, ExpertPart::Down) => (x.down_quants.offset, Some(x.down_scales.offset), 4, Some(5)),
            };
            for expert in 0..x.n_experts {
                let key = crate::ExpertKey { layer, expert };
                let record = x.record_offset(key);
                let index = (layer * x.n_experts + expert) as usize;
                out.push(Segment {
                    source: Region { offset: at + u64::from(expert) * slice, len: slice },
                    target: if in_gguf { Target::Nowhere } else { Target::Experts },
                    planar: s_at.map(|_| info.ty),
                    first: (record + q_at, PartRef::Record { record: index, part: q_part }),
                    second: s_at
                        .zip(s_part)
                        .map(|(at, part)| (record + at, PartRef::Record { record: index, part })),
                });
            }
        }
    }
    out.sort_by_key(|s| s.source.offset);
    out
}

/// Where each expert tensor's slices lie in the source's files.
fn experts_in_gguf(src: &Source) -> ExpertsInGguf {
    let n_experts = |t: &diskformer_gguf::TensorInfo| t.dims.last().copied().unwrap_or(1).max(1);
    let empty = PartInFile { file: 0, offset: 0, slice: 0 };
    let mut parts = Vec::new();
    for (info, &at) in src.header.tensors.iter().zip(&src.data_at) {
        let Some((layer, which)) = expert_tensor(&info.name) else { continue };
        let layer = layer as usize;
        if parts.len() <= layer {
            parts.resize(layer + 1, [empty; 3]);
        }
        let (file, offset) = src.locate(at);
        parts[layer][which as usize] = PartInFile { file, offset, slice: info.n_bytes / n_experts(info) };
    }
    ExpertsInGguf { files: src.files(), parts }
}

/// The state of an ingest of `layout` before its first segment: nothing read, no part hashed.
pub(crate) fn fresh_checkpoint(layout: &Layout) -> Checkpoint {
    Checkpoint {
        segments_done: 0,
        source_offset: 0,
        sha256: Sha256State::default(),
        record_parts: fresh_record_parts(layout.experts.as_ref()),
        dense_parts: layout.dense.iter().map(|t| vec![None; t.data.parts().len()]).collect(),
    }
}

/// The part hashes of a store not yet written: none, but for records of blocks the three empty scale parts,
/// which no segment writes.
fn fresh_record_parts(experts: Option<&crate::ExpertLayout>) -> Vec<Option<u64>> {
    let Some(x) = experts else { return Vec::new() };
    let empty = x.blocks.is_some().then(|| Xxh3::new().digest());
    (0..x.n_records()).flat_map(|_| [None, None, empty, empty, None, empty]).collect()
}

/// The store's layout for `src` from its plan, its experts and raw dense tensors kept `in_gguf` or not.
fn made(plan: &Layout, src: &Source, in_gguf: bool) -> Layout {
    let mut layout = plan.clone();
    if in_gguf {
        // The raw dense tensors stay in the GGUF with the experts: no second copy of either.
        let raw_at: Vec<u64> = (src.header.tensors.iter().zip(&src.data_at))
            .filter(|(t, _)| expert_tensor(&t.name).is_none())
            .map(|(_, &at)| at)
            .collect();
        layout.dense_in_gguf(|i| src.locate(raw_at[i]));
    }
    layout
}

/// The identity an interrupted ingest must share to be resumed.
fn identity(header_bytes: &[u8], layout: &Layout, size: u64, in_gguf: bool) -> String {
    let mut h = Xxh3::new();
    h.update(header_bytes);
    h.update(&serde_json::to_vec(layout).expect("layout serialises"));
    h.update(&size.to_le_bytes());
    if in_gguf {
        h.update(b"experts in the GGUF");
    }
    format!("{:016x}", h.digest())
}

fn free_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("paths have no NUL");
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // Safety: `c` is a valid C string and `st` a valid out-pointer for the call's duration.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(Error::io(dir)(std::io::Error::last_os_error()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Opens (creating) a store file and sets its length.
fn open_sized(path: &Path, len: u64) -> Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(Error::io(path))?;
    f.set_len(len).map_err(Error::io(path))?;
    Ok(f)
}

/// Bytes already allocated to a file (0 when absent), for the free-space check.
fn allocated(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.blocks() * 512).unwrap_or(0)
}

/// Ingests the GGUF at `source` into the store directory `dir` (created if needed), resuming an interrupted
/// ingest of the same source, starting over for a different one, and doing nothing when the store is already
/// complete for it. `progress` is called after every chunk. `source` may be the first shard of a gguf-split
/// set: its shards are checked as llama.cpp checks them and read as one stream, and the store is the one its
/// merged file would give.
///
/// # Errors
/// [`Error::SplitShard`] for a later shard of a set; [`Error::Gguf`] for a header that does not parse or a
/// broken set; [`Error::SourceTruncated`], [`Error::PinMismatch`], [`Error::InsufficientSpace`], any layout error, or
/// [`Error::Io`]. On any error the manifest is not marked complete.
pub fn ingest(
    source: &Path,
    dir: &Path,
    opts: &IngestOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<IngestSummary> {
    let started = Instant::now();
    let src = Source::open(source)?;
    let (size, mtime) = (src.size, src.mtime);
    if let Some(pin) = &opts.pin
        && pin.size != size
    {
        return Err(Error::PinMismatch {
            path: source.to_owned(),
            what: format!("size {size}, pinned {}", pin.size),
        });
    }
    let plan = Layout::plan(&src.header)?;
    let blocks = plan.experts.as_ref().is_some_and(|x| x.blocks.is_some());
    let in_gguf = !opts.copy_experts && blocks;
    let layout = made(&plan, &src, in_gguf);
    // The identity of this source's store made the other way, where that is a store it may take as it is.
    let other = (opts.either_mode && blocks)
        .then(|| identity(&src.header_bytes, &made(&plan, &src, !in_gguf), size, !in_gguf));
    let identity = identity(&src.header_bytes, &layout, size, in_gguf);
    let experts_bytes = if in_gguf { 0 } else { layout.experts.as_ref().map_or(0, |x| x.file_bytes()) };

    fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let loaded = Manifest::load(dir).ok().flatten().filter(|m| m.source.mtime == mtime);
    let taken = |m: &&Manifest| m.identity == identity || Some(&m.identity) == other.as_ref();
    if let Some(m) = loaded.as_ref().filter(|m| m.complete).filter(taken) {
        return Ok(IngestSummary {
            bytes_read: 0,
            seconds: started.elapsed().as_secs_f64(),
            resumed_from: None,
            up_to_date: true,
            sha256: m.source.sha256.clone().unwrap_or_default(),
        });
    }
    let previous = loaded.filter(|m| m.identity == identity);
    let n_records = layout.experts.as_ref().map_or(0, |x| x.n_records());
    let (mut state, prior_seconds) = match previous.and_then(|m| m.checkpoint.map(|c| (c, m.ingest_seconds)))
    {
        Some((c, secs))
            if c.record_parts.len() == n_records * 6 && c.dense_parts.len() == layout.dense.len() =>
        {
            (c, secs)
        }
        _ => (fresh_checkpoint(&layout), 0.0),
    };
    let resumed_from = (state.source_offset > 0).then_some(state.source_offset);

    let paths = [dir.join(HEADER_FILE), dir.join(DENSE_FILE), dir.join(EXPERTS_FILE)];
    let have: u64 = paths.iter().map(|p| allocated(p)).sum();
    let want = layout.header_bytes + layout.dense_bytes + experts_bytes;
    let available = free_bytes(dir)?;
    if want.saturating_sub(have) > available {
        return Err(Error::InsufficientSpace { dir: dir.to_owned(), needed: want - have, available });
    }

    let mut manifest = Manifest {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        source: SourceInfo { path: source.to_owned(), size, mtime, sha256: None },
        identity,
        layout,
        record_checksums: Vec::new(),
        dense_checksums: Vec::new(),
        complete: false,
        ingest_seconds: prior_seconds,
        checkpoint: None,
        experts_in_gguf: in_gguf.then(|| experts_in_gguf(&src)),
    };
    if resumed_from.is_none() {
        // Starting over: the old manifest must not describe the files about to be rewritten, and the old
        // files go too, so alignment gaps read as zeros exactly as in a fresh store.
        let _ = fs::remove_file(dir.join(crate::manifest::MANIFEST));
        for path in &paths[1..] {
            let _ = fs::remove_file(path);
        }
        fs::write(&paths[0], &src.header_bytes).map_err(Error::io(&paths[0]))?;
        File::open(&paths[0]).and_then(|f| f.sync_all()).map_err(Error::io(&paths[0]))?;
    }
    let dense_file = open_sized(&paths[1], manifest.layout.dense_bytes)?;
    let experts_file = open_sized(&paths[2], experts_bytes)?;

    let segs = segments(&src, &manifest.layout, in_gguf);
    src.advise_sequential();
    let files = [(&dense_file, &paths[1]), (&experts_file, &paths[2])];
    let mut writer = SegmentWriter::new(&src, files, state.sha256.clone(), opts.chunk_bytes);
    let run_start = state.source_offset;
    let mut last_checkpoint = state.source_offset;
    let report = |state: &Checkpoint, progress: &mut dyn FnMut(&Progress)| {
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        progress(&Progress {
            done: state.source_offset,
            total: size,
            bytes_per_sec: (state.source_offset - run_start) as f64 / secs,
        });
    };
    let checkpoints = Checkpointer::start(&dense_file, &experts_file, &paths, &manifest, dir)?;
    for seg in &segs[state.segments_done..] {
        // Checkpoint before a segment that would take us past `checkpoint_bytes` since the last one, so
        // checkpoints are at most that far apart (only a single larger tensor can stretch the gap).
        if seg.source.end() - last_checkpoint > opts.checkpoint_bytes && state.source_offset > last_checkpoint
        {
            state.sha256 = writer.sha.snapshot();
            if !checkpoints.save(state.clone(), prior_seconds + started.elapsed().as_secs_f64()) {
                break; // The checkpoint thread failed: `finish` reports why.
            }
            last_checkpoint = state.source_offset;
        }
        // Bytes between tensors (padding) count for the sha256 only.
        writer.hash_range(&mut state, seg.source.offset)?;
        writer.segment(seg, &mut state, &mut |s| report(s, progress))?;
        state.segments_done += 1;
    }
    checkpoints.finish()?;
    writer.hash_range(&mut state, size)?;
    report(&state, progress);
    let sha256 = writer.sha.finish().finish_hex();
    if let Some(pin) = &opts.pin
        && !pin.sha256.eq_ignore_ascii_case(&sha256)
    {
        return Err(Error::PinMismatch {
            path: source.to_owned(),
            what: format!("sha256 {sha256}, pinned {}", pin.sha256),
        });
    }

    let all = |parts: &[Option<u64>]| -> Vec<u64> {
        parts.iter().map(|p| p.expect("every part is written by exactly one segment")).collect()
    };
    manifest.record_checksums = state.record_parts.chunks(6).map(|p| combine(&all(p))).collect();
    manifest.dense_checksums = state.dense_parts.iter().map(|p| combine(&all(p))).collect();
    dense_file.sync_all().map_err(Error::io(&paths[1]))?;
    experts_file.sync_all().map_err(Error::io(&paths[2]))?;
    manifest.source.sha256 = Some(sha256.clone());
    manifest.complete = true;
    manifest.checkpoint = None;
    manifest.ingest_seconds = prior_seconds + started.elapsed().as_secs_f64();
    manifest.save(dir)?;
    Ok(IngestSummary {
        bytes_read: size - run_start,
        seconds: started.elapsed().as_secs_f64(),
        resumed_from,
        up_to_date: false,
        sha256,
    })
}

/// Reads source ranges, splits them and writes them to the store files.
pub(crate) struct SegmentWriter<'a> {
    source: &'a Source,
    dense: (&'a File, &'a PathBuf),
    experts: (&'a File, &'a PathBuf),
    buf: Vec<u8>,
    planes: Vec<u8>,
    sha: ShaWorker,
}

impl<'a> SegmentWriter<'a> {
    /// A writer of `source`'s segments into `[dense, experts]` (file, path), hashing the source on from
    /// `sha256` in chunks of `chunk_bytes`.
    pub(crate) fn new(
        source: &'a Source,
        [dense, experts]: [(&'a File, &'a PathBuf); 2],
        sha256: Sha256State,
        chunk_bytes: usize,
    ) -> Self {
        let (sha, buf) = ShaWorker::start(sha256, chunk_bytes.max(4096));
        SegmentWriter { source, dense, experts, buf, planes: Vec::new(), sha }
    }

    fn read(&mut self, offset: u64, len: usize) -> Result<()> {
        self.source.read_exact_at(&mut self.buf[..len], offset)
    }

    /// Hashes source bytes from the current offset up to `end` without storing them.
    fn hash_range(&mut self, state: &mut Checkpoint, end: u64) -> Result<()> {
        while state.source_offset < end {
            let n = (end - state.source_offset).min(self.buf.len() as u64) as usize;
            self.read(state.source_offset, n)?;
            self.buf = self.sha.hash(std::mem::take(&mut self.buf), n);
            state.source_offset += n as u64;
        }
        Ok(())
    }

    fn write(&self, target: Target, offset: u64, bytes: &[u8]) -> Result<()> {
        let (file, path) = match target {
            Target::Dense => self.dense,
            Target::Experts => self.experts,
            Target::Nowhere => return Ok(()),
        };
        file.write_all_at(bytes, offset).map_err(Error::io(path))
    }

    pub(crate) fn segment(
        &mut self,
        seg: &Segment,
        state: &mut Checkpoint,
        report: &mut dyn FnMut(&Checkpoint),
    ) -> Result<()> {
        let (block_bytes, quant_bytes) = match seg.planar {
            Some(ty) => (ty.block_bytes() as usize, ty.block_bytes() as usize - 2),
            None => (1, 1),
        };
        let step = (self.buf.len() / block_bytes * block_bytes) as u64;
        let (mut hq, mut hs) = (Xxh3::new(), Xxh3::new());
        let mut done = 0u64;
        while done < seg.source.len {
            let n = (seg.source.len - done).min(step) as usize;
            self.read(seg.source.offset + done, n)?;
            let first_at = seg.first.0 + done / block_bytes as u64 * quant_bytes as u64;
            match (seg.planar, seg.second) {
                (Some(ty), Some((second, _))) => {
                    let blocks = n / block_bytes;
                    let mut planes = std::mem::take(&mut self.planes);
                    planes.resize(blocks * block_bytes, 0);
                    let (q, s) = planes.split_at_mut(blocks * quant_bytes);
                    diskformer_gguf::split_planes(ty, &self.buf[..n], q, s)
                        .expect("whole blocks, sized planes");
                    let scales_at = second + done / block_bytes as u64 * 2;
                    self.write(seg.target, first_at, q)?;
                    self.write(seg.target, scales_at, s)?;
                    hq.update(q);
                    hs.update(s);
                    self.planes = planes;
                }
                _ => {
                    self.write(seg.target, first_at, &self.buf[..n])?;
                    hq.update(&self.buf[..n]);
                }
            }
            self.buf = self.sha.hash(std::mem::take(&mut self.buf), n);
            done += n as u64;
            state.source_offset += n as u64;
            report(state);
        }
        let mut set = |part: PartRef, hash: u64| match part {
            PartRef::Record { record, part } => state.record_parts[record * 6 + part] = Some(hash),
            PartRef::Dense { tensor, part } => state.dense_parts[tensor][part] = Some(hash),
        };
        set(seg.first.1, hq.digest());
        if let Some((_, part)) = seg.second {
            set(part, hs.digest());
        }
        Ok(())
    }
}

enum ShaMsg {
    Data(Vec<u8>, usize),
    Snapshot(mpsc::Sender<Sha256State>),
}

/// The source's sha256, computed on its own thread so hashing overlaps reading and writing. Chunk buffers
/// circulate: the ingest fills one while the worker hashes another (two spares, so memory stays bounded).
struct ShaWorker {
    tx: mpsc::SyncSender<ShaMsg>,
    pool: mpsc::Receiver<Vec<u8>>,
    handle: std::thread::JoinHandle<Sha256State>,
}

impl ShaWorker {
    /// Starts the worker from `state`; returns it and the first buffer to fill.
    fn start(mut state: Sha256State, buf_len: usize) -> (ShaWorker, Vec<u8>) {
        let (tx, rx) = mpsc::sync_channel::<ShaMsg>(2);
        let (pool_tx, pool) = mpsc::channel();
        pool_tx.send(vec![0; buf_len]).expect("receiver alive");
        let handle = std::thread::spawn(move || {
            for msg in rx {
                match msg {
                    ShaMsg::Data(buf, n) => {
                        state.update(&buf[..n]);
                        // The ingest may have stopped early on an error; then nobody wants the buffer.
                        let _ = pool_tx.send(buf);
                    }
                    ShaMsg::Snapshot(reply) => {
                        let _ = reply.send(state.clone());
                    }
                }
            }
            state
        });
        (ShaWorker { tx, pool, handle }, vec![0; buf_len])
    }

    /// Hands over the first `n` bytes of `buf` and returns a free buffer.
    fn hash(&self, buf: Vec<u8>, n: usize) -> Vec<u8> {
        self.tx.send(ShaMsg::Data(buf, n)).expect("sha256 worker alive");
        self.pool.recv().expect("sha256 worker alive")
    }

    /// The state after every byte handed over so far.
    fn snapshot(&self) -> Sha256State {
        let (reply, rx) = mpsc::channel();
        self.tx.send(ShaMsg::Snapshot(reply)).expect("sha256 worker alive");
        rx.recv().expect("sha256 worker alive")
    }

    fn finish(self) -> Sha256State {
        drop(self.tx);
        self.handle.join().expect("sha256 worker does not panic")
    }
}

/// Saves checkpoints on a thread of its own: it makes the data written so far durable (fdatasync) and then
/// writes the manifest naming it, while the ingest goes on writing. The saved checkpoint lags the ingest but
/// never runs ahead of durable data; syncing inline instead stalled reading and splitting for every GiB.
struct Checkpointer {
    tx: mpsc::SyncSender<(Checkpoint, f64)>,
    handle: std::thread::JoinHandle<Result<()>>,
}

impl Checkpointer {
    fn start(
        dense: &File,
        experts: &File,
        paths: &[PathBuf; 3],
        manifest: &Manifest,
        dir: &Path,
    ) -> Result<Self> {
        let dense = (dense.try_clone().map_err(Error::io(&paths[1]))?, paths[1].clone());
        let experts = (experts.try_clone().map_err(Error::io(&paths[2]))?, paths[2].clone());
        let (mut manifest, dir) = (manifest.clone(), dir.to_owned());
        // One checkpoint may wait while another is being saved; the ingest blocks behind a slower disk.
        let (tx, rx) = mpsc::sync_channel::<(Checkpoint, f64)>(1);
        let handle = std::thread::spawn(move || {
            for (state, seconds) in rx {
                for (file, path) in [&dense, &experts] {
                    file.sync_data().map_err(Error::io(path))?;
                }
                manifest.checkpoint = Some(state);
                manifest.ingest_seconds = seconds;
                manifest.save(&dir)?;
            }
            Ok(())
        });
        Ok(Checkpointer { tx, handle })
    }

    /// Queues a checkpoint of everything written so far; `false` when the thread has stopped on an error.
    fn save(&self, state: Checkpoint, seconds: f64) -> bool {
        self.tx.send((state, seconds)).is_ok()
    }

    /// Waits for the queued checkpoints and reports the first failure.
    fn finish(self) -> Result<()> {
        drop(self.tx);
        self.handle.join().expect("checkpoint thread does not panic")
    }
}
