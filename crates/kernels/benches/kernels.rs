//! Kernel throughput in GB/s of weight bytes read (int8 plane + scales; K and V for attention), next to
//! the device's buffer-to-buffer copy bandwidth measured in the same run (reported as bytes read +
//! written, so it compares with a kernel that only reads).
//!
//! Each sample records many dispatches in one pass, submits and waits (`iter_custom`). Consecutive
//! dispatches read different copies of the weights (at least 256 MiB in rotation), so the GPU's L2
//! (50 MB on an H200) cannot serve them.
//!
//! Barriers: wgpu puts one before a dispatch that writes a buffer an earlier dispatch of the same command
//! buffer wrote (a read-write storage use is never "ordered"), and on Vulkan that barrier waits for all
//! earlier compute work. The outputs rotate with the weight copies, fewer than a command buffer's
//! dispatches, so most entries time each dispatch after a barrier: the ramp and drain that decode's chain
//! of dependent dispatches pays. Entries named `independent` give each dispatch of a command buffer its
//! own output ([`OUTPUTS`]): no barrier, so the GPU may overlap one dispatch's tail with the next one's
//! start, and the figure is the kernel's streaming bandwidth.
//!
//! Run: `cargo bench -p diskformer-kernels --bench kernels` (filter by name after `--`); on lavapipe add
//! `-- --warm-up-time 1 --measurement-time 3 --sample-size 10` to keep it short.

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use diskformer_kernels::{
    AttentionShape, BlockMatrix, BlockQuant, Context, Dispatch, EXPERT_BLOCK_GEMM_GROUP,
    EXPERT_GEMM_TILED_GROUP, ExpertBlocks, ExpertOut, ExpertPlanes, Kernels, Q8Matrix,
    expert_gemm_group_bound, expert_gemm_groups,
};

const ROTATION_BYTES: u64 = 256 << 20;

/// Dispatches a command buffer of [`time`], and so the outputs of an `independent` entry.
const OUTPUTS: usize = 512;

struct Gpu {
    ctx: Context,
    sg: Kernels,
    plain: Kernels,
}

/// A storage buffer of `bytes` (rounded up to 4) holding a cheap pseudo-random pattern.
fn buffer(g: &Gpu, bytes: u64, seed: u64) -> wgpu::Buffer {
    let bytes = bytes.next_multiple_of(4);
    let buf = g.ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: bytes,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    // Small positive f16 / f32-friendly pattern: bytes in 0x00..0x3f never form NaN or inf.
    let chunk = 16 << 20;
    let mut rng = diskformer_testkit::Rng::new(seed);
    let mut data = vec![0u8; chunk.min(bytes as usize)];
    let mut at = 0u64;
    while at < bytes {
        let n = (bytes - at).min(chunk as u64) as usize;
        for b in &mut data[..n] {
            *b = (rng.next_u64() as u8) & 0x3f;
        }
        g.ctx.queue.write_buffer(&buf, at, &data[..n]);
        at += n as u64;
    }
    buf
}

fn wait(g: &Gpu) {
    g.ctx.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
}

/// Records `iters` dispatches, `per_buffer` to a command buffer, the `i`th by `record(pass, i)`. With
/// `submit`, submits each buffer and returns the wall time until the GPU is done; else only finishes them
/// (the CPU's cost).
fn run_recorded(
    g: &Gpu,
    iters: u64,
    per_buffer: u64,
    submit: bool,
    mut record: impl FnMut(&mut wgpu::ComputePass<'_>, usize),
) -> Duration {
    if submit {
        wait(g);
    }
    let start = Instant::now();
    let mut left = iters;
    let mut i = 0;
    while left > 0 {
        let n = left.min(per_buffer);
        let mut enc = g.ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for _ in 0..n {
                record(&mut pass, i);
                i += 1;
            }
        }
        let commands = enc.finish();
        if submit {
            g.ctx.queue.submit([commands]);
        } else {
            std::hint::black_box(commands);
        }
        left -= n;
    }
    if submit {
        wait(g);
    }
    start.elapsed()
}

/// Records `iters` dispatches cycling through `ds` ([`OUTPUTS`] per submit), waits, returns the wall time.
fn time(g: &Gpu, ds: &[Dispatch], iters: u64) -> Duration {
    run_recorded(g, iters, OUTPUTS as u64, true, |pass, i| ds[i % ds.len()].record(pass))
}

/// Like [`time`] but only records and finishes the command buffers, never submits: the CPU's cost per
/// dispatch, the floor under any time [`time`] reports.
fn encode_only(g: &Gpu, ds: &[Dispatch], iters: u64) -> Duration {
    run_recorded(g, iters, OUTPUTS as u64, false, |pass, i| ds[i % ds.len()].record(pass))
}

/// The `rows × cols` matrix at the start of each of `slots` slots of `slot_bytes` in `pool`, GGUF blocks of
/// `quant` in device memory, as the expert block kernels bind it.
fn device_blocks(
    pool: &wgpu::Buffer,
    quant: BlockQuant,
    (slot_bytes, slots): (u64, u32),
    (rows, cols): (u32, u32),
) -> ExpertBlocks<'_> {
    ExpertBlocks {
        data: pool.into(),
        quant,
        slot_bytes,
        offset: 0,
        slots,
        first_slot: 0,
        rows,
        cols,
        host: false,
    }
}

/// Each of `sets` sets of `k` picks' slot indices: set s's picks in slots k s .. k s + k - 1, so that
/// consecutive dispatches read different records.
fn slot_sets(g: &Gpu, sets: u32, k: u32) -> Vec<wgpu::Buffer> {
    (0..sets)
        .map(|set| {
            let b = buffer(g, 4 * u64::from(k), 5);
            let ids: Vec<u32> = (0..k).map(|j| set * k + j).collect();
            g.ctx.queue.write_buffer(&b, 0, bytemuck::cast_slice(&ids));
            b
        })
        .collect()
}

fn copies(bytes: u64) -> usize {
    ROTATION_BYTES.div_ceil(bytes).clamp(1, 64) as usize
}

