//! qwen35moe against llama.cpp: tiny and small synthetic files (two DeltaNet and two gated-attention layers, v
//! heads sharing q/k heads, partial RoPE, routed and shared experts), rebuilt from their goldens' arguments and
//! checked to be the files llama.cpp ran, fed the goldens' prompts and greedy ids: the CPU reference within
//! 2e-5 of llama.cpp's top log-probabilities (8e-7 when written; scripts/qwen3moe/llama_golden.py: F32
//! weights, F32 KV, flash attention off; its own float64 numpy forward agreed within 1e-5), the GPU model
//! (every weight resident) within issue 34's 2e-3 token by token, in chunks and over a cached prefix. And the
//! config's refusals.

use std::path::Path;

use diskformer_gguf::{Array, Metadata, TensorType, Value};
use diskformer_qwen3_moe::qwen35moe::synthetic::{Shape, write, write_as};
use diskformer_qwen3_moe::qwen35moe::{Config, MAX_CHUNK, Model, OpenOptions, Reference};
use diskformer_qwen3_moe::{Error, Routing, log_softmax};
use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
struct Top {
    id: u32,
    logprob: f64,
}

#[derive(Deserialize)]
struct Golden {
    fixture_sha256: String,
    synth_args: String,
    prompt_ids: Vec<u32>,
    ids: Vec<u32>,
    tops: Vec<Vec<Top>>,
    margins: Vec<f64>,
}

/// The golden `name` (`tests/data/qwen35moe/golden-NAME.json`) and its fixture, rebuilt from the golden's
/// arguments (`--shape qwen35moe-tiny|small --seed N`) into `dir` and checked to be the file llama.cpp ran.
fn fixture(name: &str, dir: &Path) -> (Golden, std::path::PathBuf) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/qwen35moe/golden-{name}.json"));
    let golden: Golden = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let words: Vec<&str> = golden.synth_args.split_whitespace().collect();
    assert_eq!((words[0], words[2]), ("--shape", "--seed"), "{}", golden.synth_args);
    let shape = match words[1] {
        "qwen35moe-tiny" => Shape::tiny(),
        "qwen35moe-small" => Shape::small(),
        other => panic!("unknown shape {other}"),
    };
    std::fs::create_dir_all(dir).unwrap();
    let gguf = dir.join(format!("qwen35moe-{name}.gguf"));
    write(&shape, words[3].parse().unwrap(), &gguf).unwrap();
    let sha = format!("{:x}", Sha256::digest(std::fs::read(&gguf).unwrap()));
    assert_eq!(sha, golden.fixture_sha256, "the writer changed: run scripts/qwen3moe/make_goldens.sh again");
    (golden, gguf)
}

/// Feeds `golden`'s greedy ids after the prompt's logits `logits` (through `step`), checking each pick and
/// returning the worst |Δ log-probability| against llama.cpp's top ones.
fn worst_against(golden: &Golden, mut logits: Vec<f32>, mut step: impl FnMut(u32) -> Vec<f32>) -> f64 {
    let mut worst = 0f64;
    for (i, (&id, tops)) in golden.ids.iter().zip(&golden.tops).enumerate() {
        let lp = log_softmax(&logits);
        for t in tops {
            worst = worst.max((f64::from(lp[t.id as usize]) - t.logprob).abs());
        }
        let best = (0..lp.len()).max_by(|&a, &b| lp[a].total_cmp(&lp[b])).unwrap();
        assert_eq!(best as u32, id, "step {i}: greedy pick (llama.cpp's margin {})", golden.margins[i]);
        logits = step(id);
    }
    worst
}

/// The GPU model of `gguf` with room for `context` positions; `None` (the test then returns) only where no
/// GPU can run it and `DISKFORMER_SKIP_GPU_TESTS=1` says to skip.
fn gpu_model(gguf: &Path, context: Option<u32>) -> Option<Model> {
    match Model::open(gguf, context) {
        Err(Error::Kernels(e)) if std::env::var("DISKFORMER_SKIP_GPU_TESTS").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPING: {e}");
            None
        }
        other => Some(other.unwrap()),
    }
}

/// A fresh directory for a test's fixtures (`tempfile`'s: removed when the test ends, passed, failed or
/// skipped).
fn temp_dir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("diskformer-qwen35moe-{what}-")).tempdir().unwrap()
}

