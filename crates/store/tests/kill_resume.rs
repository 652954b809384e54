//! Crash safety: an ingest SIGKILLed at seeded random points (in a child process) resumes from its last
//! checkpoint and ends byte-identical to a clean ingest; a killed store is never opened as complete.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Rng, Shape, TempDir, write_model};
use diskformer_store::{
    DENSE_FILE, EXPERTS_FILE, Error, HEADER_FILE, IngestOptions, Manifest, Store, ingest,
};

const CHILD_ENV: &str = "DISKFORMER_STORE_KILL_CHILD";

fn options() -> IngestOptions {
    IngestOptions { chunk_bytes: 4 << 10, checkpoint_bytes: 48 << 10, ..IngestOptions::default() }
}

/// Runs in the child: ingest, and SIGKILL ourselves once `kill_at` source bytes are done.
#[test]
fn child_ingest() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut it = spec.split('|');
    let (source, dir, kill_at) =
        (it.next().unwrap(), it.next().unwrap(), it.next().unwrap().parse::<u64>().unwrap());
    ingest(Path::new(source), Path::new(dir), &options(), &mut |p| {
        if p.done >= kill_at {
            // Safety: plain libc calls with no pointers.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    })
    .unwrap();
}

fn run_child(source: &Path, dir: &Path, kill_at: u64) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_ingest", "--test-threads=1", "--quiet"])
        .env(CHILD_ENV, format!("{}|{}|{kill_at}", source.display(), dir.display()))
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "child was meant to die at byte {kill_at}: {status:?}");
}

fn assert_same_store(a: &Path, b: &Path) {
    for f in [HEADER_FILE, DENSE_FILE, EXPERTS_FILE] {
        assert!(std::fs::read(a.join(f)).unwrap() == std::fs::read(b.join(f)).unwrap(), "{f} differs");
    }
    let (ma, mb) = (Manifest::load(a).unwrap().unwrap(), Manifest::load(b).unwrap().unwrap());
    assert!(ma.complete && mb.complete);
    assert_eq!(ma.source.sha256, mb.source.sha256);
    assert_eq!(ma.identity, mb.identity);
    assert_eq!(ma.layout, mb.layout);
    assert_eq!(ma.record_checksums, mb.record_checksums);
    assert_eq!(ma.dense_checksums, mb.dense_checksums);
}

#[test]
fn killed_ingests_resume_to_identical_stores() {
    let dir = TempDir::new("kill");
    let shape = Shape { layers: 3, experts: 8, hidden: 128, ffn: 64, ..Shape::small() };
    let source = write_model(dir.path(), "m.gguf", &shape, 42);
    let size = std::fs::metadata(&source).unwrap().len();
    let clean = dir.path().join("clean");
    ingest(&source, &clean, &options(), &mut |_| {}).unwrap();

    let mut rng = Rng(2026);
    let mut resumed = 0;
    for trial in 0..24 {
        let store = dir.path().join(format!("t{trial}"));
        // One to three kills, each later than the last, before the run that finishes.
        let kills = 1 + rng.below(3);
        let mut at = 0;
        for _ in 0..kills {
            at = (at + 1 + rng.below(size / 2)).min(size - 1);
            run_child(&source, &store, at);
            assert!(
                matches!(Store::open(&store), Err(Error::Incomplete { .. } | Error::NotAStore { .. })),
                "trial {trial}: a killed store opened"
            );
        }
        let summary = ingest(&source, &store, &options(), &mut |_| {}).unwrap();
        resumed += usize::from(summary.resumed_from.is_some());
        assert_same_store(&store, &clean);
        Store::open(&store).unwrap().verify().unwrap();
        std::fs::remove_dir_all(&store).unwrap();
    }
    assert!(resumed >= 12, "only {resumed} of 24 trials resumed from a checkpoint");
}