fn bench_q8_gemv(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("q8_gemv");
    for (name, rows, cols) in [
        ("lm_head_151936x2048", 151_936u32, 2048u32),
        ("attn_q_4096x2048", 4096, 2048),
        ("attn_o_2048x4096", 2048, 4096),
    ] {
        let qbytes = u64::from(rows) * u64::from(cols);
        let sbytes = qbytes / 16;
        let n = copies(qbytes + sbytes);
        let planes: Vec<(wgpu::Buffer, wgpu::Buffer)> =
            (0..n).map(|i| (buffer(g, qbytes, i as u64), buffer(g, sbytes, 99 + i as u64))).collect();
        let x = buffer(g, 4 * u64::from(cols), 7);
        // One output per copy: consecutive dispatches share no written buffer, but a dispatch reuses the
        // output of the one `n` before it, which puts a barrier before it (the module's docs).
        let ys: Vec<wgpu::Buffer> = (0..n).map(|i| buffer(g, 4 * u64::from(rows), 8 + i as u64)).collect();
        group.throughput(Throughput::Bytes(qbytes + sbytes));
        // `_rows2` / `_rows4`: q8_gemv_rows2 / q8_gemv_rows4, two / four rows a lane group, beside the
        // one-row kernel for comparison; `_i8`: q8_gemv_i8, four rows, the input quantised as it is read.
        for (variant, k) in [
            ("subgroup", &g.sg),
            ("plain", &g.plain),
            ("subgroup_rows2", &g.sg),
            ("plain_rows2", &g.plain),
            ("subgroup_rows4", &g.sg),
            ("plain_rows4", &g.plain),
            ("subgroup_i8", &g.sg),
            ("plain_i8", &g.plain),
        ] {
            if variant.starts_with("subgroup") && !k.subgroups() {
                continue;
            }
            let ds: Vec<Dispatch> = planes
                .iter()
                .zip(&ys)
                .map(|((q, s), y)| {
                    let w = Q8Matrix { q: q.into(), scales: s.into(), rows, cols };
                    let d = if variant.ends_with("rows2") {
                        k.q8_gemv_rows2(w, (&x).into(), y.into(), 1)
                    } else if variant.ends_with("rows4") {
                        k.q8_gemv_rows4(w, (&x).into(), y.into(), 1)
                    } else if variant.ends_with("i8") {
                        k.q8_gemv_i8(w, (&x).into(), y.into(), 1)
                    } else {
                        k.q8_gemv(w, (&x).into(), y.into(), 1)
                    };
                    d.expect("bind")
                })
                .collect();
            group.bench_function(format!("{name}/{variant}"), |b| b.iter_custom(|iters| time(g, &ds, iters)));
        }
    }
    group.finish();
}

/// The K-quant GEMVs on GGUF blocks (Q4_K, Q6_K; Q5_K shares the Q4_K walk) at Qwen3-30B-A3B's shapes: an expert's gate‖up and down as
/// one dense matrix each (what issue 33's goal compares with the copy bandwidth), the attention's Q and
/// the lm head (Q6_K in llama.cpp's Q4_K_M files); and Q8_0 blocks, which qwen35moe's dense matrices are,
/// beside `q8_gemv`'s planes of the same shapes. Throughput counts the blocks' bytes.
fn bench_kquant_gemv(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("kquant_gemv");
    for quant in [BlockQuant::Q4K, BlockQuant::Q6K, BlockQuant::Q8_0] {
        for (name, rows, cols) in [
            ("expert_gate_up_1536x2048", 1536u32, 2048u32),
            ("expert_down_2048x768", 2048, 768),
            ("attn_q_4096x2048", 4096, 2048),
            ("lm_head_151936x2048", 151_936, 2048),
        ] {
            let bytes = u64::from(rows) * u64::from(cols) / 256 * quant.block_bytes();
            let n = copies(bytes);
            let blocks: Vec<wgpu::Buffer> =
                (0..n).map(|i| buffer(g, bytes.next_multiple_of(4), 31 + i as u64)).collect();
            let x = buffer(g, 4 * u64::from(cols), 7);
            let ys: Vec<wgpu::Buffer> =
                (0..n).map(|i| buffer(g, 4 * u64::from(rows), 8 + i as u64)).collect();
            group.throughput(Throughput::Bytes(bytes));
            // `_rows4`: kquant_gemv_rows4, four rows a lane group.
            for (variant, k) in [
                ("subgroup", &g.sg),
                ("plain", &g.plain),
                ("subgroup_rows4", &g.sg),
                ("plain_rows4", &g.plain),
            ] {
                if variant.starts_with("subgroup") && !k.subgroups() {
                    continue;
                }
                let ds: Vec<Dispatch> = blocks
                    .iter()
                    .zip(&ys)
                    .map(|(w, y)| {
                        let w = BlockMatrix { data: w.into(), quant, rows, cols };
                        let d = if variant.ends_with("rows4") {
                            k.kquant_gemv_rows4(w, (&x).into(), y.into(), 1)
                        } else {
                            k.kquant_gemv(w, (&x).into(), y.into(), 1)
                        };
                        d.expect("bind")
                    })
                    .collect();
                let id = format!("{}/{name}/{variant}", quant.name());
                group.bench_function(id, |b| b.iter_custom(|iters| time(g, &ds, iters)));
            }
        }
    }
    group.finish();
}

/// The expert K-quant GEMV (records of blocks) at Qwen3-30B-A3B's shapes (Q4_K, Q6_K) and Qwen3.6-35B-A3B's
/// (Q8_0, as qwen35moe's resident experts lie): 8 picks' gate‖up and down, each set of 8 slots its own
/// (rotating through more than the L2), as decode runs them. Throughput counts the picks' block bytes.
fn bench_expert_kquant(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("expert_kquant_gemv");
    let k_picks = 8u32;
    let qwen3 = [("gate_up_8x1536x2048", 1536u32, 2048u32, 8u32), ("down_8x2048x768", 2048, 768, 1)];
    let qwen36 = [("gate_up_8x1024x2048", 1024u32, 2048u32, 8u32), ("down_8x2048x512", 2048, 512, 1)];
    for (quant, shapes) in [(BlockQuant::Q4K, qwen3), (BlockQuant::Q6K, qwen3), (BlockQuant::Q8_0, qwen36)] {
        for (name, rows, cols, x_div) in shapes {
            let matrix = u64::from(rows) * u64::from(cols) / 256 * quant.block_bytes();
            let slot_bytes = matrix.next_multiple_of(256);
            let sets = copies(u64::from(k_picks) * matrix) as u32;
            let slots = sets * k_picks;
            let pool = buffer(g, u64::from(slots) * slot_bytes, 1);
            let x = buffer(g, 4 * u64::from(k_picks / x_div * cols), 3);
            let ys: Vec<wgpu::Buffer> =
                (0..sets).map(|i| buffer(g, 4 * u64::from(k_picks * rows), 4 + u64::from(i))).collect();
            let idx = slot_sets(g, sets, k_picks);
            group.throughput(Throughput::Bytes(u64::from(k_picks) * matrix));
            for (variant, k) in [("subgroup", &g.sg), ("plain", &g.plain)] {
                if variant == "subgroup" && !k.subgroups() {
                    continue;
                }
                let ds: Vec<Dispatch> = idx
                    .iter()
                    .zip(&ys)
                    .map(|(idx, y)| {
                        let w = device_blocks(&pool, quant, (slot_bytes, slots), (rows, cols));
                        let out = ExpertOut { y: y.into(), stride: rows, offset: 0 };
                        k.expert_kquant_gemv(w, (&x).into(), idx.into(), out, k_picks, x_div).expect("bind")
                    })
                    .collect();
                let id = format!("{}/{name}/{variant}", quant.name());
                group.bench_function(id, |b| b.iter_custom(|iters| time(g, &ds, iters)));
            }
        }
    }
    group.finish();
}