#[test]
fn the_reference_gives_llama_cpps_log_probabilities() {
    let dir = temp_dir("reference");
    for name in ["tiny", "small"] {
        let (golden, gguf) = fixture(name, dir.path());
        let mut r = Reference::open(&gguf).unwrap();
        assert_eq!(r.config().recurrent, [true, false, true, false]);
        let run = |r: &mut Reference| {
            let mut logits = Vec::new();
            for &t in &golden.prompt_ids {
                logits = r.step(t).unwrap();
            }
            worst_against(&golden, logits, |id| r.step(id).unwrap())
        };
        let worst = run(&mut r);
        assert!(worst < 2e-5, "{name}: worst |Δ log-probability| {worst:.2e}");
        // From a reset, the same again: no state survives it.
        r.reset();
        assert_eq!(run(&mut r), worst);
        assert!(matches!(r.step(100_000), Err(Error::BadToken { .. })));
    }
}

/// The GPU model against llama.cpp (issue 34's bound: 2e-3; the KV cache is f16, llama.cpp's here F32):
/// the prompt token by token, in one chunk, and in chunks after a cached prefix; the same after a reset,
/// and after a prompt that departs from the cache (the state starts over).
#[test]
fn the_gpu_model_gives_llama_cpps_log_probabilities() {
    let dir = temp_dir("gpu");
    let (golden, gguf) = fixture("small", dir.path());
    let Some(mut m) = gpu_model(&gguf, Some(256)) else { return };
    let prompt = &golden.prompt_ids;
    let mut worst = Vec::new();
    // Token by token.
    let mut logits = Vec::new();
    for &t in prompt {
        logits = m.step(t).unwrap();
    }
    worst.push(worst_against(&golden, logits, |id| m.step(id).unwrap()));
    // One chunk, from a reset.
    m.reset();
    let logits = m.prefill(prompt).unwrap();
    worst.push(worst_against(&golden, logits, |id| m.step(id).unwrap()));
    // A prompt that departs from the cache starts over (shorter, then longer than what it holds); then a
    // cached prefix and the rest in one chunk.
    let other: Vec<u32> = prompt.iter().map(|&t| t ^ 1).collect();
    m.prefill(&other[..5]).unwrap();
    assert_eq!(m.cached_tokens(), &other[..5]);
    m.prefill(&prompt[..7]).unwrap();
    assert_eq!(m.cached_tokens(), &prompt[..7]);
    let logits = m.prefill(prompt).unwrap();
    assert_eq!(m.cached_tokens(), &prompt[..]);
    worst.push(worst_against(&golden, logits, |id| m.step(id).unwrap()));
    // Greedy steps picked on the GPU: llama.cpp's ids.
    m.reset();
    m.prefill(prompt).unwrap();
    for (i, pair) in golden.ids.windows(2).enumerate() {
        assert_eq!(m.step_greedy(pair[0]).unwrap(), pair[1], "greedy step {}", i + 1);
    }
    eprintln!("worst |Δ log-probability| (token by token, one chunk, after a prefix): {worst:?}");
    assert!(worst.iter().all(|&w| w < 2e-3), "{worst:?}");
    assert!(matches!(m.step(100_000), Err(Error::BadToken { .. })));
}

