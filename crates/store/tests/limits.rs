//! The disk's limits: a disk that fills midway through an ingest is a clear error, the store is never
//! marked complete, and the ingest resumes to a byte-identical store once space is freed; a read-only
//! file system is refused naming it; a missing store directory is not a store. The disk is a small tmpfs
//! mounted for the test (root, as CI runs; elsewhere set DISKFORMER_SKIP_MOUNT_TESTS=1 to skip them).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Shape, TempDir, write_model};
use diskformer_store::{DENSE_FILE, EXPERTS_FILE, Error, IngestOptions, Store, ingest};

const SKIP_ENV: &str = "DISKFORMER_SKIP_MOUNT_TESTS";

/// A tmpfs of `bytes` mounted at a fresh directory, unmounted on drop; `None` when skipping is asked for.
struct Tmpfs {
    at: PathBuf,
    /// Holds the mount point's parent until the tmpfs is unmounted.
    _dir: TempDir,
}

impl Tmpfs {
    fn mount(tag: &str, bytes: u64, read_only: bool) -> Option<Tmpfs> {
        let dir = TempDir::new(tag);
        let at = dir.path().join("mnt");
        std::fs::create_dir_all(&at).unwrap();
        let opts = format!("size={bytes}{}", if read_only { ",ro" } else { "" });
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", &opts, "tmpfs"]).arg(&at).status();
        match status {
            Ok(s) if s.success() => Some(Tmpfs { at, _dir: dir }),
            _ if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") => {
                eprintln!("SKIPPING the mount tests ({SKIP_ENV}=1): cannot mount a tmpfs");
                None
            }
            other => panic!("cannot mount a tmpfs ({other:?}): run as root, or set {SKIP_ENV}=1 to skip"),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
    }
}

/// Fills the file system holding `dir` with `dir/filler` until it is full.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![7u8; 64 << 10];
    while f.write_all(&chunk).is_ok() {}
    let small = [7u8; 512];
    while f.write_all(&small).is_ok() {}
}

#[test]
fn a_disk_that_fills_midway_is_a_clear_error_and_the_ingest_resumes() {
    let dir = TempDir::new("full-src");
    let shape = Shape { layers: 3, experts: 8, hidden: 128, ffn: 64, ..Shape::small() };
    let source = write_model(dir.path(), "m.gguf", &shape, 5);
    let size = std::fs::metadata(&source).unwrap().len();
    let opts = IngestOptions { chunk_bytes: 4 << 10, checkpoint_bytes: 48 << 10, ..IngestOptions::default() };
    let clean = dir.path().join("clean");
    ingest(&source, &clean, &opts, &mut |_| {}).unwrap();
    let Some(disk) = Tmpfs::mount("full", 4 * size, false) else { return };
    let store = disk.at.join("s");
    let mut filled = false;
    let err = ingest(&source, &store, &opts, &mut |p| {
        if !filled && p.done >= size / 2 {
            fill(&disk.at);
            filled = true;
        }
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::DiskFull { .. }), "{err:?}");
    assert!(text.contains("is full") && text.contains("run the ingest again"), "{text}");
    assert!(matches!(Store::open(&store), Err(Error::Incomplete { .. } | Error::NotAStore { .. })));
    std::fs::remove_file(disk.at.join("filler")).unwrap();
    let summary = ingest(&source, &store, &opts, &mut |_| {}).unwrap();
    assert!(summary.resumed_from.is_some(), "resumed from its last checkpoint");
    for f in [DENSE_FILE, EXPERTS_FILE] {
        assert!(
            std::fs::read(store.join(f)).unwrap() == std::fs::read(clean.join(f)).unwrap(),
            "{f} differs"
        );
    }
    Store::open(&store).unwrap().verify().unwrap();
}

#[test]
fn a_read_only_or_missing_store_directory_is_refused() {
    let dir = TempDir::new("ro-src");
    let source = write_model(dir.path(), "m.gguf", &Shape::small(), 6);
    let Some(disk) = Tmpfs::mount("ro", 1 << 20, true) else { return };
    let err = ingest(&source, &disk.at.join("s"), &IngestOptions::default(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only file system"), "{err}");
    let missing = dir.path().join("no-such-store");
    assert!(matches!(Store::open(&missing), Err(Error::NotAStore { .. })));
    assert!(!missing.exists(), "opening does not create it");
}
