//! This example shows how to read expert records from a store with several reader threads, and measures
//! the read rate (random records, O_DIRECT by default), printing one JSON line per thread count and piece
//! count. `--pieces 4` reads each record as the engine's demand loads do with `--read-split 4`: its 4
//! pieces one after another (O_DIRECT-aligned parts of the record, each its own read).
//!
//! ```text
//! cargo run --release --example record-read -- DIR [--threads 1,4,8] [--pieces 1,4] [--records 512] [--buffered]
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::Parser;
use diskformer::expert_stream::StagingRing;
use diskformer::store::{RecordBuf, Store};

/// Measure random record reads from a store.
#[derive(Parser)]
struct Args {
    /// The store directory.
    store: std::path::PathBuf,
    /// Reader thread counts to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    threads: Vec<usize>,
    /// Records read per measurement.
    #[arg(long, default_value_t = 512)]
    records: usize,
    /// Pieces each record is read in, one after another, comma separated (1: one read a record).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pieces: Vec<usize>,
    /// Use the page cache instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let store = Store::open(&args.store)?;
    let reader = store.record_reader(!args.buffered)?;
    let x = reader.layout().clone();
    let n_records = x.n_records();
    anyhow::ensure!(args.pieces.iter().all(|&p| p >= 1), "--pieces: each count must be at least 1");
    let record = x.record_bytes as usize;
    for (&threads, &pieces) in args.threads.iter().flat_map(|t| args.pieces.iter().map(move |p| (t, p))) {
        let piece = StagingRing::piece_bytes(record, pieces);
        // A fixed pseudo-random order (an LCG over record numbers), different for each measurement.
        let order: Vec<usize> = (0..args.records)
            .map(|i| (i * 2_654_435_761 + threads * 97 + pieces * 7919) % n_records)
            .collect();
        let next = AtomicUsize::new(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut buf = RecordBuf::new(record);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&r) = order.get(i) else { break };
                        for (at, dst) in (0..record).step_by(piece).zip(buf.as_mut_slice().chunks_mut(piece))
                        {
                            let len = piece.min(record - at);
                            reader.read_part_into(x.key(r), at, dst, len).expect("record read");
                        }
                    }
                });
            }
        });
        let secs = started.elapsed().as_secs_f64();
        let bytes = args.records as f64 * x.record_bytes as f64;
        println!(
            "{{\"threads\": {threads}, \"pieces\": {pieces}, \"records\": {}, \"record_bytes\": {}, \"direct\": {}, \"seconds\": {secs:.3}, \"gb_per_s\": {:.3}, \"ms_per_record\": {:.3}}}",
            args.records,
            x.record_bytes,
            reader.is_direct(),
            bytes / secs / 1e9,
            secs * 1e3 * threads as f64 / args.records as f64
        );
    }
    Ok(())
}
