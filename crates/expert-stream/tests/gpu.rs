//! The GPU backend on a real device (lavapipe in CI): every region of each record read from a store lands in
//! the right slot of the matching plane, through misses, evictions and concurrent uploads; pools the device or
//! the expert kernels cannot hold are refused with the numbers.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::gpu::{TempDir, read_back, store};
use diskformer_expert_stream::{
    Error, ExpertKey, ExpertPool, GpuBackend, GpuPool, HostHandoff, Plane, PoolConfig, Slot, UploadMethod,
};
use diskformer_store::{RecordBuf, RecordReader};

fn record(reader: &RecordReader, key: ExpertKey) -> Vec<u8> {
    let mut buf = RecordBuf::new(reader.layout().record_bytes as usize);
    reader.read(key, &mut buf).unwrap();
    buf.as_slice()[..reader.layout().record_bytes as usize].to_vec()
}

/// Checks that `slot` of every plane of `pool` holds the matching region of `record`, given each part's
/// planes read back.
fn assert_slot_holds(pool: &GpuPool, planes: &[[Vec<u8>; 4]], slot: Slot, key: ExpertKey, record: &[u8]) {
    let part = pool
        .parts_with_arena()
        .iter()
        .position(|p| (p.first_slot()..p.first_slot() + p.slots()).contains(&slot.0))
        .expect("every slot is in a part");
    for (plane, bytes) in Plane::ALL.into_iter().zip(&planes[part]) {
        let r = pool.region(plane);
        let at =
            ((slot.0 - pool.parts_with_arena()[part].first_slot()) as u64 * pool.slot_bytes(plane)) as usize;
        let got = &bytes[at..at + r.len as usize];
        let want = &record[r.offset as usize..r.end() as usize];
        if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
            panic!(
                "{key} in {slot}, plane {}: byte {i} is {} on the device, {} in the record",
                plane.name(),
                got[i],
                want[i]
            );
        }
    }
}

fn read_planes(ctx: &diskformer_kernels::Context, pool: &GpuPool) -> Vec<[Vec<u8>; 4]> {
    pool.parts_with_arena().iter().map(|part| Plane::ALL.map(|p| read_back(ctx, part.buffer(p)))).collect()
}

/// An arena's slots follow the device's, in parts of their own, counted apart from the device's bytes: a
/// record uploaded into one (written or staged) lands there, and a slot past it is refused.
#[test]
fn arena_slots_follow_the_devices_and_hold_their_records() {
    let ctx = gpu_or_skip!();
    assert!(ctx.host_storage, "{}: every Vulkan device binds host memory", ctx.describe());
    let dir = TempDir::new("gpu-arena");
    let store = store(dir.path(), 2, 8, 32, 64, 13);
    let layout = store.layout().experts.clone().unwrap();
    let reader = store.record_reader(false).unwrap();
    let gpu = GpuPool::with_arena(ctx, &layout, 5, 16).unwrap();
    let device_only = GpuPool::new(ctx, &layout, 5).unwrap();
    assert_eq!((gpu.slots(), gpu.arena_slots()), (5, 16));
    assert_eq!(gpu.parts().len(), 1);
    assert_eq!(gpu.parts_with_arena()[1].first_slot(), 5);
    assert_eq!(gpu.device_bytes(), device_only.device_bytes());
    assert_eq!(gpu.arena_bytes(), 16 * device_only.device_bytes() / 5);
    // Arena slot 5 + 8l + e holds record (l, e); the device's slot 4 holds (1, 7).
    let key_of = |slot: u32| {
        if slot < 5 { ExpertKey::new(1, 7) } else { ExpertKey::new((slot - 5) / 8, (slot - 5) % 8) }
    };
    let mut ring = gpu.staging_ring(2, 3);
    for slot in 4..21 {
        let rec = record(&reader, key_of(slot));
        if slot % 2 == 0 {
            gpu.upload_record(Slot(slot), &rec).unwrap();
        } else {
            gpu.upload_staged(Slot(slot), &rec, &mut ring).unwrap();
        }
    }
    let planes = read_planes(ctx, &gpu);
    for slot in 4..21 {
        assert_slot_holds(&gpu, &planes, Slot(slot), key_of(slot), &record(&reader, key_of(slot)));
    }
    let err = gpu.upload_record(Slot(21), &record(&reader, ExpertKey::new(0, 0))).unwrap_err();
    assert!(err.to_string().contains("arena's 16"), "{err}");
    // A copy from the arena lands in its device slot; one from the device, or onto the arena, is refused.
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    gpu.copy_from_arena(&mut enc, Slot(5 + 8 + 3), Slot(2)).unwrap();
    assert!(gpu.copy_from_arena(&mut enc, Slot(1), Slot(2)).is_err());
    assert!(gpu.copy_from_arena(&mut enc, Slot(6), Slot(5)).is_err());
    ctx.queue.submit([enc.finish()]);
    let planes = read_planes(ctx, &gpu);
    let key = ExpertKey::new(1, 3);
    assert_slot_holds(&gpu, &planes, Slot(2), key, &record(&reader, key));
}

