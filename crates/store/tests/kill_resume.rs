//! Crash safety: an ingest SIGKILLed (in a child process) at seeded random points of its progress, or by
//! its parent once it reports passing a random byte (so at whatever it is doing then, checkpoint writes
//! included: they run on a thread of their own, every 48 KiB here), resumes from its last checkpoint and ends byte-identical to a clean ingest; a killed store is
//! never opened as complete.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::{Rng, Shape, TempDir, write_model};
use diskformer_store::{
    DENSE_FILE, EXPERTS_FILE, Error, HEADER_FILE, IngestOptions, Manifest, Store, ingest,
};

const CHILD_ENV: &str = "DISKFORMER_STORE_KILL_CHILD";
const REPORT_ENV: &str = "DISKFORMER_STORE_KILL_REPORT";

fn options() -> IngestOptions {
    IngestOptions { chunk_bytes: 4 << 10, checkpoint_bytes: 48 << 10, ..IngestOptions::default() }
}

/// Runs in the child: ingest, and SIGKILL ourselves once `kill_at` source bytes are done; with
/// [`REPORT_ENV`], print each progress on stdout (`done N`) for the parent, which kills it.
#[test]
fn child_ingest() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut it = spec.split('|');
    let (source, dir, kill_at) =
        (it.next().unwrap(), it.next().unwrap(), it.next().unwrap().parse::<u64>().unwrap());
    let report = std::env::var(REPORT_ENV).is_ok();
    ingest(Path::new(source), Path::new(dir), &options(), &mut |p| {
        if report {
            // Nothing to do if the parent stopped listening: it is about to kill us.
            let _ = writeln!(std::io::stdout(), "done {}", p.done);
        }
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

/// Starts a child ingest that runs to the end unless killed.
fn spawn_child(source: &Path, dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_ingest", "--test-threads=1", "--quiet", "--nocapture"])
        .env(CHILD_ENV, format!("{}|{}|{}", source.display(), dir.display(), u64::MAX))
        .env(REPORT_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn ingests_killed_at_random_moments_resume_to_identical_stores() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let dir = TempDir::new("kill-timed");
    let shape = Shape { layers: 4, experts: 8, hidden: 256, ffn: 128, ..Shape::small() };
    let source = write_model(dir.path(), "m.gguf", &shape, 43);
    let clean = dir.path().join("clean");
    ingest(&source, &clean, &options(), &mut |_| {}).unwrap();
    let size = std::fs::metadata(&source).unwrap().len();

    let mut rng = Rng(2027);
    let (trials, mut killed) = (40, 0);
    for trial in 0..trials {
        let store = dir.path().join(format!("t{trial}"));
        // Up to three kills, then a run to the end.
        for _ in 0..1 + rng.below(3) {
            // The parent kills the child once it reports passing a random byte: the signal lands while the
            // child works on (a segment's writes, a checkpoint on its own thread), not at a point it chose.
            let kill_at = rng.below(size);
            let mut child = spawn_child(&source, &store);
            let progress = std::io::BufReader::new(child.stdout.take().unwrap());
            let passed =
                |l: &String| l.strip_prefix("done ").is_some_and(|n| n.parse::<u64>().unwrap() >= kill_at);
            // The pipe stays open until the child is gone: its reports never fail on a closed pipe.
            let mut lines = progress.lines();
            if lines.by_ref().map_while(Result::ok).any(|l| passed(&l)) {
                let _ = child.kill();
            }
            let status = child.wait().unwrap();
            drop(lines);
            if status.signal() == Some(libc::SIGKILL) {
                killed += 1;
                match Store::open(&store) {
                    // Killed after the manifest was marked complete: it must be whole.
                    Ok(done) => {
                        done.verify().unwrap();
                        assert_same_store(&store, &clean);
                    }
                    Err(Error::Incomplete { .. } | Error::NotAStore { .. }) => {}
                    Err(other) => panic!("trial {trial}: a killed store gave {other}"),
                }
            }
        }
        ingest(&source, &store, &options(), &mut |_| {}).unwrap();
        assert_same_store(&store, &clean);
        Store::open(&store).unwrap().verify().unwrap();
        std::fs::remove_dir_all(&store).unwrap();
    }
    eprintln!("{killed} kills landed in {trials} trials");
    assert!(killed >= 25, "only {killed} kills landed before their ingest finished");
}
