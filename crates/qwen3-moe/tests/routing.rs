//! Protects forced routing and its recording on a tiny synthetic model (lavapipe in CI): a run forced
//! from the trace a router run recorded gives that run's logits bit for bit on every step path; uniform
//! picks are the seeded generator's; the CPU tier gives the GPU's logits under forced picks and maps each
//! record in once; a bad trace line or a trace too short is a clear error naming it.

use std::path::Path;

use diskformer_expert_stream::{RouteShape, RouteSource, TraceRoutes, UniformRoutes};
use diskformer_qwen3_moe::synthetic::SynthShape;

mod common;
use common::Model;
use diskformer_qwen3_moe::{Engine, EngineOptions, Error, Routing};

fn model(name: &str) -> Model {
    common::model(&format!("routing-{name}"), SynthShape::tiny(), 11)
}

/// The model opened with `f`'s options; the CPU tier, where it runs, takes its default inputs (f32 or Q16,
/// each to about f32's rounding of the GPU's), so that runs on different paths agree to rounding.
fn open(m: &Model, f: impl FnOnce(&mut EngineOptions)) -> Result<Engine, Error> {
    let mut opts = EngineOptions::default();
    f(&mut opts);
    Engine::open(&m.store, &opts, &mut |_| {})
}

/// A change to the options.
type Tweak = fn(&mut EngineOptions);

const PROMPT: [u32; 9] = [256, 72, 101, 108, 108, 111, 44, 32, 119];
const STEPS: [u32; 4] = [111, 114, 108, 100];

/// The prompt (batched or not) then the steps; every step's logits.
fn run(e: &mut Engine, batched: bool) -> Result<Vec<Vec<f32>>, Error> {
    let mut out = vec![e.prefill(&PROMPT, batched)?];
    for &id in &STEPS {
        out.push(e.step(id)?);
    }
    Ok(out)
}

fn shape(m: &Model) -> RouteShape {
    let e = open(m, |_| {}).unwrap();
    let c = e.config();
    RouteShape { layers: c.block_count, experts: c.expert_count, top_k: c.expert_used_count }
}

fn read_trace(path: &Path, shape: RouteShape, tokens: usize) -> Vec<Vec<Vec<u32>>> {
    let mut t = TraceRoutes::open(path, shape).unwrap();
    (0..tokens).map(|_| t.next_token().unwrap()).collect()
}

fn sorted(mut token: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    token.iter_mut().for_each(|l| l.sort_unstable());
    token
}

/// Forcing the picks a router run recorded changes nothing: the mask adds 0 to every pick's logit, so the
/// top-k and its weights are the router's, on every step path (resident, per layer, route-ahead, the CPU
/// tier), token by token and batched.
#[test]
fn a_recorded_trace_forced_again_gives_the_same_logits() {
    let m = model("replay");
    let trace = m.dir.join("recorded.jsonl");
    let paths: [(&str, Tweak); 4] = [
        ("prefetch on", |o| o.cpu.enabled = Some(false)),
        ("prefetch off (route-ahead)", |o| {
            o.cpu.enabled = Some(false);
            o.stream.prefetch = false
        }),
        ("CPU tier", |o| o.cpu.enabled = Some(true)),
        ("CPU tier, prefetch off", |o| {
            o.cpu.enabled = Some(true);
            o.stream.prefetch = false
        }),
    ];
    for (batched, slots) in [(false, None), (true, None), (false, Some(4)), (true, Some(6))] {
        let mut recording = open(&m, |o| {
            o.record_routing = Some(trace.clone());
            o.pool_slots = slots;
        })
        .unwrap();
        let recorded = run(&mut recording, batched).unwrap();
        drop(recording);
        let tokens = PROMPT.len() + STEPS.len();
        assert_eq!(std::fs::read_to_string(&trace).unwrap().lines().count(), tokens);
        for (what, f) in paths {
            let want = run(
                &mut open(&m, |o| {
                    o.pool_slots = slots;
                    f(o);
                })
                .unwrap(),
                batched,
            )
            .unwrap();
            let mut forced = open(&m, |o| {
                o.routing = Routing::Trace(trace.clone());
                o.pool_slots = slots;
                f(o);
            })
            .unwrap();
            let got = run(&mut forced, batched).unwrap();
            // The CPU tier's split between the GPU and the host follows what the pool holds when a layer
            // is planned, which background loads change with timing; the host sums in another order.
            let tol = if what.starts_with("CPU") && slots.is_some() { 1e-4 } else { 0.0 };
            let what = format!("{what}, batched {batched}, slots {slots:?}");
            for (step, (g, w)) in got.iter().zip(&want).enumerate() {
                let d = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(d <= tol, "{what}, step {step}: forced logits {d} from the router's");
            }
            // And the recording run (which reads every layer's picks back) computed the same to rounding.
            for (step, (g, r)) in got.iter().zip(&recorded).enumerate() {
                let d = g.iter().zip(r).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(d < 1e-3, "{what}, step {step}: {d} from the recording run");
            }
        }
    }
}