/// Decode's gate‖up on Q8_0 blocks at Qwen3.6-35B-A3B's shape (8 picks, F = 512 gate and 512 up rows of a
/// slot, 2,048 columns), with SwiGLU on its output: slot-indexed (`swiglu`, the picks' slots given) and
/// routing itself (`routed`: each workgroup ranks the token's 256 router logits and looks its pick's slot
/// up, what qwen35moe's resident step runs). Each set of 8 slots its own, rotating; throughput counts the
/// picks' block bytes, as `expert_kquant_gemv`'s entries.
fn bench_expert_kquant_swiglu(c: &mut Criterion, g: &Gpu) {
    use diskformer_kernels::Route;
    let mut group = c.benchmark_group("expert_kquant_swiglu");
    let (k_picks, experts, f, cols, quant) = (8u32, 256u32, 512u32, 2048u32, BlockQuant::Q8_0);
    let half = u64::from(f) * u64::from(cols) / 256 * quant.block_bytes();
    let slot_bytes = (2 * half).next_multiple_of(256);
    let sets = copies(u64::from(k_picks) * 2 * half) as u32;
    let slots = sets * k_picks;
    let pool = buffer(g, u64::from(slots) * slot_bytes, 1);
    let x = buffer(g, 4 * u64::from(cols), 3);
    let logits = buffer(g, 4 * u64::from(experts), 4);
    // Set s's table maps expert e to slot 8 s + e % 8.
    let table = buffer(g, 4 * u64::from(sets * experts), 5);
    let entries: Vec<u32> = (0..sets * experts).map(|i| (i / experts) * k_picks + i % k_picks).collect();
    g.ctx.queue.write_buffer(&table, 0, bytemuck::cast_slice(&entries));
    let ys: Vec<wgpu::Buffer> =
        (0..sets).map(|i| buffer(g, 4 * u64::from(k_picks * f), 6 + u64::from(i))).collect();
    let (ids, weights, picked) = (
        buffer(g, 4 * u64::from(k_picks), 7),
        buffer(g, 4 * u64::from(k_picks), 8),
        buffer(g, 4 * u64::from(k_picks), 9),
    );
    let idx = slot_sets(g, sets, k_picks);
    group.throughput(Throughput::Bytes(u64::from(k_picks) * 2 * half));
    let gate = device_blocks(&pool, quant, (slot_bytes, slots), (f, cols));
    for routed in [false, true] {
        let ds: Vec<Dispatch> = (0..sets as usize)
            .map(|set| {
                let act = ExpertOut { y: (&ys[set]).into(), stride: f, offset: 0 };
                if routed {
                    let route = Route {
                        logits: (&logits).into(),
                        table: (&table).into(),
                        table_range: (set as u32 * experts, sets * experts),
                        experts,
                        ids: (&ids).into(),
                        weights: (&weights).into(),
                        slots: (&picked).into(),
                    };
                    g.sg.expert_kquant_gemv_swiglu_routed(gate, half, (&x).into(), route, act.y, (1, k_picks))
                } else {
                    g.sg.expert_kquant_gemv_swiglu(
                        gate,
                        half,
                        (&x).into(),
                        (&idx[set]).into(),
                        act,
                        (k_picks, k_picks),
                    )
                }
                .expect("bind")
            })
            .collect();
        let id = format!("q8_0/gate_up_8x{f}x{cols}/{}", if routed { "routed" } else { "swiglu" });
        group.bench_function(id, |b| b.iter_custom(|iters| time(g, &ds, iters)));
    }
    group.finish();
}

/// How a bench entry of [`bench_expert`] runs its GEMV.
#[derive(Clone, Copy, PartialEq)]
enum ExpertOp {
    /// `x[pair / x_div]` in, rows out.
    Plain,
    /// SwiGLU of gate‖up as the input.
    SwigluIn,
    /// gate‖up with SwiGLU on its output (what decode runs first).
    SwigluOut,
    /// down with the MoE combine onto the residual and the next norm's inputs (what decode runs second).
    Combine,
}

/// The quant planes and input arithmetic of a [`bench_expert`] entry.
#[derive(Clone, Copy, PartialEq)]
enum Walk {
    /// Q8_0 planes, f32 input.
    Q8,
    /// Q4_0 planes, f32 input.
    Q4,
    /// Q8_0 planes, the input Q8_0-quantised as it is read (the `_i8` kernels).
    I8,
    /// Q8_0 planes, the input Q8_0-quantised before (`quantize_q8` rows; the `_xq` kernels).
    Xq,
}

