//! CPU expert kernel benches in GB/s of weight bytes read, at Qwen3-30B-A3B's expert shape (hidden 2,048,
//! ffn 768, top-8), beside the host's own read bandwidth on the same threads.
//!
//! Weights are one layer's 128 experts (641 MB in Q8_0, past any L3), each iteration the next 8, so they come
//! from memory as a decode step's would from the page cache. Groups:
//! - `read/floor`: every thread summing its share of the same experts' bytes (the bound the kernels chase);
//! - `moe/{q8_0,q4_0}/{f32,q8,q16}/{isa}/t{1,4}`: [`CpuExperts::moe`] for 1 token (8 experts) or 4 tokens (32
//!   assignments over their union), every available path;
//! - `moe-blocks/{q8_0,q4_0,q2_K,…,q6_K,iq4_xs}/{f32,q8,q16}/{avx2,avx512vnni}/t1`: experts as a GGUF's
//!   blocks (as qwen35moe's CPU tier reads them, and K-quants for every model), on each SIMD kernel the CPU
//!   runs;
//! - `moe-mapped/q8_0/{f32,q8}/{isa}/t1`: the same experts written to a file in the temporary directory and
//!   mapped from the page cache (4 KiB pages, where the heap's may be huge), as the engine's CPU tier reads
//!   a store, on the fastest path.
//!
//! `DISKFORMER_CPU_THREADS` sets the thread count (default: every core); `cargo bench -p
//! diskformer-cpu-kernels -- moe/q8_0/q8` runs a subset.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use diskformer_cpu_kernels::{
    Assignment, CpuExperts, ExpertWeights, Isa, Math, QuantMatrix, WorkerPool, takes_quantised_input,
};
use diskformer_gguf::TensorType;
use diskformer_testkit::Rng;

const HIDDEN: usize = 2048;
const FFN: usize = 768;
const EXPERTS: usize = 128;
const TOP_K: usize = 8;

/// One layer's experts in planes: per expert gate, up, down quants then scales.
struct Layer {
    ty: TensorType,
    quants: Vec<Vec<u8>>,
    scales: Vec<Vec<u8>>,
}

impl Layer {
    fn new(ty: TensorType, rng: &mut Rng) -> Self {
        let qb = if ty == TensorType::Q8_0 { 32 } else { 16 };
        let blocks = 3 * FFN * HIDDEN / 32;
        let quants = (0..EXPERTS).map(|_| (0..blocks * qb).map(|_| rng.next_u64() as u8).collect()).collect();
        // Scales 2^-8 .. 2^-6 (f16 exponent 7..9): finite, nothing overflows.
        let scales = (0..EXPERTS)
            .map(|_| {
                (0..blocks)
                    .flat_map(|_| {
                        (((7 + rng.next_u64() % 3) << 10) | (rng.next_u64() % 1024)).to_le_bytes()[..2]
                            .to_vec()
                    })
                    .collect()
            })
            .collect();
        Self { ty, quants, scales }
    }

    fn expert(&self, e: usize) -> ExpertWeights<'_> {
        let qb = if self.ty == TensorType::Q8_0 { 32 } else { 16 };
        let n = FFN * HIDDEN / 32;
        let (q, s) = (&self.quants[e], &self.scales[e]);
        let m = |i: usize, shape| {
            QuantMatrix::planes("w", self.ty, shape, &q[i * n * qb..][..n * qb], &s[i * n * 2..][..n * 2])
                .unwrap()
        };
        ExpertWeights::new(m(0, (FFN, HIDDEN)), m(1, (FFN, HIDDEN)), m(2, (HIDDEN, FFN))).unwrap()
    }
}

