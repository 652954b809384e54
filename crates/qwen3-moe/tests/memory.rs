//! Resident memory stays flat while experts stream: 600 tokens through a pool of 5 slots (every layer's
//! picks read back and routed on the host) after a first reply has compiled what it needs. A router kernel
//! whose loops lavapipe handled badly once kept ~170 KB a dispatch (~350 KB a token here; 200 MB over this
//! run); `examples/soak` runs the long version under random options.

use diskformer_bpe::chat::Message;
use diskformer_qwen3_moe::synthetic::SynthShape;
use diskformer_qwen3_moe::{Engine, EngineOptions, Event, GenerateOptions};

mod common;
use common::model;

fn resident_mb() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() * 4096.0 / 1e6
}

#[test]
fn streaming_keeps_resident_memory_flat() {
    let m = model("memory", SynthShape::tiny(), 5);
    let mut opts = EngineOptions::default();
    (opts.pool_slots, opts.cpu.enabled, opts.max_context) = (Some(5), Some(false), Some(512));
    let mut e = Engine::open(&m.store, &opts, &mut |_| {}).unwrap();
    let mut g = GenerateOptions::default();
    g.max_tokens = 40;
    let reply = |e: &mut Engine| {
        e.reset();
        let mut n = 0;
        for ev in e.generate(&[Message::user("hello")], &g).unwrap() {
            if let Event::Token(_) = ev.unwrap() {
                n += 1;
            }
        }
        n
    };
    reply(&mut e);
    let (start, mut tokens) = (resident_mb(), 0);
    while tokens < 600 {
        tokens += reply(&mut e).max(1);
    }
    let end = resident_mb();
    assert!(end < start + 40.0, "resident memory {start:.1} MB → {end:.1} MB over {tokens} streamed tokens");
}