#[test]
fn records_land_in_their_slots_through_misses_and_evictions() {
    land_through_misses_and_evictions(UploadMethod::WriteBuffer, 1, true, 1);
    land_through_misses_and_evictions(UploadMethod::WriteBuffer, 1, false, 1);
}

#[test]
fn records_land_in_their_slots_through_a_staging_ring() {
    // O_DIRECT reads into an aligned buffer then copy into the ring; buffered reads go straight into it.
    // Whole records, and records in 3 pieces on 3 threads (each piece uploaded as it arrives).
    for direct in [true, false] {
        for split in [1, 3] {
            land_through_misses_and_evictions(UploadMethod::StagingRing(2), 1, direct, split);
            land_through_misses_and_evictions(UploadMethod::StagingRing(1), 1, direct, split);
        }
    }
}

#[test]
fn records_land_in_their_slots_across_pool_parts() {
    // A device whose largest buffer holds 2 slots: the 5 slots live in parts of 2, 2 and 1.
    land_through_misses_and_evictions(UploadMethod::WriteBuffer, 3, true, 1);
    land_through_misses_and_evictions(UploadMethod::StagingRing(2), 3, false, 1);
    land_through_misses_and_evictions(UploadMethod::StagingRing(2), 3, true, 2);
}

fn land_through_misses_and_evictions(method: UploadMethod, parts: usize, direct: bool, split: usize) {
    let ctx = gpu_or_skip!();
    let dir = TempDir::new("gpu-land");
    let (layers, experts, slots) = (2, 8, 5);
    let store = store(dir.path(), layers, experts, 64, 96, 7);
    let layout = store.layout().experts.clone().unwrap();
    let plane = 2 * 96 * 64;
    let max_buffer_size = if parts == 1 { ctx.limits.max_buffer_size } else { 2 * plane };
    let limits = wgpu::Limits { max_buffer_size, ..ctx.limits.clone() };
    let gpu = GpuPool::with_device(&ctx.device, &ctx.queue, &limits, &layout, slots).unwrap();
    assert_eq!(gpu.slot_bytes(Plane::GateUpQ), plane);
    assert_eq!(gpu.parts().len(), parts);
    let first = &gpu.parts()[0];
    assert_eq!(first.buffer(Plane::DownScales).size(), u64::from(first.slots()) * 64 * 96 / 16);
    let backend = GpuBackend::new(gpu, store.record_reader(direct).unwrap())
        .unwrap()
        .with_method(method)
        .with_read_split(split);
    assert_eq!(backend.method(), method);
    let mut config = PoolConfig::new(slots, layers, experts as u32);
    config.readers = 2; // fewer readers than misses, so a thread's staging is reused
    let pool = ExpertPool::new(backend, config).unwrap();

    let first = pool.ensure(0, &[6, 1, 3]).unwrap();
    pool.release(first);
    let second = pool.ensure(1, &[7, 0, 2]).unwrap(); // evicts one of layer 0's
    pool.release(second);
    let third = pool.ensure(0, &[5, 6]).unwrap();
    pool.release(third);
    pool.drain();
    let stats = pool.stats();
    assert!(stats.evictions >= 3, "{stats}");

    let reader = store.record_reader(false).unwrap();
    let gpu = pool.backend().pool();
    let planes = read_planes(ctx, gpu);
    let mut seen = HashSet::new();
    let mut checked = 0;
    for layer in 0..layers {
        for expert in 0..experts as u32 {
            let key = ExpertKey::new(layer, expert);
            let Some(slot) = pool.slot_of(key) else { continue };
            assert!(seen.insert(slot), "{slot} holds two records");
            let rec = record(&reader, key);
            assert_slot_holds(gpu, &planes, slot, key, &rec);
            checked += 1;
        }
    }
    assert_eq!(checked, slots, "every slot holds a record");
    // The records differ, so a record in the wrong slot cannot pass.
    let a = record(&reader, ExpertKey::new(0, 5));
    let b = record(&reader, ExpertKey::new(0, 6));
    assert_ne!(a, b);
}

