//! This example shows how to read expert records from a store with several reader threads, and measures
//! the read rate (random records, O_DIRECT by default; `RecordReader::read_rate`, what the engine's disk
//! probe runs too), printing one JSON line per thread count and piece count. `--pieces 4` reads each record as the engine's demand loads do with `--read-split 4`: its 4
//! pieces one after another (O_DIRECT-aligned parts of the record, each its own read).
//!
//! ```text
//! cargo run --release --example record-read -- DIR [--threads 1,4,8] [--pieces 1,4] [--records 512] [--buffered]
//! ```

use clap::Parser;
use diskformer::store::Store;

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
    for (&threads, &pieces) in args.threads.iter().flat_map(|t| args.pieces.iter().map(move |p| (t, p))) {
        // A fixed pseudo-random order (an LCG over record numbers), different for each measurement.
        let key = |i: usize| x.key((i * 2_654_435_761 + threads * 97 + pieces * 7919) % n_records);
        let rate = reader.read_rate(threads, args.records, pieces, key)?;
        let bytes = args.records as f64 * x.record_bytes as f64;
        let secs = bytes / rate;
        println!(
            "{{\"threads\": {threads}, \"pieces\": {pieces}, \"records\": {}, \"record_bytes\": {}, \"direct\": {}, \"seconds\": {secs:.3}, \"gb_per_s\": {:.3}, \"ms_per_record\": {:.3}}}",
            args.records,
            x.record_bytes,
            reader.is_direct(),
            rate / 1e9,
            secs * 1e3 * threads as f64 / args.records as f64
        );
    }
    Ok(())
}