/// The routed experts streamed through a pool of slots give the logits of every expert resident, in
/// chunks and token by token, and llama.cpp's golden: a pool of 2 × top-k slots (a layer's picks of two
/// tokens at most: chunks of 2, each pair's slot written by the host), one of twice a layer's experts
/// (chunks of any length, grouped on the GPU through the slot table), and 2 × top-k slots with the CPU tier
/// (a one-token step's misses computed on the host, their sum joining the GPU's combine as a pick), from
/// mapped records or the host tier's; and a pool sized by a small budget, its chunks' scratch too. The pool
/// loads what it misses; a bad token is refused with the cache
/// kept, kernel times (which need every expert resident) refused, and fewer slots than 2 × top-k refused at
/// open.
#[test]
fn streamed_experts_give_the_resident_logits() {
    let dir = temp_dir("gpu-streamed");
    let (golden, gguf) = fixture("small", dir.path());
    let Some(mut resident) = gpu_model(&gguf, Some(256)) else { return };
    assert!(!resident.streams_experts() && resident.stream_stats().is_none());
    let prompt: Vec<u32> = (0..40u32).map(|i| 97 + (i * 7 + i / 5) % 26).collect();
    let run = |m: &mut Model| {
        let mut logits = vec![m.prefill(&prompt).unwrap()];
        logits.extend([104, 105, 33].map(|id| m.step(id).unwrap()));
        logits
    };
    let want = run(&mut resident);
    let open = |slots, cpu, ram_budget| {
        let mut opts = OpenOptions {
            max_context: Some(256),
            pool_slots: Some(slots),
            store_dir: Some(dir.path().join("store")),
            ..OpenOptions::default()
        };
        opts.cpu.enabled = Some(cpu);
        opts.cpu.ram_budget = ram_budget;
        Model::open_with(&gguf, &opts, &mut |_| {})
    };
    // The host tier's budget: room for every record.
    let host = Some(64 << 20);
    // Four slots bound the chunks to two tokens (8 experts a layer, top-2); eight hold a layer's experts, so a
    // chunk of any length pins its union.
    let cases = [(4, 2, false, None), (8, MAX_CHUNK, false, None), (4, 2, true, None), (4, 2, true, host)];
    for (slots, chunk, cpu, ram_budget) in cases {
        let what = format!("{slots} slots, CPU tier {cpu}, host tier {ram_budget:?}");
        let mut m = open(slots, cpu, ram_budget).unwrap();
        assert!(m.streams_experts() && m.pool_slots() == Some(slots), "{what}");
        assert_eq!(m.max_chunk(), chunk, "{what}");
        let got = run(&mut m);
        let mut moved = 0f32;
        for (i, (a, b)) in want.iter().zip(&got).enumerate() {
            let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-4, "{what}, output {i}: moved by {worst}");
            moved = moved.max(worst);
        }
        eprintln!("{what}: logits moved by {moved:.2e} from every expert resident");
        let stats = m.stream_stats().unwrap();
        assert!(stats.pool.misses > 0 && stats.pool.bytes_read > 0, "{what}: {:?}", stats.pool);
        assert_eq!(stats.cpu_experts > 0, cpu, "{what}: {} experts on the CPU", stats.cpu_experts);
        assert_eq!(stats.host.is_some_and(|h| h.reads > 0), ram_budget.is_some(), "{what}: {:?}", stats.host);
        let logits = m.prefill(&golden.prompt_ids).unwrap();
        let worst = worst_against(&golden, logits, |id| m.step(id).unwrap());
        assert!(worst < 2e-3, "{what}: worst |Δ log-probability| against llama.cpp {worst}");
        // Across a cached prefix: a prompt that departs from the cache, then the whole one after its start.
        let prompt = &golden.prompt_ids;
        m.prefill(&prompt[..7]).unwrap();
        let logits = m.prefill(prompt).unwrap();
        assert_eq!(m.cached_tokens(), &prompt[..]);
        let worst = worst_against(&golden, logits, |id| m.step(id).unwrap());
        assert!(worst < 2e-3, "{what}, after a cached prefix: worst |Δ log-probability| {worst}");
    }
    // The host arena: eight slots, two of them stage slots for the CPU tier's share of the misses (fixed
    // at one half, so that every layer with two misses sends one to the GPU), the cache's six bounding the
    // chunks to three tokens; the pool's loads copy from the arena (nothing read from the GGUF after it is
    // filled). The expert kernels read device slots only: reading the arena over the bus is refused.
    // Without the CPU tier, the arena serves every load and there are no stage slots.
    let arena = |cpu: bool, share: f64, over_bus: bool| {
        let mut opts = OpenOptions {
            max_context: Some(256),
            pool_slots: Some(8),
            store_dir: Some(dir.path().join("store")),
            host_arena: Some(true),
            ..OpenOptions::default()
        };
        opts.cpu.enabled = Some(cpu);
        opts.cpu.arena_share = Some(share);
        opts.cpu.arena_over_bus = over_bus;
        Model::open_with(&gguf, &opts, &mut |_| {})
    };
    for (cpu, stage_slots, chunk) in [(true, 2, 3), (false, 0, MAX_CHUNK)] {
        let mut m = arena(cpu, 0.5, false).unwrap();
        assert_eq!(m.max_chunk(), chunk, "CPU tier {cpu}");
        m.reset_stream_stats();
        let got = run(&mut m);
        let moved =
            want.iter().flatten().zip(got.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(moved < 1e-4, "the arena, CPU tier {cpu}: moved by {moved}");
        let stats = m.stream_stats().unwrap();
        assert!(stats.arena_bytes > 0 && stats.stage_slots == stage_slots, "{stats:?}");
        assert_eq!(stats.cpu_arena_picks > 0 && stats.cpu_experts > 0, cpu, "{stats:?}");
        assert!(
            stats.pool.misses > 0 && stats.disk.bytes == 0,
            "the pool's loads copy from the arena: {stats:?}"
        );
    }
    let err = arena(true, 0.5, true).unwrap_err();
    assert!(matches!(err, Error::BadOption { option: "arena_over_bus", .. }), "{err}");
    // A budget: the pool from what the rest leaves, under which the chunks' scratch shrinks to the chunks
    // the pool bounds (at this size the longest chunk's scratch would leave no pool at all).
    let budget = 40_000_000;
    let opts = OpenOptions {
        max_context: Some(256),
        gpu_budget: Some(budget),
        store_dir: Some(dir.path().join("store")),
        ..OpenOptions::default()
    };
    let mut m = Model::open_with(&gguf, &opts, &mut |_| {}).unwrap();
    let taken = m.stream_stats().unwrap().gpu_bytes.total();
    assert!(m.max_chunk() < MAX_CHUNK && taken <= budget, "chunks of {}, {taken} bytes", m.max_chunk());
    let got = run(&mut m);
    let moved =
        want.iter().flatten().zip(got.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(moved < 1e-4, "{budget}-byte budget: moved by {moved}");
    // Bad input is refused before any layer runs: the cache stays as it was.
    let mut m = open(4, false, None).unwrap();
    m.prefill(&prompt[..5]).unwrap();
    assert!(matches!(m.step(100_000), Err(Error::BadToken { .. })));
    assert_eq!(m.cached_tokens(), &prompt[..5]);
    assert!(matches!(m.kernel_times(1, 1), Err(Error::BadOption { option: "kernel_times", .. })));
    let err = open(3, false, None).unwrap_err();
    assert!(matches!(err, Error::BadOption { option: "pool_slots", .. }), "{err}");
}

/// Forced routing (the benchmarks' workloads): seeded uniform picks replace the routers' top-k, with every
/// expert resident and streamed alike (the same logits, one-token steps and chunks of 2), and move the
/// logits away from the routers' own picks'; picks recorded as a trace (resident or streaming) and played
/// back (the other way) give the logits they were recorded with.
#[test]
fn forced_routing_replaces_the_routers_picks() {
    let dir = temp_dir("gpu-forced");
    let (golden, gguf) = fixture("small", dir.path());
    if gpu_model(&gguf, Some(64)).is_none() {
        return;
    }
    let run = |routing: Routing, pool_slots, record_routing| {
        let opts = OpenOptions {
            max_context: Some(64),
            pool_slots,
            store_dir: Some(dir.path().join("store")),
            routing,
            record_routing,
            ..OpenOptions::default()
        };
        let mut m = Model::open_with(&gguf, &opts, &mut |_| {}).unwrap();
        let mut logits = vec![m.prefill(&golden.prompt_ids).unwrap()];
        logits.extend([104, 105].map(|id| m.step(id).unwrap()));
        logits
    };
    let diff = |a: &[Vec<f32>], b: &[Vec<f32>]| {
        let pairs = a.iter().flatten().zip(b.iter().flatten());
        pairs.map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
    };
    let trace = dir.path().join("picks.jsonl");
    let own = run(Routing::Router, None, Some(trace.clone()));
    let uniform = run(Routing::Uniform { seed: 7 }, None, None);
    let streamed_trace = dir.path().join("streamed-picks.jsonl");
    let streamed = run(Routing::Uniform { seed: 7 }, Some(4), Some(streamed_trace.clone()));
    assert!(diff(&own, &uniform) > 0.1, "the forced picks changed nothing: {}", diff(&own, &uniform));
    assert!(diff(&uniform, &streamed) < 1e-4, "streamed: moved by {}", diff(&uniform, &streamed));
    // The routers' own picks, recorded (a line a token: the prompt's, then the steps'), played back
    // through a pool in chunks of 2: the routers' logits.
    let lines = std::fs::read_to_string(&trace).unwrap().lines().count();
    assert_eq!(lines, golden.prompt_ids.len() + 2);
    let replayed = run(Routing::Trace(trace), Some(4), None);
    assert!(diff(&own, &replayed) < 1e-4, "replayed: moved by {}", diff(&own, &replayed));
    // And recorded while streaming, played back with every expert resident.
    let replayed = run(Routing::Trace(streamed_trace), None, None);
    assert!(diff(&uniform, &replayed) < 1e-4, "replayed: moved by {}", diff(&uniform, &replayed));
}

/// A long prompt as one chunk (the dense and grouped expert GEMMs, attention over the chunk, the delta rule
/// through it) gives the logits that running it token by token gives.
#[test]
fn a_long_chunk_matches_the_same_tokens_one_by_one() {
    let dir = temp_dir("gpu-long-chunk");
    let (_, gguf) = fixture("small", dir.path());
    let Some(mut m) = gpu_model(&gguf, Some(256)) else { return };
    let prompt: Vec<u32> = (0..150u32).map(|i| 97 + (i * 7 + i / 5) % 26).collect();
    let chunk = m.prefill(&prompt).unwrap();
    m.reset();
    let mut steps = Vec::new();
    for &id in &prompt {
        steps = m.step(id).unwrap();
    }
    let worst = chunk.iter().zip(&steps).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    eprintln!("one chunk against one by one: worst |Δ logit| {worst:.2e}");
    assert!(worst < 1e-4, "one chunk against one by one: {worst}");
}

/// The kernel times cover the chunk's graph, each kernel once, and a chunk of 8 tokens or more groups its
/// pairs by expert for the grouped expert GEMMs where a one-token step does not (which attends through the
/// split kernel instead).
#[test]
fn the_gpu_model_times_each_kernel_of_a_chunk() {
    let dir = temp_dir("gpu-kernel-times");
    let (_, gguf) = fixture("small", dir.path());
    let Some(mut m) = gpu_model(&gguf, Some(64)) else { return };
    for (t, grouped) in [(1, false), (9, true)] {
        let times = m.kernel_times(t, 1).unwrap();
        assert_eq!(times[0].kernel, "chunk");
        let kernels: Vec<&str> = times[1..].iter().map(|k| k.kernel.as_str()).collect();
        let distinct: std::collections::HashSet<&str> = kernels.iter().copied().collect();
        assert_eq!(distinct.len(), kernels.len(), "each kernel once: {kernels:?}");
        assert_eq!(times[1..].iter().map(|k| k.dispatches).sum::<usize>(), times[0].dispatches);
        assert_eq!(kernels.contains(&"expert_groups"), grouped, "{t} tokens: {kernels:?}");
        // One token attends through the split kernel, a chunk through the chunk kernels.
        assert_eq!(kernels.contains(&"attention_split"), t == 1, "{t} tokens: {kernels:?}");
        // A resident token's gate‖up ranks the router's logits itself, with SwiGLU on its output, and the
        // shared expert's gate‖up takes SwiGLU in its dispatch too.
        assert_eq!(kernels.contains(&"router_topk"), t > 1, "{t} tokens: {kernels:?}");
        assert_eq!(kernels.contains(&"silu_mul"), t > 1, "{t} tokens: {kernels:?}");
    }
    assert!(matches!(m.kernel_times(0, 1), Err(Error::BadOption { .. })));
    assert!(matches!(m.kernel_times(MAX_CHUNK + 1, 1), Err(Error::BadOption { .. })));
}

/// A chat's next turn: the prompt goes on from the last prompt's end, not from the reply the cache holds
/// after it, so the model goes back to its checkpoint there and runs only the new tokens; the logits are
/// those of the whole prompt run from a reset.
#[test]
fn the_gpu_model_resumes_a_prompt_from_its_checkpoint() {
    let dir = temp_dir("gpu-checkpoint");
    let (golden, gguf) = fixture("small", dir.path());
    let Some(mut m) = gpu_model(&gguf, Some(256)) else { return };
    let prompt = &golden.prompt_ids;
    m.prefill(prompt).unwrap();
    for &id in &golden.ids[..5] {
        m.step(id).unwrap();
    }
    // The next turn: the prompt, then not the reply the cache holds but other tokens.
    let next: Vec<u32> = prompt.iter().copied().chain([258, 10, 256, 257, 104, 105]).collect();
    let before = m.tokens_run();
    let resumed = m.prefill(&next).unwrap();
    assert_eq!(m.tokens_run() - before, 6, "only the new tokens ran");
    assert_eq!(m.cached_tokens(), &next[..]);
    m.reset();
    let whole = m.prefill(&next).unwrap();
    let worst = resumed.iter().zip(&whole).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-5, "{worst}");
    // A prompt that departs before the checkpoint starts over.
    let before = m.tokens_run();
    m.prefill(&next[..10]).unwrap();
    assert_eq!(m.tokens_run() - before, 10);
}

