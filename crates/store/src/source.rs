//! The GGUF an ingest reads: one file, or a gguf-split set read as the concatenation of its shards, so
//! offsets, checkpoints, progress and the sha256 run over one stream. The header describing a set is the one
//! merging it would make (`GgufModel::merged_header`), so a store of a set equals the store of its merge.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use diskformer_gguf::{GgufModel, Header, PrefixParse, SPLIT_COUNT, SPLIT_NO, Value};

use crate::{Error, GgufFileInfo, Result};

/// The largest GGUF header ingest reads (a 248,320-token vocabulary with its merges is ~16 MB).
pub const MAX_HEADER_BYTES: u64 = 256 << 20;

/// One file of the stream.
struct Shard {
    path: PathBuf,
    file: File,
    /// Where the file starts in the stream.
    start: u64,
    len: u64,
    mtime: u64,
}

/// A source GGUF, opened and checked, read by stream offset.
pub(crate) struct Source {
    shards: Vec<Shard>,
    /// Bytes in the stream (the sum of the shards' sizes).
    pub size: u64,
    /// The newest shard's modification time, in seconds since the epoch.
    pub mtime: u64,
    /// The header (a set's merged one).
    pub header: Header,
    /// Its bytes, as `header.bin` keeps them.
    pub header_bytes: Vec<u8>,
    /// Where the data of each of `header.tensors` starts in the stream.
    pub data_at: Vec<u64>,
}

impl Source {
    /// Opens the GGUF at `path`: a whole file, or the first shard of a gguf-split set with every shard,
    /// checked as llama.cpp checks a set.
    ///
    /// # Errors
    /// [`Error::SplitShard`] for a later shard of a set; [`Error::Gguf`] for a header that does not parse or
    /// a broken set; [`Error::SourceTruncated`]; [`Error::HeaderTooLarge`]; [`Error::Io`].
    pub fn open(path: &Path) -> Result<Source> {
        let (file, size, mtime) = open_file(path)?;
        let (header, header_bytes) = read_header(path, &file, size)?;
        if let Some(Value::U16(count @ 2..)) = header.metadata.get(SPLIT_COUNT) {
            let no = match header.metadata.get(SPLIT_NO) {
                Some(Value::U16(no)) => *no,
                _ => 0,
            };
            if no != 0 {
                return Err(Error::SplitShard { path: path.to_owned(), no, count: *count });
            }
            return Self::open_set(path);
        }
        let needed = header.data_offset + header.data_len();
        if size < needed {
            return Err(Error::SourceTruncated { path: path.to_owned(), needed, size });
        }
        let data_at = header.tensors.iter().map(|t| header.data_offset + t.offset).collect();
        let shards = vec![Shard { path: path.to_owned(), file, start: 0, len: size, mtime }];
        Ok(Source { shards, size, mtime, header, header_bytes, data_at })
    }

    fn open_set(first: &Path) -> Result<Source> {
        let gguf = |source| Error::Gguf { path: first.to_owned(), source };
        let model = GgufModel::open(first).map_err(gguf)?;
        let header_bytes = model.merged_header().map_err(gguf)?;
        let header = Header::parse(&header_bytes).map_err(gguf)?;
        let (mut shards, mut mtime, mut start) = (Vec::new(), 0, 0);
        let mut data_section = Vec::new();
        for (path, shard) in model.shards() {
            let (file, len, t) = open_file(path)?;
            data_section.push(start + shard.header().data_offset);
            shards.push(Shard { path: path.to_owned(), file, start, len, mtime: t });
            mtime = mtime.max(t);
            start += len;
        }
        // The merged header lists the tensors in the model's order: shard by shard, in file order.
        let data_at = model.tensors().map(|(s, t)| data_section[s] + t.offset).collect();
        Ok(Source { shards, size: start, mtime, header, header_bytes, data_at })
    }

    /// The path the source was opened from (a set's first shard).
    pub fn path(&self) -> &Path {
        &self.shards[0].path
    }

    /// The files of the stream, in order.
    pub fn files(&self) -> Vec<GgufFileInfo> {
        let info = |s: &Shard| GgufFileInfo { path: s.path.clone(), size: s.len, mtime: s.mtime };
        self.shards.iter().map(info).collect()
    }

    /// The file holding stream byte `at`, and the byte's offset in it.
    pub fn locate(&self, at: u64) -> (usize, u64) {
        let i = self.shards.iter().rposition(|s| s.start <= at).expect("the first shard starts at 0");
        (i, at - self.shards[i].start)
    }

    /// Fills `buf` from the stream at `offset`, across shard boundaries.
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> Result<()> {
        for shard in &self.shards {
            if buf.is_empty() {
                break;
            }
            if offset >= shard.start + shard.len {
                continue;
            }
            let at = offset - shard.start;
            let n = buf.len().min((shard.len - at) as usize);
            shard.file.read_exact_at(&mut buf[..n], at).map_err(Error::io(&shard.path))?;
            buf = &mut buf[n..];
            offset += n as u64;
        }
        if !buf.is_empty() {
            let err = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the source's end");
            return Err(Error::io(self.path())(err));
        }
        Ok(())
    }

    /// Tells the kernel every shard is read front to back, so its read-ahead runs further ahead.
    pub fn advise_sequential(&self) {
        use std::os::fd::AsRawFd;
        for shard in &self.shards {
            // Safety: a valid open descriptor; the call only sets a hint (a failure is harmless and ignored).
            unsafe { libc::posix_fadvise(shard.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
        }
    }
}

/// Opens a file, with its size and modification time.
fn open_file(path: &Path) -> Result<(File, u64, u64)> {
    let file = File::open(path).map_err(Error::io(path))?;
    let meta = file.metadata().map_err(Error::io(path))?;
    let mtime =
        meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
    Ok((file, meta.len(), mtime))
}

/// Reads the GGUF header of `file`, growing the read until [`Header::parse_prefix`] is satisfied.
fn read_header(path: &Path, file: &File, size: u64) -> Result<(Header, Vec<u8>)> {
    let mut prefix = vec![0u8; size.min(1 << 20) as usize];
    file.read_exact_at(&mut prefix, 0).map_err(Error::io(path))?;
    loop {
        let gguf_err = |source| Error::Gguf { path: path.to_owned(), source };
        match Header::parse_prefix(&prefix).map_err(gguf_err)? {
            PrefixParse::Complete(header) => {
                let mut bytes = prefix;
                bytes.resize(header.data_offset.min(size) as usize, 0);
                // Padding up to the data section, which the prefix may not have held.
                let have = bytes.len();
                if (have as u64) < header.data_offset.min(size) {
                    file.read_exact_at(&mut bytes[have..], have as u64).map_err(Error::io(path))?;
                }
                return Ok((*header, bytes));
            }
            PrefixParse::NeedMore(n) => {
                let needed = (prefix.len() as u64).saturating_add(n);
                if needed > size {
                    return Err(Error::SourceTruncated { path: path.to_owned(), needed, size });
                }
                // A corrupt length field can claim most of the file: never read that much as "header".
                if needed > MAX_HEADER_BYTES {
                    return Err(Error::HeaderTooLarge {
                        path: path.to_owned(),
                        needed,
                        max: MAX_HEADER_BYTES,
                    });
                }
                let want = (prefix.len() as u64 + n.max(prefix.len() as u64)).min(MAX_HEADER_BYTES);
                let old = prefix.len();
                prefix.resize(want.min(size) as usize, 0);
                file.read_exact_at(&mut prefix[old..], old as u64).map_err(Error::io(path))?;
            }
        }
    }
}