/// The expert GEMVs at Qwen3-30B-A3B's shapes for one token's 8 picks: Q8_0 gate‖up (shared input), down
/// from a precomputed activation and down straight from gate‖up (SwiGLU on the input), the two that decode
/// runs (gate‖up with SwiGLU on its output, down with the combine), and the same over Q4_0 planes.
/// Throughput counts quant plane + scales.
fn bench_expert(c: &mut Criterion, g: &Gpu) {
    use ExpertOp::*;
    let mut group = c.benchmark_group("expert_q8_gemv");
    let k_picks = 8u32;
    use Walk::{I8, Q4, Q8, Xq};
    // (name, rows, cols, x_div, walk, op)
    let cases = [
        ("gate_up_8x1536x2048", 1536u32, 2048u32, 8u32, Q8, Plain),
        ("gate_up_swiglu_8x1536x2048", 1536, 2048, 8, Q8, SwigluOut),
        ("down_8x2048x768", 2048, 768, 1, Q8, Plain),
        ("down_swiglu_8x2048x768", 2048, 768, 1, Q8, SwigluIn),
        ("down_combine_8x2048x768", 2048, 768, 1, Q8, Combine),
        ("i8/gate_up_8x1536x2048", 1536, 2048, 8, I8, Plain),
        ("i8/gate_up_swiglu_8x1536x2048", 1536, 2048, 8, I8, SwigluOut),
        ("i8/down_8x2048x768", 2048, 768, 1, I8, Plain),
        ("i8/down_combine_8x2048x768", 2048, 768, 1, I8, Combine),
        ("xq/gate_up_8x1536x2048", 1536, 2048, 8, Xq, Plain),
        ("xq/gate_up_swiglu_8x1536x2048", 1536, 2048, 8, Xq, SwigluOut),
        ("xq/down_8x2048x768", 2048, 768, 1, Xq, Plain),
        ("q4/gate_up_8x1536x2048", 1536, 2048, 8, Q4, Plain),
        ("q4/gate_up_swiglu_8x1536x2048", 1536, 2048, 8, Q4, SwigluOut),
        ("q4/down_swiglu_8x2048x768", 2048, 768, 1, Q4, SwigluIn),
        ("q4/down_combine_8x2048x768", 2048, 768, 1, Q4, Combine),
    ];
    let h = 2048u32;
    let f32s = |n: u32, seed| buffer(g, 4 * u64::from(n), seed);
    let (weights, next_norm, scaled, squares) =
        (f32s(k_picks, 20), f32s(h, 21), f32s(h, 22), f32s(diskformer_kernels::combine_squares(h), 23));
    for (name, rows, cols, x_div, walk, op) in cases {
        let slot_s = u64::from(rows) * u64::from(cols) / 16;
        let slot_q = if walk == Q4 { slot_s * 8 } else { slot_s * 16 };
        let sets = copies(u64::from(k_picks) * (slot_q + slot_s)) as u32;
        let slots = sets * k_picks;
        let q = buffer(g, u64::from(slots) * slot_q, 1);
        let s = buffer(g, u64::from(slots) * slot_s, 2);
        let x_len = if op == SwigluIn { 2 * k_picks * cols } else { k_picks / x_div * cols };
        let x = buffer(g, 4 * u64::from(x_len), 3);
        let ys: Vec<wgpu::Buffer> =
            (0..sets).map(|i| buffer(g, 4 * u64::from(k_picks * rows), 4 + u64::from(i))).collect();
        let idx: Vec<wgpu::Buffer> = (0..sets)
            .map(|set| {
                let b = buffer(g, 4 * u64::from(k_picks), 5);
                let ids: Vec<u32> = (0..k_picks).map(|j| set * k_picks + j).collect();
                g.ctx.queue.write_buffer(&b, 0, bytemuck::cast_slice(&ids));
                b
            })
            .collect();
        // `independent`: the kernels that write only `y`, each dispatch of a command buffer into its own.
        let independent = op != Combine;
        let outs: Vec<wgpu::Buffer> = if independent && g.sg.subgroups() {
            (0..OUTPUTS).map(|i| buffer(g, 4 * u64::from(k_picks * rows), 400 + i as u64)).collect()
        } else {
            Vec::new()
        };
        group.throughput(Throughput::Bytes(u64::from(k_picks) * (slot_q + slot_s)));
        for (variant, k) in [("subgroup", &g.sg), ("plain", &g.plain), ("independent", &g.sg)] {
            if variant != "plain" && !k.subgroups() || variant == "independent" && !independent {
                continue;
            }
            let planes =
                ExpertPlanes { q: (&q).into(), scales: (&s).into(), slots, first_slot: 0, rows, cols };
            // (slot ids, output) of each dispatch: one output a weight copy, or one a dispatch.
            let targets: Vec<(&wgpu::Buffer, &wgpu::Buffer)> = if variant == "independent" {
                outs.iter().enumerate().map(|(j, y)| (&idx[j % idx.len()], y)).collect()
            } else {
                idx.iter().zip(&ys).collect()
            };
            let ds: Result<Vec<Dispatch>, _> = targets
                .into_iter()
                .map(|(i, y)| {
                    let (x, i, y) = ((&x).into(), i.into(), y.into());
                    // The combine adds onto `y` (one residual row a set).
                    let out = diskformer_kernels::CombineOut {
                        weights: (&weights).into(),
                        residual: y,
                        next_norm: (&next_norm).into(),
                        scaled: (&scaled).into(),
                        squares: (&squares).into(),
                        finish: true,
                    };
                    match (walk, op) {
                        (Q8, Plain) => k.expert_q8_gemv(planes, x, i, y, k_picks, x_div),
                        (Q8, SwigluIn) => k.expert_q8_gemv_swiglu(planes, x, i, y, k_picks),
                        (Q8, SwigluOut) => k.expert_q8_gemv_gate_up_swiglu(planes, x, i, y, k_picks, x_div),
                        (Q8, Combine) => k.expert_q8_gemv_combine(planes, x, i, out, (1, k_picks)),
                        (I8, Plain) => k.expert_q8_gemv_i8(planes, x, i, y, k_picks, x_div),
                        (I8, SwigluOut) => {
                            k.expert_q8_gemv_gate_up_swiglu_i8(planes, x, i, y, k_picks, x_div)
                        }
                        (I8, Combine) => k.expert_q8_gemv_combine_i8(planes, x, i, out, (1, k_picks)),
                        (Xq, Plain) => k.expert_q8_gemv_xq(planes, x, i, y, k_picks, x_div),
                        (Xq, SwigluOut) => {
                            k.expert_q8_gemv_gate_up_swiglu_xq(planes, x, i, y, k_picks, x_div)
                        }
                        (I8 | Xq, SwigluIn) | (Xq, Combine) => unreachable!("no such int8 entry"),
                        (Q4, Plain) => k.expert_q4_gemv(planes, x, i, y, k_picks, x_div),
                        (Q4, SwigluIn) => k.expert_q4_gemv_swiglu(planes, x, i, y, k_picks),
                        (Q4, SwigluOut) => k.expert_q4_gemv_gate_up_swiglu(planes, x, i, y, k_picks, x_div),
                        (Q4, Combine) => k.expert_q4_gemv_combine(planes, x, i, out, (1, k_picks)),
                    }
                })
                .collect();
            match ds {
                Ok(ds) => {
                    group.bench_function(format!("{name}/{variant}"), |b| {
                        b.iter_custom(|iters| time(g, &ds, iters))
                    });
                }
                Err(e) => eprintln!("skipping {name}/{variant}: {e}"),
            }
        }
    }
    group.finish();
}