/// The GPU model on quantised matrices (Q8_0, Q4_K: the block GEMVs' own paths) against the CPU reference
/// on the same file, which dequantises every tensor and multiplies in f32: the same top log-probabilities
/// within issue 34's 2e-3 over a prompt and a few steps.
#[test]
fn the_gpu_model_matches_the_reference_on_quantised_files() {
    let dir = temp_dir("gpu-quantised");
    for ty in [TensorType::Q8_0, TensorType::Q4K] {
        let gguf = dir.path().join(format!("small-{}.gguf", ty.name()));
        write_as(&Shape::small(), 9, ty, &gguf).unwrap();
        let Some(mut m) = gpu_model(&gguf, Some(64)) else { return };
        let mut r = Reference::open(&gguf).unwrap();
        let prompt = [256u32, 257, 72, 105, 33, 258, 10, 256, 257, 97, 98, 99];
        let mut got = m.prefill(&prompt).unwrap();
        let mut want = Vec::new();
        for &t in &prompt {
            want = r.step(t).unwrap();
        }
        let mut worst = 0f32;
        for _ in 0..6 {
            // The reference's five most likely tokens, as the goldens compare llama.cpp's.
            let (g, w) = (log_softmax(&got), log_softmax(&want));
            let mut order: Vec<usize> = (0..w.len()).collect();
            order.sort_by(|&a, &b| w[b].total_cmp(&w[a]));
            worst = order[..5].iter().map(|&i| (g[i] - w[i]).abs()).fold(worst, f32::max);
            let next = (0..w.len()).max_by(|&a, &b| w[a].total_cmp(&w[b])).unwrap() as u32;
            got = m.step(next).unwrap();
            want = r.step(next).unwrap();
        }
        eprintln!("{}: worst |Δ log-probability| {worst:.2e}", ty.name());
        assert!(worst < 2e-3, "{}: {worst}", ty.name());
        // Streamed (in chunks as long, through the same kernels), the experts read in place from the file:
        // the same logits, and the store beside it holds no copy of any weight (its header and manifest).
        // Eight slots: one layer's experts, so the prompt runs as one chunk, as the resident model runs it.
        let store = dir.path().join(format!("store-{}", ty.name()));
        let opts = OpenOptions {
            max_context: Some(64),
            pool_slots: Some(8),
            store_dir: Some(store.clone()),
            ..OpenOptions::default()
        };
        let mut streamed = Model::open_with(&gguf, &opts, &mut |_| {}).unwrap();
        assert_eq!(streamed.max_chunk(), MAX_CHUNK, "{}", ty.name());
        m.reset();
        let (a, b) = (m.prefill(&prompt).unwrap(), streamed.prefill(&prompt).unwrap());
        let moved = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(moved < 1e-4, "{}: streamed moved the logits by {moved}", ty.name());
        let stored: u64 =
            std::fs::read_dir(&store).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
        let weights = std::fs::metadata(&gguf).unwrap().len();
        eprintln!("{}: the store holds {stored} bytes beside a {weights}-byte file", ty.name());
        assert!(
            stored < weights / 20,
            "{}: the store holds {stored} bytes of a {weights}-byte file",
            ty.name()
        );
    }
}

