//! Damaged expert records are found where they are read, before anything computes on them: on every path a
//! record takes (GPU pool loads through the page cache or O_DIRECT, whole or in pieces, the CPU tier's
//! mapped records, the host tier's reads, the load of a resident pool), the step stops with an error naming
//! the record and its file; with the checks off the damaged weights run.

use diskformer_qwen3_moe::synthetic::SynthShape;
use diskformer_qwen3_moe::{Engine, EngineOptions};

mod common;
use common::model;

const PROMPT: [u32; 13] = [256, 257, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108];

/// Flips a bit in the middle of every record of layer 0 in place, so that any load of that layer reads
/// damage.
fn damage_layer_0(store: &std::path::Path) {
    use std::os::unix::fs::FileExt;
    let s = diskformer_store::Store::open(store).unwrap();
    let x = s.layout().experts.clone().unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(s.experts_path()).unwrap();
    for expert in 0..x.n_experts {
        let at = x.record_offset(diskformer_store::ExpertKey { layer: 0, expert }) + x.down_quants.offset + 7;
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, at).unwrap();
        file.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
    }
}

/// The whole chain of `err`'s messages.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

#[test]
fn a_damaged_record_stops_every_path_that_reads_it() {
    let m = model("integrity", SynthShape::tiny(), 5);
    let fresh = |f: &dyn Fn(&mut EngineOptions)| {
        let mut opts = EngineOptions::default();
        f(&mut opts);
        opts
    };
    let paths: [(&str, EngineOptions); 7] = [
        (
            "gpu pool, pieces through the page cache",
            fresh(&|o| (o.pool_slots, o.cpu.enabled) = (Some(5), Some(false))),
        ),
        (
            "gpu pool, whole records written",
            fresh(&|o| {
                (o.pool_slots, o.cpu.enabled) = (Some(5), Some(false));
                o.stream.upload = diskformer_expert_stream::UploadMethod::WriteBuffer;
            }),
        ),
        (
            "gpu pool, O_DIRECT",
            fresh(&|o| {
                (o.pool_slots, o.cpu.enabled, o.stream.direct_io) = (Some(5), Some(false), Some(true))
            }),
        ),
        (
            "gpu pool, route-ahead with speculative reads",
            fresh(&|o| (o.pool_slots, o.cpu.enabled, o.stream.prefetch) = (Some(5), Some(false), false)),
        ),
        ("cpu tier, mapped", fresh(&|o| (o.pool_slots, o.cpu.enabled) = (Some(4), Some(true)))),
        (
            "cpu tier, host tier",
            fresh(&|o| (o.pool_slots, o.stream.direct_io, o.cpu.enabled) = (Some(4), Some(true), Some(true))),
        ),
        ("resident", fresh(&|_| {})),
    ];
    let run = |opts: &EngineOptions| -> Result<Vec<f32>, diskformer_qwen3_moe::Error> {
        let mut e = Engine::open(&m.store, opts, &mut |_| {})?;
        e.prefill(&PROMPT, false)
    };
    let clean: Vec<Vec<f32>> = paths.iter().map(|(_, o)| run(o).unwrap()).collect();
    damage_layer_0(&m.store);
    for ((name, opts), clean) in paths.iter().zip(&clean) {
        let Err(err) = run(opts) else { panic!("{name}: ran on the damaged records") };
        let text = chain(&err);
        assert!(
            text.contains("expert record (layer 0,")
                && text.contains("experts.bin")
                && text.contains("does not match its checksum, read twice"),
            "{name}: {text}"
        );
        let mut unchecked = opts.clone();
        unchecked.stream.check_reads = false;
        let damaged = run(&unchecked).unwrap_or_else(|e| panic!("{name}, unchecked: {}", chain(&e)));
        assert!(damaged != *clean, "{name}: the damaged weights ran unchecked");
    }
}