fn bench_small(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("other");
    // Router: 128 x 2048 f32.
    let (rows, cols) = (128u32, 2048u32);
    let wbytes = 4 * u64::from(rows) * u64::from(cols);
    let ws: Vec<wgpu::Buffer> = (0..copies(wbytes)).map(|i| buffer(g, wbytes, i as u64)).collect();
    let x = buffer(g, 4 * u64::from(cols), 1);
    let ys: Vec<wgpu::Buffer> = (0..ws.len()).map(|i| buffer(g, 4 * u64::from(rows), 2 + i as u64)).collect();
    let ds: Vec<Dispatch> = ws
        .iter()
        .zip(&ys)
        .map(|(w, y)| g.sg.f32_gemv(w.into(), rows, cols, (&x).into(), y.into(), 1).expect("bind"))
        .collect();
    group.throughput(Throughput::Bytes(wbytes));
    group.bench_function("f32_gemv/router_128x2048", |b| b.iter_custom(|iters| time(g, &ds, iters)));

    // One token's residual add + FFN norm (hidden 2048): bytes read, latency-bound.
    let h = 2048u32;
    let (a, bb, w) =
        (buffer(g, 4 * u64::from(h), 3), buffer(g, 4 * u64::from(h), 4), buffer(g, 4 * u64::from(h), 5));
    let (hh, out) = (buffer(g, 4 * u64::from(h), 6), buffer(g, 4 * u64::from(h), 7));
    let d =
        g.sg.add_rms_norm((&a).into(), (&bb).into(), (&w).into(), (&hh).into(), (&out).into(), h, 1, 1e-6);
    group.throughput(Throughput::Bytes(3 * 4 * u64::from(h)));
    let ds = vec![d.expect("bind")];
    group.bench_function("add_rms_norm/1x2048", |b| b.iter_custom(|iters| time(g, &ds, iters)));

    // A token's 8 picks to slots through a 48 x 128 resident table.
    let (ids, table, slots) = (buffer(g, 32, 8), buffer(g, 4 * 48 * 128, 9), buffer(g, 32, 10));
    let p = diskformer_kernels::ExpertSlotsParams { n: 8, base: 0, entries: 48 * 128, _pad: 0 };
    let ds = vec![g.sg.expert_slots((&ids).into(), (&table).into(), (&slots).into(), p).expect("bind")];
    group.throughput(Throughput::Bytes(64));
    group.bench_function("expert_slots/8_picks", |b| b.iter_custom(|iters| time(g, &ds, iters)));

    // One token's hidden row Q8_0-quantised (what an `_xq` GEMV reads): bytes read, latency-bound.
    let xq = buffer(g, diskformer_kernels::q8_row_bytes(h), 11);
    let ds = vec![g.sg.quantize_q8((&a).into(), (&xq).into(), 1, h).expect("bind")];
    group.throughput(Throughput::Bytes(4 * u64::from(h)));
    group.bench_function("quantize_q8/1x2048", |b| b.iter_custom(|iters| time(g, &ds, iters)));

    group.finish();
    bench_attention(c, g);
}

/// Decode attention at position 4095 of Qwen3-30B-A3B's head shapes (32 query heads, 4 kv heads, d = 128,
/// f16 cache `[ctx, 4, 128]`): reads K and V up to there, 8 MiB, counted once per attention. Two cache
/// sizes: exactly 4,096 positions, and the model's full 40,960 (what a decode engine allocates, so the
/// split kernel's grid covers 10× the blocks and most of them exit at once).
fn bench_attention(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("attention");
    for ctx in [4096u32, 40_960] {
        let s = AttentionShape { heads: 32, kv_heads: 4, head_dim: 128, tokens: 1, ctx };
        let cache_bytes = u64::from(s.ctx * s.kv_heads * s.head_dim) * 2;
        let read_bytes = 2 * u64::from(4096 * s.kv_heads * s.head_dim) * 2;
        let caches: Vec<(wgpu::Buffer, wgpu::Buffer)> = (0..copies(2 * cache_bytes))
            .map(|i| (buffer(g, cache_bytes, i as u64), buffer(g, cache_bytes, 50 + i as u64)))
            .collect();
        let q = buffer(g, 4 * 32 * 128, 3);
        let pos = buffer(g, 4, 4);
        g.ctx.queue.write_buffer(&pos, 0, bytemuck::bytes_of(&4095u32));
        let outs: Vec<wgpu::Buffer> =
            (0..caches.len()).map(|i| buffer(g, 4 * 32 * 128, 5 + i as u64)).collect();
        group.throughput(Throughput::Bytes(read_bytes));
        if ctx == 4096 {
            let ds: Vec<Dispatch> = caches
                .iter()
                .zip(&outs)
                .map(|((k, v), out)| {
                    g.sg.attention((&q).into(), k.into(), v.into(), (&pos).into(), out.into(), s)
                        .expect("bind")
                })
                .collect();
            group.bench_function("full/decode_pos4095_ctx4096", |b| {
                b.iter_custom(|iters| time(g, &ds, iters))
            });
        }

        // The split-K pair on the same caches: two dispatches per step, counted as one attention.
        let partials: Vec<wgpu::Buffer> =
            (0..caches.len()).map(|i| buffer(g, 4 * s.partial_len(), 70 + i as u64)).collect();
        let ds: Vec<Dispatch> = caches
            .iter()
            .zip(&partials)
            .zip(&outs)
            .flat_map(|(((k, v), part), out)| {
                [
                    g.sg.attention_split((&q).into(), k.into(), v.into(), (&pos).into(), part.into(), s)
                        .expect("bind"),
                    g.sg.attention_combine(part.into(), (&pos).into(), out.into(), s).expect("bind"),
                ]
            })
            .collect();
        // Each half alone, to see where the pair's time goes (the combine still reads its partial).
        let mut firsts = Vec::with_capacity(ds.len() / 2);
        let mut seconds = Vec::with_capacity(ds.len() / 2);
        for (i, d) in ds.into_iter().enumerate() {
            if i % 2 == 0 { firsts.push(d) } else { seconds.push(d) }
        }
        group.bench_function(format!("split_part1/decode_pos4095_ctx{ctx}"), |b| {
            b.iter_custom(|iters| time(g, &firsts, iters))
        });
        group.bench_function(format!("split_part2/decode_pos4095_ctx{ctx}"), |b| {
            b.iter_custom(|iters| time(g, &seconds, iters))
        });
        group.bench_function(format!("split_part1_encode_only/decode_pos4095_ctx{ctx}"), |b| {
            b.iter_custom(|iters| encode_only(g, &firsts, iters))
        });
        let ds: Vec<Dispatch> = firsts.into_iter().zip(seconds).flat_map(|(a, b)| [a, b]).collect();
        let name = format!("split/decode_pos4095_ctx{ctx}");
        group.bench_function(name, |b| b.iter_custom(|iters| time(g, &ds, 2 * iters)));
    }
    group.finish();
}