/// What the GPU model cannot run is refused at open, naming the tensor: the tiny file's 64-value rows (the
/// block GEMVs take multiples of 256), a context past the model's.
#[test]
fn the_gpu_model_refuses_what_it_cannot_run_at_open() {
    let dir = temp_dir("gpu-refusals");
    let (_, tiny) = fixture("tiny", dir.path());
    let err = match Model::open(&tiny, None) {
        Err(Error::Kernels(e)) if std::env::var("DISKFORMER_SKIP_GPU_TESTS").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPING: {e}");
            return;
        }
        other => other.unwrap_err().to_string(),
    };
    assert!(
        err.contains("\"token_embd.weight\": rows of 64 values; the GPU's block GEMVs take multiples of 256"),
        "{err}"
    );
    let (_, small) = fixture("small", dir.path());
    let err = Model::open(&small, Some(4097)).unwrap_err().to_string();
    assert!(err.contains("max_context: 4097 positions; allowed 1..=4096"), "{err}");
}

/// A metadata set of the tiny shape, with `f` applied.
fn metadata(f: impl FnOnce(&mut Vec<(String, Value)>)) -> Metadata {
    let a = "qwen35moe";
    let u = |k: &str, v: u32| (format!("{a}.{k}"), Value::U32(v));
    let mut kv = vec![
        ("general.architecture".to_owned(), Value::String(a.into())),
        u("context_length", 4096),
        u("embedding_length", 64),
        u("block_count", 4),
        u("attention.head_count", 4),
        u("attention.head_count_kv", 2),
        u("attention.key_length", 64),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        u("rope.dimension_count", 16),
        (format!("{a}.rope.dimension_sections"), Value::Array(Array::I32(vec![3, 3, 2, 0]))),
        u("expert_count", 4),
        u("expert_used_count", 2),
        u("expert_feed_forward_length", 32),
        u("expert_shared_feed_forward_length", 48),
        u("ssm.conv_kernel", 4),
        u("ssm.inner_size", 64),
        u("ssm.state_size", 16),
        u("ssm.time_step_rank", 4),
        u("ssm.group_count", 2),
    ];
    f(&mut kv);
    // The last value pushed for a key wins.
    let mut m = Metadata::new();
    for (k, v) in kv.into_iter().rev() {
        m.insert(k, v);
    }
    m
}

