//! This example shows how to read expert records from a store with several reader threads, and measures
//! the read rate (random records, O_DIRECT by default), printing one JSON line per thread count.
//!
//! ```text
//! cargo run --release --example record-read -- DIR [--threads 1,4,8] [--records 512] [--buffered]
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::Parser;
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
    for &threads in &args.threads {
        // A fixed pseudo-random order (an LCG over record numbers), different for each thread count.
        let order: Vec<usize> =
            (0..args.records).map(|i| (i * 2_654_435_761 + threads * 97) % n_records).collect();
        let next = AtomicUsize::new(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut buf = RecordBuf::new(x.record_bytes as usize);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&r) = order.get(i) else { break };
                        reader.read(x.key(r), &mut buf).expect("record read");
                    }
                });
            }
        });
        let secs = started.elapsed().as_secs_f64();
        let bytes = args.records as f64 * x.record_bytes as f64;
        println!(
            "{{\"threads\": {threads}, \"records\": {}, \"record_bytes\": {}, \"direct\": {}, \"seconds\": {secs:.3}, \"gb_per_s\": {:.3}, \"ms_per_record\": {:.3}}}",
            args.records,
            x.record_bytes,
            reader.is_direct(),
            bytes / secs / 1e9,
            secs * 1e3 * threads as f64 / args.records as f64
        );
    }
    Ok(())
}