/// The bench's compute-shader copy: `vec4<u32>` loads then stores, 4 per lane at a stride of 256 lanes
/// (each load instruction of a 32-lane subgroup reads 512 contiguous bytes), 16 KiB per workgroup.
const COPY_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(256)
fn copy_vec4(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = (wg.y * 65535u + wg.x) * 1024u + li;
    let a = src[base];
    let b = src[base + 256u];
    let c = src[base + 512u];
    let d = src[base + 768u];
    dst[base] = a;
    dst[base + 256u] = b;
    dst[base + 512u] = c;
    dst[base + 768u] = d;
}
"#;

/// A read-only pass over the same kind of window: 4 `vec4<u32>` loads per lane as in `COPY_WGSL`, xor-ed
/// together so the loads stay, one word written per workgroup. The floor of a one-dispatch kernel that
/// reads that many bytes (no decoding, no input vector, no row structure).
const READ_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

var<workgroup> part: array<vec4<u32>, 256>;

@compute @workgroup_size(256)
fn read_vec4(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = (wg.y * 65535u + wg.x) * 1024u + li;
    part[li] = src[base] ^ src[base + 256u] ^ src[base + 512u] ^ src[base + 768u];
    workgroupBarrier();
    if (li == 0u) {
        var v = vec4<u32>(0u);
        for (var i = 0u; i < 256u; i += 64u) {
            v ^= part[i];
        }
        dst[wg.y * 65535u + wg.x] = v.x ^ v.y ^ v.z ^ v.w;
    }
}
"#;

/// A pipeline of the bench's own WGSL `source` (entry point and label `entry`, layout from the shader).
fn wgsl_pipeline(g: &Gpu, source: &str, entry: &str) -> wgpu::ComputePipeline {
    let device = &g.ctx.device;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(entry),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// Records `iters` dispatches of `pipeline` over `dims` workgroups, cycling through `groups` (`per_buffer`
/// per submit), waits, returns the wall time.
fn time_rotating(
    g: &Gpu,
    pipeline: &wgpu::ComputePipeline,
    groups: &[wgpu::BindGroup],
    dims: [u32; 2],
    iters: u64,
    per_buffer: u64,
) -> Duration {
    run_recorded(g, iters, per_buffer, true, |pass, i| {
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &groups[i % groups.len()], &[]);
        pass.dispatch_workgroups(dims[0], dims[1], 1);
    })
}

fn bench_copy(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("copy");
    let bytes = 256u64 << 20;
    let src = buffer(g, bytes, 1);
    let dst = buffer(g, bytes, 2);
    // Read + written bytes, comparable with the kernels' read-only byte counts.
    group.throughput(Throughput::Bytes(2 * bytes));
    group.bench_function("buffer_to_buffer_256MiB", |b| {
        b.iter_custom(|iters| {
            wait(g);
            let start = Instant::now();
            let mut left = iters;
            while left > 0 {
                let n = left.min(64);
                let mut enc = g.ctx.device.create_command_encoder(&Default::default());
                for _ in 0..n {
                    enc.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
                }
                g.ctx.queue.submit([enc.finish()]);
                left -= n;
            }
            wait(g);
            start.elapsed()
        })
    });

    // The same copy as a compute shader, the SMs' own HBM bandwidth (the reference the kernels should be
    // held to): 256 MiB, or the largest multiple of 16 KiB one binding allows (lavapipe: 128 MiB).
    let cbytes = bytes.min(g.ctx.max_binding() / (16 << 10) * (16 << 10));
    let device = &g.ctx.device;
    let pipeline = wgsl_pipeline(g, COPY_WGSL, "copy_vec4");
    fn binding(buffer: &wgpu::Buffer, offset: u64, bytes: u64) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset,
            size: std::num::NonZeroU64::new(bytes),
        })
    }
    // The whole buffer, and 8 MiB (the K + V that decode attention reads at 4,096 positions) from 32
    // different places into 32 different outputs, so that L2 never holds the source and consecutive
    // dispatches share no written buffer (but each writes the one the dispatch 32 earlier wrote, a
    // barrier): the HBM reference at attention's size.
    let small_dsts: Vec<wgpu::Buffer> =
        (0..cbytes / (8 << 20)).map(|i| buffer(g, 8 << 20, 200 + i)).collect();
    for size in [cbytes, 8 << 20] {
        let groups: Vec<wgpu::BindGroup> = (0..cbytes / size)
            .map(|i| {
                let (dst, at) = if size == cbytes { (&dst, 0) } else { (&small_dsts[i as usize], 0) };
                device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("copy_vec4"),
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: binding(&src, i * size, size) },
                        wgpu::BindGroupEntry { binding: 1, resource: binding(dst, at, size) },
                    ],
                })
            })
            .collect();
        let wgs = u32::try_from(size / (16 << 10)).expect("workgroups");
        let (gx, gy) = if wgs <= 65_535 { (wgs, 1) } else { (65_535, wgs / 65_535) };
        assert_eq!(gx * gy, wgs, "copy size must tile the grid");
        group.throughput(Throughput::Bytes(2 * size));
        group.bench_function(format!("compute_vec4_{}MiB", size >> 20), |b| {
            b.iter_custom(|iters| time_rotating(g, &pipeline, &groups, [gx, gy], iters, 64))
        });
    }
    bench_read_only(&mut group, g, &src, cbytes);
    group.finish();
}