/// A record the host tier hands off is loaded from host memory, not the disk: the slot holds the handed
/// bytes (here another record's, so that a read of the disk could not pass) and the reader read nothing;
/// a record not handed off is read as before, and a handoff serves one load only.
#[test]
fn handed_off_records_load_from_host_memory() {
    let ctx = gpu_or_skip!();
    for method in [UploadMethod::WriteBuffer, UploadMethod::StagingRing(2)] {
        let dir = TempDir::new("gpu-handoff");
        let store = store(dir.path(), 2, 8, 64, 96, 9);
        let layout = store.layout().experts.clone().unwrap();
        let gpu = GpuPool::with_device(&ctx.device, &ctx.queue, &ctx.limits, &layout, 4).unwrap();
        let handoff = Arc::new(HostHandoff::default());
        let backend = GpuBackend::new(gpu, store.record_reader(false).unwrap())
            .unwrap()
            .with_method(method)
            .with_handoff(Arc::clone(&handoff));
        let pool = ExpertPool::new(backend, PoolConfig::new(4, 2, 8)).unwrap();
        let reader = store.record_reader(false).unwrap();
        let (handed, other, read) = (ExpertKey::new(0, 3), ExpertKey::new(1, 4), ExpertKey::new(0, 5));
        let mut buf = RecordBuf::new(layout.record_bytes as usize);
        reader.read(other, &mut buf).unwrap();
        handoff.put(handed, Arc::new(buf));
        let pinned = pool.ensure(0, &[3]).unwrap();
        pool.release(pinned);
        assert_eq!(pool.backend().reader().activity().bytes, 0, "{method:?}");
        assert!(handoff.take(handed).is_none(), "a handoff serves one load");
        let pinned = pool.ensure(0, &[5]).unwrap();
        pool.release(pinned);
        pool.drain();
        assert_eq!(pool.backend().reader().activity().bytes, layout.record_bytes, "{method:?}");
        let gpu = pool.backend().pool();
        let planes = read_planes(ctx, gpu);
        let slot = pool.slot_of(handed).unwrap();
        assert_slot_holds(gpu, &planes, slot, handed, &record(&reader, other));
        assert_slot_holds(gpu, &planes, pool.slot_of(read).unwrap(), read, &record(&reader, read));
    }
}

/// Once the arena is marked filled, a load copies its record from the arena on the device, reading nothing
/// from the disk: the slot holds the arena's bytes (here another record's, so that a read of the store
/// could not pass), whether the pool uploads through a ring or with `write_buffer`; before, loads read.
#[test]
fn loads_copy_from_a_filled_arena() {
    let ctx = gpu_or_skip!();
    for method in [UploadMethod::WriteBuffer, UploadMethod::StagingRing(2)] {
        let dir = TempDir::new("gpu-arena-loads");
        let (layers, experts, slots) = (2u32, 8u32, 4usize);
        let store = store(dir.path(), layers, u64::from(experts), 64, 96, 17);
        let layout = store.layout().experts.clone().unwrap();
        let reader = store.record_reader(false).unwrap();
        let gpu = GpuPool::with_arena(ctx, &layout, slots, (layers * experts) as usize).unwrap();
        // Arena slot of (l, e) holds (l, (e + 1) % experts).
        let shifted = |k: ExpertKey| ExpertKey::new(k.layer, (k.expert + 1) % experts);
        for l in 0..layers {
            for e in 0..experts {
                let at = Slot(slots as u32 + l * experts + e);
                gpu.upload_record(at, &record(&reader, shifted(ExpertKey::new(l, e)))).unwrap();
            }
        }
        let backend = GpuBackend::new(gpu, store.record_reader(false).unwrap()).unwrap().with_method(method);
        let pool = ExpertPool::new(backend, PoolConfig::new(slots, layers, experts)).unwrap();
        let read = ExpertKey::new(0, 2);
        pool.release(pool.ensure(0, &[2]).unwrap());
        assert_eq!(pool.backend().reader().activity().bytes, layout.record_bytes, "{method:?}");
        pool.backend().pool().mark_arena_filled();
        let copied = [ExpertKey::new(1, 7), ExpertKey::new(0, 4)];
        pool.release(pool.ensure(1, &[7]).unwrap());
        pool.release(pool.ensure(0, &[4]).unwrap());
        pool.drain();
        assert_eq!(
            pool.backend().reader().activity().bytes,
            layout.record_bytes,
            "{method:?}: no more reads"
        );
        let gpu = pool.backend().pool();
        let planes = read_planes(ctx, gpu);
        assert_slot_holds(gpu, &planes, pool.slot_of(read).unwrap(), read, &record(&reader, read));
        for key in copied {
            assert_slot_holds(gpu, &planes, pool.slot_of(key).unwrap(), key, &record(&reader, shifted(key)));
        }
    }
}

