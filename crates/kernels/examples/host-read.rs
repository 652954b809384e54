//! How fast a shader reads a storage buffer that lives in host memory (a `MAP_READ | STORAGE` buffer, which
//! wgpu places in host-visible, host-cached memory), against one in device memory: the rate at which a GPU
//! could compute experts straight from host memory, with no upload and no round trip to the host. Also how
//! uploads move: the host's writes into wgpu's `MAP_WRITE` staging and into a host-cached buffer (1 and 8
//! threads), and the copy engine's copy of each into device memory. Needs wgpu's mappable-primary-buffers
//! feature (native backends). Figures: BENCHMARKS.md, twentieth session.
//!
//! `cargo run --release -p diskformer-kernels --example host-read -- --mib 1024 --iters 10 [--extra 8]`

use std::time::Instant;

const SHADER: &str = "
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn vec4_read(@builtin(global_invocation_id) id: vec3u, @builtin(num_workgroups) n: vec3u) {
    let stride = n.x * 256u;
    var acc = vec4<u32>(0u);
    let len = arrayLength(&src);
    for (var i = id.x; i < len; i += stride) {
        acc ^= src[i];
    }
    let s = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (s == 0x12345678u) { out[id.x % 64u] = s; }
}
@group(0) @binding(0) var<storage, read> words: array<u32>;
@compute @workgroup_size(256)
fn word_read(@builtin(global_invocation_id) id: vec3u, @builtin(num_workgroups) n: vec3u) {
    let stride = n.x * 256u;
    var acc = 0u;
    let len = arrayLength(&words);
    for (var i = id.x; i < len; i += stride) {
        acc ^= words[i];
    }
    if (acc == 0x12345678u) { out[id.x % 64u] = acc; }
}
";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Seconds from submitting `enc` until the device has finished it.
fn submit_timed(device: &wgpu::Device, queue: &wgpu::Queue, enc: wgpu::CommandEncoder) -> f64 {
    let t = Instant::now();
    queue.submit([enc.finish()]);
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    t.elapsed().as_secs_f64()
}

fn main() {
    let mib = arg("--mib", 1024);
    let iters = arg("--iters", 10);
    let workgroups = arg("--workgroups", 132 * 16) as u32;
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
        .expect("no adapter");
    let info = adapter.get_info();
    println!("adapter: {} ({:?}, {})", info.name, info.backend, info.driver_info);
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: None,
        required_features: wgpu::Features::MAPPABLE_PRIMARY_BUFFERS,
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .expect("device");
    let size = (mib << 20).min(limits.max_storage_buffer_binding_size as u64 & !255);
    println!("buffer: {} MiB, {workgroups} workgroups of 256, {iters} passes", size >> 20);

    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("host-read"),
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let out = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("out"),
        size: 256,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let fill: Vec<u8> = (0..size).map(|i| ((i * 2654435761) >> 13) as u8).collect();

    let host = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("host"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let dev = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("device"),
        size,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let t = Instant::now();
    queue.write_buffer(&host, 0, &fill);
    queue.submit([]);
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    println!("host buffer filled by write_buffer: {:.2} GB/s", size as f64 / t.elapsed().as_secs_f64() / 1e9);
    queue.write_buffer(&dev, 0, &fill);
    queue.submit([]);
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();

    // The host's own writes into the buffer while mapped (for reading: the mapping of a host-cached buffer).
    host.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    {
        let t = Instant::now();
        match host.slice(..).get_mapped_range_mut() {
            Ok(mut view) => {
                view.copy_from_slice(&fill);
                println!(
                    "host writes into the mapped buffer: {:.2} GB/s",
                    size as f64 / t.elapsed().as_secs_f64() / 1e9
                );
            }
            Err(e) => println!("host writes into the mapped buffer: refused ({e})"),
        }
    }
    host.unmap();

    // Uploads: the host's writes into a staging buffer of each kind (1 and 8 threads) and the copy engine's
    // copy of it into device memory. `MAP_WRITE | COPY_SRC` is wgpu's staging kind (host-visible memory that
    // may be device-local: the PCIe BAR); `MAP_READ | COPY_SRC` is host-cached system memory.
    for (kind, usage, mode) in [
        (
            "MAP_WRITE staging",
            wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            wgpu::MapMode::Write,
        ),
        (
            "MAP_READ host-cached",
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_SRC,
            wgpu::MapMode::Read,
        ),
    ] {
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(kind),
            size,
            usage,
            mapped_at_creation: false,
        });
        for threads in [1usize, 8] {
            staging.slice(..).map_async(mode, |r| r.expect("map"));
            device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
            let secs = {
                let mut view = staging.slice(..).get_mapped_range_mut().expect("mapped");
                let mut whole = view.slice(..);
                let len = whole.len();
                // SAFETY: the mapping is valid for writes of `len` bytes while `view` lives; only written here.
                let view =
                    unsafe { std::slice::from_raw_parts_mut(whole.as_raw_element_ptr().as_ptr(), len) };
                let t = Instant::now();
                let chunk = (size as usize).div_ceil(threads);
                std::thread::scope(|s| {
                    for (dst, src) in view.chunks_mut(chunk).zip(fill.chunks(chunk)) {
                        s.spawn(move || dst.copy_from_slice(src));
                    }
                });
                t.elapsed().as_secs_f64()
            };
            staging.unmap();
            println!("{kind:22} host writes, {threads} threads: {:8.2} GB/s", size as f64 / secs / 1e9);
        }
        let copy = |passes: u64| {
            let mut enc = device.create_command_encoder(&Default::default());
            for _ in 0..passes {
                enc.copy_buffer_to_buffer(&staging, 0, &dev, 0, size);
            }
            submit_timed(&device, &queue, enc)
        };
        copy(1);
        let secs = copy(iters);
        println!("{kind:22} copy into device memory: {:8.2} GB/s", (size * iters) as f64 / secs / 1e9);
    }

    // How much host memory such buffers can take: `--extra N` more of the same size, each written through
    // its mapping.
    let extra = arg("--extra", 0);
    let mut kept = Vec::new();
    let t = Instant::now();
    for i in 0..extra {
        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let b = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("extra"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            println!("extra buffer {i}: {e}");
            break;
        }
        b.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("map"));
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        b.slice(..).get_mapped_range_mut().expect("mapped").copy_from_slice(&fill);
        b.unmap();
        kept.push(b);
    }
    if extra > 0 {
        println!(
            "{} more host buffers ({} MiB in all) made and written: {:.2} GB/s",
            kept.len(),
            (kept.len() as u64 * size) >> 20,
            (kept.len() as u64 * size) as f64 / t.elapsed().as_secs_f64() / 1e9
        );
    }

    for entry in ["vec4_read", "word_read"] {
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
        for (name, buffer) in [("host", &host), ("device", &dev)] {
            let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: out.as_entire_binding() },
                ],
            });
            let run = |passes: u64| {
                let mut enc = device.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    pass.set_pipeline(&pipeline);
                    pass.set_bind_group(0, &bind, &[]);
                    for _ in 0..passes {
                        pass.dispatch_workgroups(workgroups, 1, 1);
                    }
                }
                submit_timed(&device, &queue, enc)
            };
            run(1);
            let secs = run(iters);
            println!("{entry:10} {name:7} {:8.2} GB/s", (size * iters) as f64 / secs / 1e9);
        }
    }
}