/// `READ_WGSL` over windows of the expert GEMVs' byte counts (8 picks' planes and scales), each dispatch from
/// another place of `src` and into another output, as `bench_expert` runs: one output a window (so each
/// writes the one a dispatch `windows` earlier wrote: a barrier), or one a dispatch (`_independent`: none).
fn bench_read_only(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    g: &Gpu,
    src: &wgpu::Buffer,
    src_bytes: u64,
) {
    let device = &g.ctx.device;
    let pipeline = wgsl_pipeline(g, READ_WGSL, "read_vec4");
    let plane = |rows: u64, cols: u64| 8 * (rows * cols + rows * cols / 16);
    for (name, size) in [("gate_up_8x1536x2048", plane(1536, 2048)), ("down_8x2048x768", plane(2048, 768))] {
        let wgs = size / (16 << 10);
        assert_eq!(wgs * (16 << 10), size, "the window must tile workgroups of 16 KiB");
        let windows = src_bytes / size;
        // One output a window, or (`_independent`) one a dispatch of a command buffer: no barrier.
        for (suffix, outputs) in [("", windows), ("_independent", OUTPUTS as u64)] {
            let groups: Vec<wgpu::BindGroup> = (0..outputs)
                .map(|i| {
                    let out = buffer(g, 4 * wgs, 300 + i);
                    device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("read_vec4"),
                        layout: &pipeline.get_bind_group_layout(0),
                        entries: &[
                            wgpu::BindGroupEntry {
                                binding: 0,
                                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                    buffer: src,
                                    offset: i % windows * size,
                                    size: std::num::NonZeroU64::new(size),
                                }),
                            },
                            wgpu::BindGroupEntry { binding: 1, resource: out.as_entire_binding() },
                        ],
                    })
                })
                .collect();
            // 64 dispatches a command buffer as before, or one an output for `_independent`.
            let per_buffer = if suffix.is_empty() { 64 } else { OUTPUTS as u64 };
            group.throughput(Throughput::Bytes(size));
            group.bench_function(format!("read_only_{name}{suffix}"), |b| {
                b.iter_custom(|iters| {
                    time_rotating(g, &pipeline, &groups, [wgs as u32, 1], iters, per_buffer)
                })
            });
        }
    }
}

fn benches(c: &mut Criterion) {
    let ctx = match Context::new() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("no GPU, no kernel benches: {e}");
            return;
        }
    };
    eprintln!("bench device: {}", ctx.describe());
    let sg = Kernels::new(&ctx);
    let plain = Kernels::with_subgroups(&ctx, false);
    let g = Gpu { ctx, sg, plain };
    bench_copy(c, &g);
    bench_q8_gemv(c, &g);
    bench_kquant_gemv(c, &g);
    bench_expert_kquant(c, &g);
    bench_expert_kquant_swiglu(c, &g);
    bench_expert(c, &g);
    bench_small(c, &g);
    bench_prefill(c, &g);
    bench_prefill_expert_blocks(c, &g);
}

/// A chunk's picks: `k` distinct experts a token from `experts`, by an LCG (routing of random weights is
/// close to uniform).
fn chunk_picks(t: u32, k: u32, experts: u32) -> Vec<u32> {
    let mut state = 12_345u64;
    let mut picks = Vec::with_capacity((t * k) as usize);
    for _ in 0..t {
        let mut token: Vec<u32> = Vec::with_capacity(k as usize);
        while token.len() < k as usize {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let e = (state >> 33) as u32 % experts;
            if !token.contains(&e) {
                token.push(e);
            }
        }
        picks.extend(token);
    }
    picks
}

