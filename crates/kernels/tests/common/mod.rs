//! Test helpers: the shared GPU (or a loud skip), a seeded PRNG, buffers with poisoned contents,
//! running a dispatch and reading back, and `assert_close`.
#![allow(dead_code)]

use std::sync::OnceLock;

use diskformer_kernels::{Context, Dispatch, Kernels};
use half::f16;
use wgpu::util::DeviceExt;

/// Set to 1 to skip the GPU tests when no adapter exists (they fail otherwise).
pub const SKIP_ENV: &str = "DISKFORMER_SKIP_GPU_TESTS";

pub struct Gpu {
    pub ctx: Context,
    /// Kernels with the subgroup variants when the device has them.
    pub kernels: Kernels,
    /// Kernels with the plain variants (the same as `kernels` without subgroups).
    pub plain: Kernels,
}

/// The test binary's GPU, created once; `None` (after a loud message) only when skipping is asked for.
pub fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| match Context::new() {
        Ok(ctx) => {
            eprintln!("GPU tests on {}", ctx.describe());
            let kernels = Kernels::new(&ctx);
            let plain = Kernels::with_subgroups(&ctx, false);
            Some(Gpu { ctx, kernels, plain })
        }
        Err(e) if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPING GPU TESTS ({SKIP_ENV}=1): {e}");
            None
        }
        Err(e) => panic!("no GPU for the kernel tests: {e}; install lavapipe or set {SKIP_ENV}=1 to skip"),
    })
    .as_ref()
}

/// Returns the GPU or skips the calling test.
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match common::gpu() {
            Some(g) => g,
            None => return,
        }
    };
}

pub use diskformer_testkit::Rng;

/// Q8_0-like scales for the kernels' tests.
pub trait Scales {
    /// `n` scales of magnitude in [0.002, 0.02], either sign.
    fn vec_scales(&mut self, n: usize) -> Vec<f16>;
}

impl Scales for Rng {
    fn vec_scales(&mut self, n: usize) -> Vec<f16> {
        (0..n)
            .map(|_| {
                let m = self.f32(0.002, 0.02);
                f16::from_f32(if self.next_u64() & 1 == 0 { m } else { -m })
            })
            .collect()
    }
}

/// A storage buffer holding `data` (padded to 4 bytes).
pub fn upload<T: bytemuck::Pod>(g: &Gpu, data: &[T]) -> wgpu::Buffer {
    let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
    bytes.resize(bytes.len().next_multiple_of(4).max(4), 0);
    g.ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: &bytes,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    })
}

/// A storage buffer of `bytes` bytes filled with 0xFF (a NaN for f32 and f16, u32::MAX for ids).
pub fn poisoned(g: &Gpu, bytes: usize) -> wgpu::Buffer {
    upload(g, &vec![0xffu8; bytes.next_multiple_of(4)])
}

/// Records the dispatches in one pass, submits, and waits.
pub fn run(g: &Gpu, dispatches: &[&Dispatch]) {
    let mut enc = g.ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        for d in dispatches {
            d.record(&mut pass);
        }
    }
    g.ctx.queue.submit([enc.finish()]);
    g.ctx.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
}

/// Reads a whole buffer back.
pub fn read<T: bytemuck::Pod>(g: &Gpu, buf: &wgpu::Buffer) -> Vec<T> {
    let size = buf.size();
    let staging = g.ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = g.ctx.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size);
    g.ctx.queue.submit([enc.finish()]);
    staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    g.ctx.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    let data = staging.slice(..).get_mapped_range().expect("mapped range");
    let n = data.len() / size_of::<T>();
    bytemuck::pod_collect_to_vec(&data[..n * size_of::<T>()])
}

/// Reads `n` values of a buffer back.
pub fn read_n<T: bytemuck::Pod>(g: &Gpu, buf: &wgpu::Buffer, n: usize) -> Vec<T> {
    let mut v = read::<T>(g, buf);
    v.truncate(n);
    v
}

