//! What a submission and a readback cost the host on this device: the fixed costs of a streaming step's
//! round trips (a layer's picks read back, the host's sum written and submitted), apart from the kernels.
//!
//! Each pattern runs `--iters` times after a warm-up; the table gives the median and mean µs a time.
//! `cargo run --release -p diskformer-kernels --example submit-latency -- --iters 500`

use std::sync::mpsc;
use std::time::{Duration, Instant};

use diskformer_kernels::Context;

const SHADER: &str = "
@group(0) @binding(0) var<storage, read_write> data: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3u) {
    if id.x < arrayLength(&data) { data[id.x] = data[id.x] * 0.5 + 1.0; }
}";

/// Values of the buffers: one layer's hidden state (2,048 f32).
const VALUES: u64 = 2048;

struct Bench {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    data: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl Bench {
    fn new(ctx: &Context) -> Self {
        let device = ctx.device.clone();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("submit-latency"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let data = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("data"),
            size: 4 * VALUES,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: 4 * VALUES,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry { binding: 0, resource: data.as_entire_binding() }],
        });
        Self { device, queue: ctx.queue.clone(), pipeline, bind, data, readback }
    }

    /// An encoder with `dispatches` dependent dispatches, each in its own pass (as the engine records them).
    fn encoder(&self, dispatches: usize, copy_out: bool) -> wgpu::CommandEncoder {
        let mut enc = self.device.create_command_encoder(&Default::default());
        for _ in 0..dispatches {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.bind, &[]);
            pass.dispatch_workgroups((VALUES / 64) as u32, 1, 1);
        }
        if copy_out {
            enc.copy_buffer_to_buffer(&self.data, 0, &self.readback, 0, 4 * VALUES);
        }
        enc
    }

    /// Maps the readback buffer, waiting by blocking in `poll` or by spinning on non-blocking polls.
    fn read(&self, spin: bool) {
        let slice = self.readback.slice(..);
        let (tx, rx) = mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        if spin {
            loop {
                self.device.poll(wgpu::PollType::Poll).expect("poll");
                if let Ok(r) = rx.try_recv() {
                    r.expect("mapped");
                    break;
                }
                std::hint::spin_loop();
            }
        } else {
            self.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
            rx.recv().expect("callback").expect("mapped");
        }
        let _sum: f32 =
            bytemuck::cast_slice::<u8, f32>(&slice.get_mapped_range().expect("mapped")).iter().sum();
        self.readback.unmap();
    }

    fn idle(&self) {
        self.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    }
}

/// Median and mean of `iters` timings of `f` (its own measure of what it times), after 20 unmeasured.
fn measure(iters: usize, mut f: impl FnMut() -> Duration) -> (f64, f64) {
    for _ in 0..20 {
        f();
    }
    let mut times: Vec<f64> = (0..iters).map(|_| f().as_secs_f64() * 1e6).collect();
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times.iter().sum::<f64>() / times.len() as f64)
}

fn main() {
    let mut iters = 500;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = args.next().and_then(|v| v.parse().ok()).expect("--iters N"),
            other => {
                eprintln!("unknown argument {other}; usage: submit-latency [--iters N]");
                std::process::exit(2);
            }
        }
    }
    let ctx = Context::new().expect("a GPU context");
    println!("{}", ctx.describe());
    let b = Bench::new(&ctx);
    let host = vec![1f32; VALUES as usize];
    let mut rows: Vec<(&str, (f64, f64))> = Vec::new();

    // A submit of `dispatches` recorded and finished before, after an 8 KB write when `write`; timed alone.
    let submit = |dispatches: usize, write: bool| {
        measure(iters, || {
            let cb = b.encoder(dispatches, false).finish();
            let t = Instant::now();
            if write {
                b.queue.write_buffer(&b.data, 0, bytemuck::cast_slice(&host));
            }
            b.queue.submit([cb]);
            let took = t.elapsed();
            b.idle();
            took
        })
    };
    rows.push(("submit: empty encoder", submit(0, false)));
    rows.push(("submit: 10 dispatches", submit(10, false)));
    rows.push(("write 8 KB + submit: empty", submit(0, true)));
    rows.push((
        "record 10 dispatches",
        measure(iters, || {
            let t = Instant::now();
            let enc = b.encoder(10, true);
            let cb = enc.finish();
            let took = t.elapsed();
            drop(cb);
            took
        }),
    ));
    rows.push((
        "idle poll (nothing pending)",
        measure(iters, || {
            let t = Instant::now();
            b.idle();
            t.elapsed()
        }),
    ));
    for (dispatches, spin) in [(1, false), (1, true), (10, false), (10, true)] {
        let name = match (dispatches, spin) {
            (1, false) => "round trip: 1 dispatch, blocking poll",
            (1, true) => "round trip: 1 dispatch, spinning poll",
            (10, false) => "round trip: 10 dispatches, blocking poll",
            _ => "round trip: 10 dispatches, spinning poll",
        };
        rows.push((
            name,
            measure(iters, || {
                let t = Instant::now();
                b.queue.write_buffer(&b.data, 0, bytemuck::cast_slice(&host));
                b.queue.submit([b.encoder(dispatches, true).finish()]);
                b.read(spin);
                t.elapsed()
            }),
        ));
    }

    println!("| pattern ({iters} times) | median µs | mean µs |");
    println!("|---|---|---|");
    for (name, (median, mean)) in rows {
        println!("| {name} | {median:.1} | {mean:.1} |");
    }
}