/// The CPU tier maps each record in (and checks it) once, at its first use or ahead on its mapping thread,
/// never again: over runs that compute more picks on the host than the model has records, the first uses
/// counted stay within the records. The store's pages are dropped first, so that the mapping thread (which
/// maps in only records already in the page cache) leaves them to their first use.
#[test]
fn the_cpu_tier_maps_each_record_in_once() {
    let m = model("first-uses");
    let experts = std::fs::File::open(m.store.join("experts.bin")).unwrap();
    experts.sync_all().unwrap();
    // Safety: a plain advisory call on an open descriptor.
    unsafe {
        libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&experts), 0, 0, libc::POSIX_FADV_DONTNEED)
    };
    let mut e = open(&m, |o| {
        o.cpu.enabled = Some(true);
        o.pool_slots = Some(4);
        o.routing = Routing::Uniform { seed: 3 };
    })
    .unwrap();
    let c = e.config();
    let records = u64::from(c.block_count * c.expert_count);
    let (mut picks, mut first_uses) = (0, 0);
    for _ in 0..4 {
        e.reset();
        e.reset_stats();
        run(&mut e, false).unwrap();
        let s = e.stats();
        assert!(
            s.cpu_first_uses <= s.cpu_experts,
            "{} first uses of {} picks",
            s.cpu_first_uses,
            s.cpu_experts
        );
        (picks, first_uses) = (picks + s.cpu_experts, first_uses + s.cpu_first_uses);
    }
    assert!(picks > 2 * records, "the host computed {picks} picks, too few to repeat records");
    assert!((1..=records).contains(&first_uses), "{first_uses} first uses of {records} records");
}

#[test]
fn uniform_picks_are_the_seeded_generators() {
    let m = model("uniform");
    let shape = shape(&m);
    let trace = m.dir.join("uniform.jsonl");
    for slots in [None, Some(4)] {
        let mut e = open(&m, |o| {
            o.routing = Routing::Uniform { seed: 9 };
            o.record_routing = Some(trace.clone());
            o.pool_slots = slots;
        })
        .unwrap();
        run(&mut e, true).unwrap();
        let tokens = PROMPT.len() + STEPS.len();
        let mut uniform = UniformRoutes::new(shape, 9);
        for (i, got) in read_trace(&trace, shape, tokens).into_iter().enumerate() {
            assert_eq!(sorted(got), sorted(uniform.next_token().unwrap()), "token {i}, slots {slots:?}");
        }
    }
}

#[test]
fn bad_or_short_traces_are_clear_errors() {
    let m = model("bad");
    let shape = shape(&m);
    let path = m.dir.join("bad.jsonl");
    let good: Vec<Vec<u32>> = (0..shape.layers).map(|_| (0..shape.top_k).collect()).collect();
    let line = |picks: &Vec<Vec<u32>>| format!("{{\"picks\": {}}}\n", serde_json::to_string(picks).unwrap());
    let mut wrong_layers = good.clone();
    wrong_layers.pop();
    let mut out_of_range = good.clone();
    out_of_range[0][0] = shape.experts;
    for (bad, says) in [(line(&wrong_layers), "layers"), (line(&out_of_range), "expert")] {
        std::fs::write(&path, format!("{}{}{bad}", line(&good), line(&good))).unwrap();
        let mut e = open(&m, |o| o.routing = Routing::Trace(path.clone())).unwrap();
        let err = run(&mut e, false).unwrap_err();
        match &err {
            Error::Pool(diskformer_expert_stream::Error::Trace { line: 3, what, .. }) => {
                assert!(what.contains(says), "{err}")
            }
            other => panic!("expected a trace error on line 3, got {other}"),
        }
    }
    std::fs::write(&path, line(&good).repeat(3)).unwrap();
    let mut e = open(&m, |o| o.routing = Routing::Trace(path.clone())).unwrap();
    assert!(matches!(
        run(&mut e, false),
        Err(Error::Pool(diskformer_expert_stream::Error::TraceEnded { tokens: 3, .. }))
    ));
    let missing = m.dir.join("missing.jsonl");
    assert!(matches!(
        open(&m, |o| o.routing = Routing::Trace(missing.clone())),
        Err(Error::Pool(diskformer_expert_stream::Error::TraceIo { .. }))
    ));
}