/// The tolerance scale of sums of squares over blocks of 4 values of each row (the next norm's inputs the
/// GEMV-combines write), from the values and each value's own scale: a square's error is twice its value's
/// relative error, plus the roundings of a sum of positive terms.
pub fn squares_scale(values: &[f32], scale: &[f32], rows: usize) -> Vec<f32> {
    values
        .chunks(rows)
        .zip(scale.chunks(rows))
        .flat_map(|(row, sc)| {
            row.chunks(4)
                .zip(sc.chunks(4))
                .map(|(b, s)| b.iter().zip(s).map(|(v, s)| 2.0 * v.abs() * s + v * v).sum::<f32>())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Asserts `|got[i] - want[i]| <= atol + rtol * scale[i]` for every i (NaN fails), reporting the
/// first index that does not.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], scale: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0.0f32;
    for i in 0..got.len() {
        let tol = atol + rtol * scale[i];
        let err = (got[i] - want[i]).abs();
        assert!(
            err <= tol,
            "{what}: index {i}: got {} want {} (|diff| {err:e} > tol {tol:e})",
            got[i],
            want[i]
        );
        worst = worst.max(err / tol.max(f32::MIN_POSITIVE));
    }
    eprintln!("{what}: {} values, worst error {:.3} of tolerance", got.len(), worst);
}

/// Asserts that `other` (another arithmetic's reference) lies outside `rtol · scale` of `want` somewhere,
/// so that the tolerance a kernel is held to tells its arithmetic from that one: `what` says which.
pub fn assert_some_apart(what: &str, other: &[f32], want: &[f32], scale: &[f32], rtol: f32) {
    let apart = other.iter().zip(want).zip(scale).filter(|((a, b), m)| (*a - *b).abs() > rtol * *m);
    assert!(apart.count() > 0, "{what}");
}

/// `scale` vector for relative tolerances on plain magnitudes.
pub fn abs_of(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| x.abs()).collect()
}

/// For the GEMVs that quantise their f32 input as they read it (`q8_gemv_i8`, `expert_q8_gemv_i8`, ...):
/// how far each of the `rows` outputs of `q`/`s` (`[rows, cols]` Q8_0) against input `x` (`cols` values)
/// may lie from `cpu::quantize_q8`'s arithmetic, beyond the f32 rounding of the sums. WGSL lets the GPU's
/// division be 2.5 ulp off, so where x / d lands within a few ulp of a half, the GPU's quant may be one off
/// (moving the output by |q_w|·d_w·d_x), and where max|x| / 127 lies within a few ulp of an f16 rounding
/// boundary, its f16 scale may be one step off (moving the block's sum by 2^-10 of Σ|w·x| at most, more
/// below f16's normal range). Only those places are allowed for, so the check stays exact elsewhere
/// (lavapipe matches the CPU bit for bit).
pub fn quant_allowance(q: &[i8], s: &[f16], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    let nblk = cols / 32;
    // Per block: its scale d, whether its f16 rounding is in doubt, and the columns whose quant is.
    let mut blocks = Vec::with_capacity(nblk);
    for block in x.chunks(32) {
        let d = block.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let d16 = |v: f32| f16::from_f32(v).to_f32();
        let scale_doubt = d16(d * (1.0 - 4.0 * f32::EPSILON)) != d16(d * (1.0 + 4.0 * f32::EPSILON));
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let doubt: Vec<bool> = block
            .iter()
            .map(|v| {
                // x / d is off by up to ~6 ulp of itself on the GPU (two divisions and a product).
                let a = (v * id).abs();
                (a - a.floor() - 0.5).abs() <= 8.0 * f32::EPSILON * a
            })
            .collect();
        blocks.push((d16(d), scale_doubt, doubt));
    }
    (0..rows)
        .map(|r| {
            let mut allow = 0f32;
            for (b, (d, scale_doubt, doubt)) in blocks.iter().enumerate() {
                let dw = s[r * nblk + b].to_f32().abs();
                let w = &q[r * cols + b * 32..][..32];
                if *scale_doubt {
                    let sum: f32 =
                        w.iter().zip(&x[b * 32..]).map(|(&qv, xv)| f32::from(qv).abs() * xv.abs()).sum();
                    // One f16 step of the scale, relative: 2^-10 in f16's normal range, 2^-24 / d below it.
                    allow += 2f32.powi(-10).max(2f32.powi(-24) / d) * dw * sum;
                }
                allow += w
                    .iter()
                    .zip(doubt)
                    .filter(|(_, d)| **d)
                    .map(|(&qv, _)| f32::from(qv).abs() * dw * d)
                    .sum::<f32>();
            }
            allow
        })
        .collect()
}

/// The outputs of a routed expert GEMV and of the path it replaces (`router_topk_slots`, then the
/// slot-indexed GEMV), all poisoned, for checking the two bit for bit.
pub struct RoutedOutputs {
    /// What the routed kernel writes: picks, weights, slots, activations.
    pub got: [wgpu::Buffer; 4],
    /// What the router and the slot-indexed GEMV write.
    pub want: [wgpu::Buffer; 4],
    pairs: usize,
    act_len: usize,
}

impl RoutedOutputs {
    /// Outputs for `pairs` picks and activations of `act_len` values.
    pub fn new(g: &Gpu, pairs: usize, act_len: usize) -> Self {
        let set = || {
            [poisoned(g, 4 * pairs), poisoned(g, 4 * pairs), poisoned(g, 4 * pairs), poisoned(g, 4 * act_len)]
        };
        Self { got: set(), want: set(), pairs, act_len }
    }

    /// `router_topk_slots` of `logits` through `table` into the wanted picks, weights and slots.
    pub fn router(
        &self,
        k: &Kernels,
        (logits, table): (&wgpu::Buffer, &wgpu::Buffer),
        (experts, top_k, tokens): (u32, u32, u32),
        table_range: (u32, u32),
    ) -> Dispatch {
        let [ids, weights, slots, _] = &self.want;
        let v = diskformer_kernels::View::from;
        k.router_topk_slots(
            v(logits),
            v(table),
            v(ids),
            v(weights),
            v(slots),
            experts,
            top_k,
            tokens,
            table_range,
        )
        .unwrap()
    }

    /// The route the routed kernel takes: the same logits and table, its own picks, weights and slots.
    pub fn route<'a>(
        &'a self,
        (logits, table): (&'a wgpu::Buffer, &'a wgpu::Buffer),
        experts: u32,
        table_range: (u32, u32),
    ) -> diskformer_kernels::Route<'a> {
        let [ids, weights, slots, _] = &self.got;
        let v = diskformer_kernels::View::from;
        diskformer_kernels::Route {
            logits: v(logits),
            table: v(table),
            table_range,
            experts,
            ids: v(ids),
            weights: v(weights),
            slots: v(slots),
        }
    }

    /// Asserts that both paths wrote the same bits.
    pub fn assert_same(&self, g: &Gpu, what: &str) {
        let names = ["ids", "weights", "slots", "activations"];
        let lens = [self.pairs, self.pairs, self.pairs, self.act_len];
        for ((got, want), (name, n)) in self.got.iter().zip(&self.want).zip(names.into_iter().zip(lens)) {
            assert_eq!(read_n::<u32>(g, got, n), read_n::<u32>(g, want, n), "{what}: {name}");
        }
    }
}

/// An f16 cache against its reference: untouched positions (the poison) exactly, the rest within one f16
/// ulp (2^-10 relative) plus `rtol` of the head's largest value.
pub fn check_f16_cache(what: &str, name: &str, got: &[u16], want: &[f16], d: usize, rtol: f32) {
    let poison = f16::from_bits(0xffff);
    let head_max: Vec<f32> = want
        .chunks(d)
        .flat_map(|h| {
            let m = h
                .iter()
                .filter(|x| x.to_bits() != poison.to_bits())
                .fold(0.0f32, |m, x| m.max(x.to_f32().abs()));
            std::iter::repeat_n(m, d)
        })
        .collect();
    for (i, (&a, b)) in got.iter().zip(want).enumerate() {
        if b.to_bits() == poison.to_bits() {
            assert_eq!(a, 0xffff, "{what}: {name} cache index {i} was written");
            continue;
        }
        let (got, want) = (f16::from_bits(a).to_f32(), b.to_f32());
        assert!(
            (got - want).abs() <= want.abs() / 1024.0 + rtol * head_max[i],
            "{what}: {name}[{i}] {got} vs {want}"
        );
    }
}