#[test]
fn concurrent_uploads_each_land_in_their_slot() {
    concurrent_uploads(false);
}

#[test]
fn concurrent_staged_uploads_each_land_in_their_slot() {
    concurrent_uploads(true);
}

fn concurrent_uploads(staged: bool) {
    let ctx = gpu_or_skip!();
    let dir = TempDir::new("gpu-threads");
    let store = store(dir.path(), 1, 16, 32, 64, 11);
    let layout = store.layout().experts.clone().unwrap();
    let reader = store.record_reader(false).unwrap();
    let gpu = GpuPool::new(ctx, &layout, 16).unwrap();
    // Slot s gets expert 15 - s, four threads at once.
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (gpu, reader) = (&gpu, &reader);
            s.spawn(move || {
                let mut ring = gpu.staging_ring(2, 1);
                for slot in (t..16).step_by(4) {
                    let rec = record(reader, ExpertKey::new(0, 15 - slot));
                    if staged {
                        gpu.upload_staged(Slot(slot), &rec, &mut ring).unwrap();
                    } else {
                        gpu.upload_record(Slot(slot), &rec).unwrap();
                    }
                }
            });
        }
    });
    let planes = read_planes(ctx, &gpu);
    for slot in 0..16 {
        let key = ExpertKey::new(0, 15 - slot);
        assert_slot_holds(&gpu, &planes, Slot(slot), key, &record(&reader, key));
    }
    assert!(gpu.upload_record(Slot(16), &record(&reader, ExpertKey::new(0, 0))).is_err());
    assert!(gpu.upload_record(Slot(0), &[0; 64]).is_err());
    let mut ring = gpu.staging_ring(1, 3);
    assert!(gpu.upload_staged(Slot(16), &record(&reader, ExpertKey::new(0, 0)), &mut ring).is_err());
    assert!(gpu.upload_staged(Slot(0), &[0; 64], &mut ring).is_err());
}

#[test]
fn pools_the_device_or_kernels_cannot_hold_are_refused() {
    let ctx = gpu_or_skip!();
    let dir = TempDir::new("gpu-refuse");
    let store = store(dir.path(), 1, 4, 64, 32, 3);
    let layout = store.layout().experts.clone().unwrap();
    let plane = 2 * 32 * 64; // gate‖up int8 bytes per slot, the largest plane

    let limits = wgpu::Limits { max_buffer_size: plane - 1, ..ctx.limits.clone() };
    let err = GpuPool::with_device(&ctx.device, &ctx.queue, &limits, &layout, 10).unwrap_err();
    assert!(matches!(err, Error::SlotTooLarge { plane: "gate_up_q", .. }), "{err:?}");
    // Planes over the largest buffer are split into parts: 10 slots in parts of 3, 3, 3, 1.
    let limits = wgpu::Limits { max_buffer_size: 3 * plane + 1, ..ctx.limits.clone() };
    let split = GpuPool::with_device(&ctx.device, &ctx.queue, &limits, &layout, 10).unwrap();
    let parts: Vec<(u32, u32)> = split.parts().iter().map(|p| (p.first_slot(), p.slots())).collect();
    assert_eq!(parts, [(0, 3), (3, 3), (6, 3), (9, 1)]);

    let limits = wgpu::Limits { max_storage_buffer_binding_size: plane - 1, ..ctx.limits.clone() };
    let err = GpuPool::with_device(&ctx.device, &ctx.queue, &limits, &layout, 10).unwrap_err();
    assert!(matches!(err, Error::Unbindable { plane: "gate_up_q", .. }), "{err:?}");
    // Over one binding but splittable: fine.
    let limits = wgpu::Limits { max_storage_buffer_binding_size: 3 * plane, ..ctx.limits.clone() };
    assert!(GpuPool::with_device(&ctx.device, &ctx.queue, &limits, &layout, 10).is_ok());

    assert!(matches!(GpuPool::new(ctx, &layout, 0), Err(Error::InvalidConfig { field: "slots", .. })));

    // A reader of another shape is not this pool's.
    let other_dir = TempDir::new("gpu-refuse-other");
    let other = common::gpu::store(other_dir.path(), 1, 4, 32, 32, 3);
    let gpu = GpuPool::new(ctx, &layout, 2).unwrap();
    let err = GpuBackend::new(gpu, other.record_reader(false).unwrap()).unwrap_err();
    assert!(matches!(err, Error::BadLayout { .. }), "{err:?}");
}