fn threads() -> usize {
    std::env::var("DISKFORMER_CPU_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn benches(c: &mut Criterion) {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15); // seeded: every run reads the same bytes
    let threads = threads();
    let mut group = c.benchmark_group("cpu");
    group.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for ty in [TensorType::Q8_0, TensorType::Q4_0] {
        let layer = Layer::new(ty, &mut rng);
        let experts: Vec<ExpertWeights<'_>> = (0..EXPERTS).map(|e| layer.expert(e)).collect();
        let bytes_per_expert = experts[0].weight_bytes();
        let tname = if ty == TensorType::Q8_0 { "q8_0" } else { "q4_0" };

        // The floor: the same 8 experts' bytes summed as u64 words on as many threads.
        let pool = WorkerPool::new(threads);
        group.throughput(Throughput::Bytes((TOP_K * bytes_per_expert) as u64));
        let mut next = 0;
        group.bench_function(format!("read/floor/{tname}"), |b| {
            b.iter(|| {
                let picks: Vec<usize> = (0..TOP_K).map(|i| (next + i) % EXPERTS).collect();
                next = (next + TOP_K) % EXPERTS;
                let parts = 4 * threads;
                let sums: Vec<std::sync::atomic::AtomicU64> =
                    (0..parts).map(|_| Default::default()).collect();
                pool.run(parts, &|task| {
                    let mut s = 0u64;
                    for &e in &picks {
                        for plane in [&layer.quants[e], &layer.scales[e]] {
                            let chunk = plane.len().div_ceil(parts);
                            let part = plane.chunks(chunk).nth(task).unwrap_or(&[]);
                            s = part
                                .chunks_exact(8)
                                .fold(s, |s, w| s.wrapping_add(u64::from_le_bytes(w.try_into().unwrap())));
                        }
                    }
                    sums[task].store(s, std::sync::atomic::Ordering::Relaxed);
                });
                black_box(&sums);
            })
        });
        drop(pool);

        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            let cpu = CpuExperts::new(threads, isa).unwrap();
            for math in [Math::F32, Math::Q8, Math::Q16] {
                let mname = math.name();
                for tokens in [1usize, 4] {
                    let x: Vec<f32> =
                        (0..tokens * HIDDEN).map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0).collect();
                    let mut out = vec![0f32; tokens * HIDDEN];
                    // Token t picks 8 consecutive experts from a base 4·t past the step's: overlapping unions.
                    let union = TOP_K + 4 * (tokens - 1);
                    group.throughput(Throughput::Bytes((union * bytes_per_expert) as u64));
                    let mut base = 0;
                    group.bench_function(format!("moe/{tname}/{mname}/{isa}/t{tokens}"), |b| {
                        b.iter(|| {
                            let assignments: Vec<Assignment> = (0..tokens)
                                .flat_map(|t| {
                                    (0..TOP_K).map(move |k| Assignment {
                                        token: t,
                                        expert: (base + 4 * t + k) % EXPERTS,
                                        weight: 1.0 / TOP_K as f32,
                                    })
                                })
                                .collect();
                            base = (base + union) % EXPERTS;
                            cpu.moe(math, &experts, &x, &assignments, &mut out).unwrap();
                            black_box(&out);
                        })
                    });
                }
            }
        }
        if ty == TensorType::Q8_0 {
            mapped(&mut group, &layer, threads, &mut rng);
        }
    }
    for ty in [
        TensorType::Q8_0,
        TensorType::Q4_0,
        TensorType::Q2K,
        TensorType::Q3K,
        TensorType::Q4K,
        TensorType::Q5K,
        TensorType::Q6K,
        TensorType::IQ4XS,
    ] {
        dequantised(&mut group, ty, threads, &mut rng);
    }
    group.finish();
}

/// `moe-blocks/{q8_0,q4_0,q2_K,…,q6_K,iq4_xs}/{f32,q8,q16}/{avx2,avx512vnni}/t1`: one layer's experts as a
/// GGUF's blocks (random quants, finite scales), one token.
fn dequantised(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    ty: TensorType,
    threads: usize,
    rng: &mut Rng,
) {
    // Values a block, its bytes, and where its f16 scales lie in it.
    let (values, bytes, scales): (usize, usize, &[usize]) = match ty {
        TensorType::Q8_0 => (32, 34, &[0]),
        TensorType::Q4_0 => (32, 18, &[0]),
        TensorType::Q2K => (256, 84, &[80, 82]),
        TensorType::Q3K => (256, 110, &[108]),
        TensorType::Q4K => (256, 144, &[0, 2]),
        TensorType::Q5K => (256, 176, &[0, 2]),
        TensorType::IQ4XS => (256, 136, &[0]),
        _ => (256, 210, &[208]),
    };
    let blocks = 3 * FFN * HIDDEN / values;
    let data: Vec<Vec<u8>> = (0..EXPERTS)
        .map(|_| {
            let mut d: Vec<u8> = (0..blocks * bytes).map(|_| rng.next_u64() as u8).collect();
            for block in d.chunks_exact_mut(bytes) {
                for &at in scales {
                    // 2^-8 .. 2^-6, as the planes' scales above.
                    let s = ((7 + rng.next_u64() % 3) << 10) | (rng.next_u64() % 1024);
                    block[at..at + 2].copy_from_slice(&(s as u16).to_le_bytes());
                }
            }
            d
        })
        .collect();
    let n = FFN * HIDDEN / values * bytes;
    let experts: Vec<ExpertWeights<'_>> = data
        .iter()
        .map(|d| {
            let m = |i: usize, shape| QuantMatrix::blocks("w", ty, shape, &d[i * n..][..n]).unwrap();
            ExpertWeights::new(m(0, (FFN, HIDDEN)), m(1, (FFN, HIDDEN)), m(2, (HIDDEN, FFN))).unwrap()
        })
        .collect();
    let x: Vec<f32> = (0..HIDDEN).map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0).collect();
    let mut out = vec![0f32; HIDDEN];
    let mut base = 0;
    // Q4_K also with 4 picks a job: what the CPU tier computes a layer under a calibrated trace at 4 GB.
    let counts: &[usize] = if ty == TensorType::Q4K { &[TOP_K, 4] } else { &[TOP_K] };
    for isa in [Isa::Avx2, Isa::Avx512Vnni].into_iter().filter(|i| i.available()) {
        let cpu = CpuExperts::new(threads, isa).unwrap();
        // Quantised inputs only where the type takes them (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K).
        let maths: &[(Math, &str)] = if takes_quantised_input(ty) {
            &[(Math::F32, "f32"), (Math::Q8, "q8"), (Math::Q16, "q16")]
        } else {
            &[(Math::F32, "f32")]
        };
        for &(math, mname) in maths {
            for &count in counts {
                group.throughput(Throughput::Bytes((count * experts[0].weight_bytes()) as u64));
                let k = if count == TOP_K { String::new() } else { format!("k{count}") };
                group.bench_function(format!("moe-blocks/{}/{mname}/{}/t1{k}", ty.name(), isa.name()), |b| {
                    b.iter(|| {
                        let assignments = next_picks(&mut base, count);
                        cpu.moe(math, &experts, &x, &assignments, &mut out).unwrap();
                        black_box(&out);
                    })
                });
            }
        }
    }
}

