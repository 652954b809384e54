//! `RecordReader::probe_readers`: every candidate measured, the pick among them, bad counts refused. Which
//! count is fastest depends on the disk, so no test asserts it.

mod common;

use common::{Shape, TempDir, write_model};
use diskformer_store::{Error, IngestOptions, Store, ingest};

fn store(tag: &str) -> (TempDir, Store) {
    let dir = TempDir::new(tag);
    let path = write_model(dir.path(), "m.gguf", &Shape::small(), 7);
    ingest(&path, &dir.path().join("store"), &IngestOptions::default(), &mut |_| {}).unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    (dir, store)
}

#[test]
fn probe_measures_every_candidate_and_picks_the_fewest_near_the_fastest() {
    let (_dir, store) = store("probe");
    for direct in [true, false] {
        let reader = store.record_reader(direct).unwrap();
        // More records than the 8 the store holds: the probe wraps around them.
        let probe = reader.probe_readers(&[1, 2, 4], 12).unwrap();
        assert_eq!(probe.rates.iter().map(|r| r.threads).collect::<Vec<_>>(), [1, 2, 4]);
        assert!(probe.rates.iter().all(|r| r.bytes_per_sec > 0.0 && r.bytes_per_sec.is_finite()));
        let fastest = probe.rates.iter().map(|r| r.bytes_per_sec).fold(0.0, f64::max);
        let near = probe.rates.iter().filter(|r| r.bytes_per_sec >= 0.95 * fastest).map(|r| r.threads);
        assert_eq!(Some(probe.best), near.min(), "{probe:?}");
    }
}

#[test]
fn probe_refuses_bad_counts() {
    let (_dir, store) = store("probe-bad");
    let reader = store.record_reader(false).unwrap();
    for (candidates, records) in [(&[][..], 8), (&[0, 2][..], 8), (&[1, 8][..], 4)] {
        let err = reader.probe_readers(candidates, records).unwrap_err();
        assert!(matches!(err, Error::BadProbe { .. }), "{candidates:?} {records}: {err}");
        assert!(err.to_string().contains("at least"), "{err}");
    }
}

#[test]
fn read_rate_reads_whole_records_or_pieces_and_refuses_zero_counts() {
    let (_dir, store) = store("read-rate");
    let reader = store.record_reader(true).unwrap();
    let n = reader.layout().n_records();
    for (threads, pieces) in [(1, 1), (3, 1), (2, 3)] {
        let rate = reader.read_rate(threads, 10, pieces, |i| reader.layout().key(i % n)).unwrap();
        assert!(rate > 0.0 && rate.is_finite(), "{threads} threads, {pieces} pieces: {rate}");
    }
    for (threads, records, pieces) in [(0, 4, 1), (1, 0, 1), (1, 4, 0)] {
        let err = reader.read_rate(threads, records, pieces, |i| reader.layout().key(i % n)).unwrap_err();
        assert!(matches!(err, Error::BadProbe { .. }), "{err}");
    }
}

#[test]
fn activity_counts_the_bytes_read_and_overlapping_reads_once() {
    let (_dir, store) = store("activity");
    let reader = store.record_reader(true).unwrap();
    let x = reader.layout().clone();
    assert_eq!(reader.activity(), Default::default());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (reader, x) = (&reader, &x);
            scope.spawn(move || {
                let mut buf = diskformer_store::RecordBuf::new(x.record_bytes as usize);
                for i in 0..x.n_records() {
                    reader.read(x.key((i + t) % x.n_records()), &mut buf).unwrap();
                }
            });
        }
    });
    let wall = started.elapsed();
    let a = reader.activity();
    assert_eq!(a.bytes, 4 * x.n_records() as u64 * x.record_bytes);
    // Busy time is a union of intervals inside the wall time, never their sum over threads.
    assert!(a.busy > std::time::Duration::ZERO && a.busy <= wall, "{a:?} in {wall:?}");
    // A record past the store reads nothing and counts nothing.
    let mut buf = diskformer_store::RecordBuf::new(x.record_bytes as usize);
    assert!(reader.read(diskformer_store::ExpertKey { layer: 99, expert: 0 }, &mut buf).is_err());
    assert_eq!(reader.activity().bytes, a.bytes);
    reader.reset_activity();
    assert_eq!(reader.activity(), Default::default());
}