/// The pool's planes are what the expert kernels read: gate‖up and down GEMVs of three picks through the
/// slot index, one dispatch per pool part (the pool split into parts of 2 slots), match the CPU reference
/// computed from the store's records.
#[test]
fn expert_kernels_read_the_pool_planes() {
    use diskformer_kernels::{ExpertPlanes, Kernels, View, cpu};
    use half::f16;
    use wgpu::util::DeviceExt;

    let ctx = gpu_or_skip!();
    let dir = TempDir::new("gpu-kernels");
    let (layers, experts, slots, h, f) = (2, 8, 5, 64u64, 96u64);
    let store = store(dir.path(), layers, experts, h, f, 21);
    let layout = store.layout().experts.clone().unwrap();
    let limits = wgpu::Limits { max_buffer_size: 2 * 2 * f * h, ..ctx.limits.clone() };
    let gpu = GpuPool::with_device(&ctx.device, &ctx.queue, &limits, &layout, slots).unwrap();
    assert_eq!(gpu.parts().len(), 3);
    let backend = GpuBackend::new(gpu, store.record_reader(false).unwrap()).unwrap();
    let pool = ExpertPool::new(backend, PoolConfig::new(slots, layers, experts as u32)).unwrap();
    let warm = pool.ensure(0, &[0, 1, 2]).unwrap(); // so the picks below do not sit in slots 0..3
    pool.release(warm);
    let ids = [6, 2, 4];
    let pinned = pool.ensure(1, &ids).unwrap();
    let slot_idx: Vec<u32> = pinned.slots().iter().map(|s| s.0).collect();
    assert_ne!(slot_idx, [0, 1, 2], "the picks should not sit in slots named like their pick order");

    let kernels = Kernels::new(ctx);
    let init = |bytes: &[u8]| {
        ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        })
    };
    let mut rng = common::gpu::Rng::new(5);
    let mut xs = |n: u64| -> Vec<f32> {
        (0..n).map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect()
    };
    let x_gate_up = xs(h); // one token, its three picks share the input
    let x_down = xs(3 * f); // one input per pick
    let slot_buf = init(bytemuck::cast_slice(&slot_idx));
    let planes = pool.backend().pool();
    let cases = [
        (Plane::GateUpQ, Plane::GateUpScales, &x_gate_up, 3, 2 * f, h),
        (Plane::DownQ, Plane::DownScales, &x_down, 1, h, f),
    ];
    let reader = store.record_reader(false).unwrap();
    for (which, (qp, sp, x, x_div, rows, cols)) in cases.into_iter().enumerate() {
        let x_buf = init(bytemuck::cast_slice(x));
        let y_buf = init(&vec![0xff; (3 * rows * 4) as usize]);
        let dispatches: Vec<_> = planes
            .parts()
            .iter()
            .map(|part| {
                let p = ExpertPlanes {
                    q: View::from(part.buffer(qp)),
                    scales: View::from(part.buffer(sp)),
                    slots: part.slots(),
                    first_slot: part.first_slot(),
                    rows: rows as u32,
                    cols: cols as u32,
                };
                kernels
                    .expert_q8_gemv(
                        p,
                        View::from(&x_buf),
                        View::from(&slot_buf),
                        View::from(&y_buf),
                        3,
                        x_div,
                    )
                    .unwrap()
            })
            .collect();
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for d in &dispatches {
                d.record(&mut pass);
            }
        }
        ctx.queue.submit([enc.finish()]);
        let y: Vec<f32> = bytemuck::pod_collect_to_vec(&read_back(ctx, &y_buf));
        let (q_plane, s_plane) = if which == 0 {
            (Plane::GateUpQ, Plane::GateUpScales)
        } else {
            (Plane::DownQ, Plane::DownScales)
        };
        for (pick, &e) in ids.iter().enumerate() {
            let rec = record(&reader, ExpertKey::new(1, e));
            let (qr, sr) = (planes.region(q_plane), planes.region(s_plane));
            let q: Vec<i8> = bytemuck::cast_slice(&rec[qr.offset as usize..qr.end() as usize]).to_vec();
            let s: Vec<f16> = bytemuck::pod_collect_to_vec(&rec[sr.offset as usize..sr.end() as usize]);
            let xt = &x[pick / x_div as usize * cols as usize..][..cols as usize];
            let want = cpu::q8_gemv(&q, &s, rows as usize, cols as usize, xt);
            let got = &y[pick * rows as usize..][..rows as usize];
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
                    "{} pick {pick} (E{e}) row {i}: gpu {g}, cpu {w}",
                    q_plane.name()
                );
            }
        }
    }
    pool.release(pinned);
}