/// `moe-mapped/…`: `layer` written to a temporary file, mapped and read once into the page cache.
fn mapped(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    layer: &Layer,
    threads: usize,
    rng: &mut Rng,
) {
    use std::io::Write;
    let path = std::env::temp_dir().join(format!("diskformer-cpu-bench-{}.bin", std::process::id()));
    let mut file = std::fs::File::create(&path).unwrap();
    for e in 0..EXPERTS {
        file.write_all(&layer.quants[e]).unwrap();
        file.write_all(&layer.scales[e]).unwrap();
    }
    drop(file);
    let file = std::fs::File::open(&path).unwrap();
    // Safety: the file is this process's own, unlinked below and written by no one while mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    std::fs::remove_file(&path).unwrap();
    black_box(map.chunks(4096).map(|page| page[0]).fold(0u8, u8::wrapping_add));
    let (q, s) = (layer.quants[0].len(), layer.scales[0].len());
    let n = FFN * HIDDEN / 32;
    let experts: Vec<ExpertWeights<'_>> = (0..EXPERTS)
        .map(|e| {
            let record = &map[e * (q + s)..][..q + s];
            let (quants, scales) = record.split_at(q);
            let m = |i: usize, shape| {
                QuantMatrix::planes(
                    "w",
                    layer.ty,
                    shape,
                    &quants[i * n * 32..][..n * 32],
                    &scales[i * n * 2..][..n * 2],
                )
                .unwrap()
            };
            ExpertWeights::new(m(0, (FFN, HIDDEN)), m(1, (FFN, HIDDEN)), m(2, (HIDDEN, FFN))).unwrap()
        })
        .collect();
    let isa = Isa::detect();
    let cpu = CpuExperts::new(threads, isa).unwrap();
    group.throughput(Throughput::Bytes((TOP_K * experts[0].weight_bytes()) as u64));
    let x: Vec<f32> = (0..HIDDEN).map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0).collect();
    let mut out = vec![0f32; HIDDEN];
    for math in [Math::F32, Math::Q8] {
        let mname = if math == Math::F32 { "f32" } else { "q8" };
        let mut base = 0;
        group.bench_function(format!("moe-mapped/q8_0/{mname}/{isa}/t1"), |b| {
            b.iter(|| {
                let assignments = next_picks(&mut base, TOP_K);
                cpu.moe(math, &experts, &x, &assignments, &mut out).unwrap();
                black_box(&out);
            })
        });
    }
}

/// One token's TOP_K consecutive experts from `base`, which moves past them: each pass reads other experts.
fn next_picks(base: &mut usize, count: usize) -> Vec<Assignment> {
    let picks = (0..count)
        .map(|k| Assignment { token: 0, expert: (*base + k) % EXPERTS, weight: 1.0 / count as f32 })
        .collect();
    *base = (*base + count) % EXPERTS;
    picks
}

criterion_group!(cpu, benches);
criterion_main!(cpu);