#[test]
fn the_config_reads_the_layer_pattern_and_refuses_what_llama_cpp_refuses() {
    let c = Config::from_metadata(&metadata(|_| {})).unwrap();
    assert_eq!(c.recurrent, [true, true, true, false], "every 4th block is attention by default");
    assert_eq!((c.key_dim(), c.value_dim(), c.conv_channels()), (32, 64, 128));
    let flags = |kv: &mut Vec<(String, Value)>| {
        kv.push((
            "qwen35moe.attention.recurrent_layers".into(),
            Value::Array(Array::Bool(vec![false, true, true, false])),
        ))
    };
    assert_eq!(Config::from_metadata(&metadata(flags)).unwrap().recurrent, [false, true, true, false]);
    let refused = |f: fn(&mut Vec<(String, Value)>), what: &str| {
        let err = Config::from_metadata(&metadata(f)).unwrap_err().to_string();
        assert!(err.contains(what), "{what}: {err}");
    };
    refused(|kv| kv[0].1 = Value::String("qwen3moe".into()), "is \"qwen3moe\"; expected a qwen35moe model");
    refused(|kv| kv.retain(|(k, _)| !k.ends_with("ssm.state_size")), "qwen35moe.ssm.state_size");
    refused(|kv| kv.retain(|(k, _)| !k.contains("ssm.")), "qwen35moe.ssm.group_count");
    refused(|kv| kv.push(("qwen35moe.ssm.inner_size".into(), Value::U32(60))), "qwen35moe.ssm.inner_size");
    refused(|kv| kv.push(("qwen35moe.attention.value_length".into(), Value::U32(32))), "value_length");
    refused(|kv| kv[9].1 = Value::Array(Array::I32(vec![3, 3, 2])), "rope.dimension_sections");
    refused(
        |kv| {
            kv.push(("qwen35moe.ssm.time_step_rank".into(), Value::U32(3)));
            kv.push(("qwen35moe.ssm.inner_size".into(), Value::U32(48)));
        },
        "2 q/k heads must divide 3 v heads",
    );
    refused(
        |kv| {
            kv.push(("qwen35moe.attention.recurrent_layers".into(), Value::Array(Array::Bool(vec![true; 3]))))
        },
        "3 flags for 4 blocks",
    );
    refused(|kv| kv.push(("qwen35moe.attention.layer_norm_rms_epsilon".into(), Value::F64(1e-6))), "f32");
}