/// The GEMMs of one layer of a 256-token prefill chunk at Qwen3-30B-A3B's shapes, throughput in
/// multiply-adds ×2 (FLOP): the dense q‖k‖v and o projections (`q8_gemm_tiled`) and the tiled expert GEMM
/// over the chunk's 2,048 (token, pick) pairs grouped by slot, up to 32 a group (8 distinct picks a token
/// from 128 experts, one slot each); and the chunk's causal attention (`attention_flash`, the kernel chunks
/// run, beside the kernels before it). Consecutive dispatches write different outputs; the weights (up to 384 MB
/// of expert slots) are the same each time. (The 8-token GEMMs these replaced, `q8_gemm` and
/// `expert_q8_gemm`, are gone; their figures stay in BENCHMARKS.md.)
fn bench_prefill(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("prefill");
    let (t, k, experts) = (256u32, 8u32, 128u32);
    let k_ = &g.sg;
    for (name, rows, cols) in [
        ("q8_gemm_tiled/qkv_5120x2048_t256", 5120u32, 2048u32),
        ("q8_gemm_tiled/wo_2048x4096_t256", 2048, 4096),
    ] {
        let qbytes = u64::from(rows) * u64::from(cols);
        let (q, s) = (buffer(g, qbytes, 1), buffer(g, qbytes / 16, 2));
        let x = buffer(g, 4 * u64::from(t * cols), 3);
        let ys: Vec<wgpu::Buffer> = (0..4).map(|i| buffer(g, 4 * u64::from(t * rows), 4 + i)).collect();
        let w = Q8Matrix { q: (&q).into(), scales: (&s).into(), rows, cols };
        group.throughput(Throughput::Elements(2 * qbytes * u64::from(t)));
        let ds: Vec<Dispatch> =
            ys.iter().map(|y| k_.q8_gemm_tiled(w, (&x).into(), y.into(), t).expect("bind")).collect();
        group.bench_function(name, |b| b.iter_custom(|iters| time(g, &ds, iters)));
    }
    // The chunk's causal attention over a 4,096-position f16 cache, 32 query heads, 4 kv heads, d = 128:
    // the second chunk of a 512-token prompt (positions 256..511) and the last of a 4,096-token one
    // (3,840..4,095), by the block-of-tokens kernel chunks run, the tiled one it replaced, and (the short one)
    // the one-query-head-a-workgroup one before that. Throughput: the K and V bytes each query head reads.
    let shape = AttentionShape { heads: 32, kv_heads: 4, head_dim: 128, tokens: t, ctx: 4096 };
    let q = buffer(g, 4 * u64::from(t * 32 * 128), 20);
    let cache_bytes = 2 * u64::from(shape.ctx * 4 * 128);
    let (kc, vc) = (buffer(g, cache_bytes, 21), buffer(g, cache_bytes, 22));
    let outs: Vec<wgpu::Buffer> = (0..4).map(|i| buffer(g, 4 * u64::from(t * 32 * 128), 24 + i)).collect();
    for first in [256u32, 3840] {
        let pos = buffer(g, 4 * u64::from(t), 23);
        let positions: Vec<u32> = (first..first + t).collect();
        g.ctx.queue.write_buffer(&pos, 0, bytemuck::cast_slice(&positions));
        let attended: u64 = positions.iter().map(|&p| u64::from(p) + 1).sum();
        group.throughput(Throughput::Bytes(attended * 32 * 128 * 2 * 2));
        let names: &[&str] =
            if first == 256 { &["flash", "tiled", "per_query"] } else { &["flash", "tiled"] };
        for &name in names {
            let ds: Vec<Dispatch> = outs
                .iter()
                .map(|o| {
                    let (q, kc, vc, pos, o) =
                        ((&q).into(), (&kc).into(), (&vc).into(), (&pos).into(), o.into());
                    match name {
                        "flash" => k_.attention_flash(q, kc, vc, pos, o, shape),
                        "tiled" => k_.attention_tiled(q, kc, vc, pos, o, shape),
                        _ => k_.attention_per_query(q, kc, vc, pos, o, shape),
                    }
                    .expect("bind")
                })
                .collect();
            let id = format!("attention_{name}/t256_pos{first}-{}", first + t - 1);
            group.bench_function(id, |b| b.iter_custom(|iters| time(g, &ds, iters)));
        }
    }
    let pairs = t * k;
    let picks = chunk_picks(t, k, experts);
    // The expert GEMMs over Q8_0 slots and over Q4_0 ones (the same tiles, nibbles decoded; FLOP as Q8_0's).
    for (name, rows, cols, x_div, q4) in [
        ("expert_q8_gemm/gate_up_1536x2048", 1536u32, 2048u32, k, false),
        ("expert_q8_gemm/down_2048x768", 2048, 768, 1, false),
        ("expert_q4_gemm/gate_up_1536x2048", 1536, 2048, k, true),
        ("expert_q4_gemm/down_2048x768", 2048, 768, 1, true),
    ] {
        let slot_q = u64::from(rows) * u64::from(cols);
        let plane_q = if q4 { slot_q / 2 } else { slot_q };
        let (q, s) =
            (buffer(g, u64::from(experts) * plane_q, 5), buffer(g, u64::from(experts) * slot_q / 16, 6));
        let planes =
            ExpertPlanes { q: (&q).into(), scales: (&s).into(), slots: experts, first_slot: 0, rows, cols };
        let x = buffer(g, 4 * u64::from(pairs / x_div * cols), 7);
        let ys: Vec<wgpu::Buffer> = (0..4).map(|i| buffer(g, 4 * u64::from(pairs * rows), 8 + i)).collect();
        group.throughput(Throughput::Elements(2 * slot_q * u64::from(pairs)));
        let len = expert_gemm_group_bound(pairs as usize, experts as usize, EXPERT_GEMM_TILED_GROUP);
        let (groups, order) = expert_gemm_groups(&picks, EXPERT_GEMM_TILED_GROUP, len);
        let gb = buffer(g, 16 * len as u64, 9);
        let ob = buffer(g, 4 * u64::from(pairs), 10);
        g.ctx.queue.write_buffer(&gb, 0, bytemuck::cast_slice(&groups));
        g.ctx.queue.write_buffer(&ob, 0, bytemuck::cast_slice(&order));
        let sizes = (pairs, len as u32);
        let ds: Vec<Dispatch> = ys
            .iter()
            .map(|y| {
                let (x, gb, ob, y) = ((&x).into(), (&gb).into(), (&ob).into(), y.into());
                if q4 {
                    k_.expert_q4_gemm(planes, x, gb, ob, y, sizes, x_div)
                } else {
                    k_.expert_q8_gemm_tiled(planes, x, gb, ob, y, sizes, x_div)
                }
                .expect("bind")
            })
            .collect();
        group.bench_function(format!("{name}/tiled"), |b| b.iter_custom(|iters| time(g, &ds, iters)));
    }
    group.finish();
}

/// qwen35moe's grouped expert GEMMs over Q8_0 blocks (as its records lie, `expert_kquant_gemm`) for a
/// 512-token chunk of Qwen3.6-35B-A3B's shape: 4,096 (token, pick) pairs over 256 experts grouped by slot,
/// up to 64 a group. Throughput: multiply-adds ×2 (FLOP).
fn bench_prefill_expert_blocks(c: &mut Criterion, g: &Gpu) {
    let mut group = c.benchmark_group("prefill_blocks");
    let (t, k, experts) = (512u32, 8u32, 256u32);
    let (pairs, quant) = (t * k, BlockQuant::Q8_0);
    let picks = chunk_picks(t, k, experts);
    let len = expert_gemm_group_bound(pairs as usize, experts as usize, EXPERT_BLOCK_GEMM_GROUP);
    let (groups, order) = expert_gemm_groups(&picks, EXPERT_BLOCK_GEMM_GROUP, len);
    let gb = buffer(g, 16 * len as u64, 9);
    let ob = buffer(g, 4 * u64::from(pairs), 10);
    g.ctx.queue.write_buffer(&gb, 0, bytemuck::cast_slice(groups.as_flattened()));
    g.ctx.queue.write_buffer(&ob, 0, bytemuck::cast_slice(&order));
    for (name, rows, cols, x_div) in
        [("gate_up_1024x2048", 1024u32, 2048u32, k), ("down_2048x512", 2048, 512, 1)]
    {
        let slot_bytes =
            (u64::from(rows) * u64::from(cols) / 256 * quant.block_bytes()).next_multiple_of(256);
        let pool = buffer(g, u64::from(experts) * slot_bytes, 5);
        let x = buffer(g, 4 * u64::from(pairs / x_div * cols), 7);
        let ys: Vec<wgpu::Buffer> = (0..4).map(|i| buffer(g, 4 * u64::from(pairs * rows), 8 + i)).collect();
        group.throughput(Throughput::Elements(2 * u64::from(rows) * u64::from(cols) * u64::from(pairs)));
        let w = device_blocks(&pool, quant, (slot_bytes, experts), (rows, cols));
        let ds: Vec<Dispatch> = ys
            .iter()
            .map(|y| {
                let (x, gb, ob) = ((&x).into(), (&gb).into(), (&ob).into());
                let out = ExpertOut { y: y.into(), stride: rows, offset: 0 };
                g.sg.expert_kquant_gemm(w, x, gb, ob, out, (pairs, len as u32), x_div).expect("bind")
            })
            .collect();
        let id = format!("{name}_t512/tiled");
        group.bench_function(id, |b| b.iter_custom(|iters| time(g, &ds, iters)));
    }
    group.finish();
}

criterion_group!(kernel_benches, benches);
criterion_main!(kernel_benches);