#[test]
fn a_failed_piece_is_reported_and_the_ring_stays_usable() {
    let ctx = gpu_or_skip!();
    let dir = TempDir::new("gpu-pieces");
    let store = store(dir.path(), 1, 4, 64, 96, 5);
    let layout = store.layout().experts.clone().unwrap();
    let reader = store.record_reader(false).unwrap();
    let gpu = GpuPool::new(ctx, &layout, 4).unwrap();
    let mut ring = gpu.staging_ring(1, 3);
    let (a, b) = (ExpertKey::new(0, 2), ExpertKey::new(0, 3));
    let (rec_a, rec_b) = (record(&reader, a), record(&reader, b));
    let copy = |rec: &[u8], start: usize, dst: &mut [u8]| dst.copy_from_slice(&rec[start..start + dst.len()]);
    // The second piece fails: read ahead (one reader thread, pieces staged behind it), then all at once and
    // one after another.
    let fail_second = |start: usize, dst: &mut [u8]| -> Result<(), diskformer_expert_stream::BackendError> {
        if start > 0 {
            return Err("injected read failure".into());
        }
        copy(&rec_a, start, dst);
        Ok(())
    };
    let mut bounce = vec![0u8; rec_a.len()];
    let err = gpu.upload_read_ahead(Slot(1), &mut ring, &mut bounce, fail_second, |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    for parallel in [true, false] {
        let err = gpu.upload_pieces(Slot(1), &mut ring, parallel, fail_second).unwrap_err();
        assert!(err.to_string().contains("injected"), "{err}");
    }
    assert!(
        gpu.upload_read_ahead(Slot(0), &mut ring, &mut [0; 16], fail_second, |_, _| {}).is_err(),
        "short bounce"
    );
    assert!(gpu.upload_pieces(Slot(4), &mut ring, true, fail_second).is_err(), "slot past the pool");
    // The same ring then carries whole records both ways.
    // Each piece is seen once, in record order, as it was read.
    let mut seen = Vec::new();
    gpu.upload_read_ahead(
        Slot(1),
        &mut ring,
        &mut bounce,
        |start, dst| {
            copy(&rec_a, start, dst);
            Ok(())
        },
        |start, piece| seen.push((start, piece.to_vec())),
    )
    .unwrap();
    assert!(seen.len() > 1, "one record in {} pieces", seen.len());
    assert!(seen.windows(2).all(|w| w[0].0 + w[0].1.len() == w[1].0), "pieces in order, none skipped");
    let bytes: Vec<u8> = seen.iter().flat_map(|(_, piece)| piece.iter().copied()).collect();
    assert_eq!((seen[0].0, bytes.as_slice()), (0, &rec_a[..]), "the record's bytes, each once");
    for (slot, parallel) in [(2, true), (3, false)] {
        gpu.upload_pieces(Slot(slot), &mut ring, parallel, |start, dst| {
            copy(&rec_b, start, dst);
            Ok(())
        })
        .unwrap();
    }
    let planes = read_planes(ctx, &gpu);
    assert_slot_holds(&gpu, &planes, Slot(1), a, &rec_a);
    assert_slot_holds(&gpu, &planes, Slot(2), b, &rec_b);
    assert_slot_holds(&gpu, &planes, Slot(3), b, &rec_b);
}
