//! This example shows how to turn a GGUF into a diskformer expert store (resumable: run it again after an
//! interruption and it continues from its last checkpoint), how to verify a store, and how to repair one
//! whose records or tensors were damaged (rewritten from the GGUF it was made from).
//!
//! ```text
//! cargo run --release --example ingest -- MODEL.gguf --store DIR [--sha256 HEX]
//! cargo run --release --example ingest -- --verify DIR
//! cargo run --release --example ingest -- MODEL.gguf --repair DIR
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use diskformer::store::{IngestOptions, Pin, Store, ingest, repair};
use indicatif::{ProgressBar, ProgressStyle};

/// Ingest a GGUF into an expert store, or verify a store.
#[derive(Parser)]
struct Args {
    /// The GGUF to ingest.
    gguf: Option<PathBuf>,
    /// The store directory to create or resume.
    #[arg(long)]
    store: Option<PathBuf>,
    /// Refuse the GGUF unless its sha256 is this (hex); its size is pinned to the file's size.
    #[arg(long)]
    sha256: Option<String>,
    /// Read a K-quant file's experts (and its dense tensors but the Q8_0 ones) in place from the GGUF
    /// instead of copying them (the store then needs the GGUF where it is, unchanged).
    #[arg(long)]
    experts_in_gguf: bool,
    /// Verify every checksum of the store in DIR and exit non-zero naming the first bad record or tensor.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["gguf", "store"])]
    verify: Option<PathBuf>,
    /// Rewrite the damaged expert records and dense tensors of the store in DIR from the GGUF it was made
    /// from (given as the GGUF argument), then verify it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["store", "verify"], requires = "gguf")]
    repair: Option<PathBuf>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ingest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    if let Some(dir) = args.verify {
        let store = Store::open(&dir)?;
        let started = std::time::Instant::now();
        store.verify()?;
        let m = store.manifest();
        println!(
            "{}: ok ({} expert records, {} dense tensors verified in {:.1} s)",
            dir.display(),
            m.record_checksums.len(),
            m.dense_checksums.len(),
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    if let (Some(dir), Some(gguf)) = (&args.repair, &args.gguf) {
        let started = std::time::Instant::now();
        let done = repair(gguf, dir)?;
        let records: Vec<String> =
            done.records.iter().map(|k| format!("({}, {})", k.layer, k.expert)).collect();
        println!(
            "{}: repaired {} expert records (layer, expert) {} and {} dense tensors {:?} from {}; verified in {:.1} s",
            dir.display(),
            records.len(),
            records.join(" "),
            done.tensors.len(),
            done.tensors,
            gguf.display(),
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let (Some(gguf), Some(dir)) = (args.gguf, args.store) else {
        bail!("give a GGUF and --store DIR, --verify DIR, or a GGUF and --repair DIR (see --help)");
    };
    // A gguf-split set is read as its shards one after another: its size is theirs together.
    let model = diskformer::gguf::GgufModel::open(&gguf)?;
    let sizes = model.shards().map(|(path, _)| std::fs::metadata(path).map(|m| m.len()));
    let size =
        sizes.sum::<std::io::Result<u64>>().with_context(|| format!("cannot read {}", gguf.display()))?;
    drop(model);
    let opts = IngestOptions {
        pin: args.sha256.map(|sha256| Pin { size, sha256 }),
        copy_experts: !args.experts_in_gguf,
        ..IngestOptions::default()
    };
    let bar = ProgressBar::new(size).with_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}")
            .expect("valid template"),
    );
    let summary = ingest(&gguf, &dir, &opts, &mut |p| {
        bar.set_position(p.done);
    })?;
    bar.finish_and_clear();
    if summary.up_to_date {
        println!("{} is already complete for {}", dir.display(), gguf.display());
        return Ok(());
    }
    let gb = summary.bytes_read as f64 / 1e9;
    let resumed =
        summary.resumed_from.map(|o| format!(", resumed at {:.2} GB", o as f64 / 1e9)).unwrap_or_default();
    println!(
        "ingested {:.2} GB in {:.1} s ({:.2} GB/s{resumed}) into {}; sha256 {}",
        gb,
        summary.seconds,
        gb / summary.seconds.max(1e-9),
        dir.display(),
        summary.sha256
    );
    Ok(())
}
