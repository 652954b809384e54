//! The GPU backend: the pool's four plane buffers on a wgpu device ([`GpuPool`]) and a [`Backend`] that reads
//! records from the store and copies them into those planes ([`GpuBackend`]).
//!
//! Plane layout (what `diskformer_kernels::ExpertPlanes` binds): the pool is one or more [`PoolPart`]s, each
//! one buffer per plane holding a run of slots; slot `s` of a part starts at `(s − first) × plane bytes per
//! slot` in its buffers:
//!
//! | plane | shape | bytes per slot |
//! |---|---|---|
//! | `gate_up_q` | `[slots, 2F, H]` int8 | `2FH` |
//! | `gate_up_scales` | `[slots, 2F, H/32]` f16 | `2FH/16` |
//! | `down_q` | `[slots, H, F]` int8 | `HF` |
//! | `down_scales` | `[slots, H, F/32]` f16 | `HF/16` |
//!
//! A store of records of blocks (a K-quant file: `ExpertLayout::blocks`) puts gate's and up's GGUF blocks in
//! `gate_up_q` (up at `RecordBlocks::up_at`) and down's in `down_q`, each of its layer's type (the expert
//! kernels read Q4_K, Q5_K and Q6_K), sized for the layer whose parts are largest; its scale planes are empty.
//!
//! A pool whose planes exceed the device's max buffer size (4 GiB on the H200: 1,364 Qwen3-30B-A3B slots)
//! is split into parts of at most that size; the expert kernels run once per part (`first_slot` in
//! `ExpertPlanes`), skipping pairs whose slot lies elsewhere. A part larger than the max storage binding
//! stays one buffer per plane: the kernels split the dispatch by slot range and bind each range at a
//! 256-byte-aligned offset (`plan_row_split` in diskformer-kernels). [`GpuPool::new`] refuses a pool where
//! that split cannot work, or a slot larger than the max buffer size.
//!
//! A pool may also have an **arena** ([`GpuPool::with_arena`]): slots past the device's, in host memory that
//! the kernels read over the bus (`Context::host_storage`), one per record of the model, filled once and
//! never evicted. A prefill chunk binds them for the experts the device slots lack instead of uploading
//! those (its GEMMs read them faster than the readers upload out of the page cache: BENCHMARKS.md); split
//! residency reads every pick the device's slots lack from them (`Placement`). The arena's parts
//! follow the device's in [`GpuPool::parts_with_arena`]; [`GpuPool::parts`] is the device's alone, which
//! one-token steps bind.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::task::{Poll, Waker};
use std::time::Instant;

use diskformer_kernels::{BlockQuant, Context};
use diskformer_store::{ExpertLayout, ExpertPart, RecordBuf, RecordHasher, RecordReader, Region, part_bytes};

use crate::staging_times::StagingClock;
use crate::{
    Backend, BackendError, Error, ExpertKey, HostHandoff, Result, Slot, SpeculativeReads, StagingTimes,
};

/// One of the four planes of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plane {
    /// Gate rows then up rows, `[2F, H]` int8 per slot.
    GateUpQ,
    /// `[2F, H/32]` f16 scales per slot.
    GateUpScales,
    /// `[H, F]` int8 per slot.
    DownQ,
    /// `[H, F/32]` f16 scales per slot.
    DownScales,
}

impl Plane {
    /// The four planes, in record order.
    pub const ALL: [Plane; 4] = [Plane::GateUpQ, Plane::GateUpScales, Plane::DownQ, Plane::DownScales];

    /// The plane's name, as in error messages and buffer labels.
    pub const fn name(self) -> &'static str {
        match self {
            Plane::GateUpQ => "gate_up_q",
            Plane::GateUpScales => "gate_up_scales",
            Plane::DownQ => "down_q",
            Plane::DownScales => "down_scales",
        }
    }

    /// Where the plane sits in a record of `layout`.
    pub fn region(self, layout: &ExpertLayout) -> Region {
        match self {
            Plane::GateUpQ => layout.gate_up_quants,
            Plane::GateUpScales => layout.gate_up_scales,
            Plane::DownQ => layout.down_quants,
            Plane::DownScales => layout.down_scales,
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// The expert slot pool on the device: [`PoolPart`]s of consecutive slots, each one storage buffer per plane.
///
/// Cheap handles (`wgpu` device, queue and buffers are reference counted), so it can live in the backend
/// while the engine binds the [`parts`](Self::parts)' buffers.
#[derive(Debug)]
pub struct GpuPool {
    device: wgpu::Device,
    queue: wgpu::Queue,
    /// The device's parts, then the arena's.
    parts: Vec<PoolPart>,
    device_parts: usize,
    regions: [Region; 4],
    slots: usize,
    arena_slots: usize,
    /// The arena holds every record (its fill done): a load copies from there ([`GpuPool::mark_arena_filled`]).
    arena_filled: std::sync::atomic::AtomicBool,
    record_bytes: usize,
    /// Where staged uploads spent their time.
    staging: StagingClock,
}

/// Slots `first..first + slots` of the pool: one buffer per plane, slot `first + i` at `i × slot bytes`.
#[derive(Debug)]
pub struct PoolPart {
    first: u32,
    slots: u32,
    buffers: [wgpu::Buffer; 4],
}

impl PoolPart {
    /// The pool slot of this part's first slot.
    pub fn first_slot(&self) -> u32 {
        self.first
    }

    /// Slots in this part.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The part's buffer of `plane`.
    pub fn buffer(&self, plane: Plane) -> &wgpu::Buffer {
        &self.buffers[plane.index()]
    }
}

impl GpuPool {
    /// Allocates the four planes for `slots` slots of records shaped by `layout` (a Q8_0 or Q4_0 store).
    ///
    /// # Errors
    ///
    /// [`Error::BadLayout`] for a layout whose regions are not Q8_0 planes of its `hidden` × `ffn`;
    /// [`Error::InvalidConfig`] for zero slots; [`Error::SlotTooLarge`] when one slot exceeds the device's
    /// `max_buffer_size`; [`Error::Unbindable`] when the expert kernels could not bind even one aligned group
    /// of slots; [`Error::Allocation`] when the device refuses the memory.
    pub fn new(ctx: &Context, layout: &ExpertLayout, slots: usize) -> Result<Self> {
        Self::with_device(&ctx.device, &ctx.queue, &ctx.limits, layout, slots)
    }

    /// [`GpuPool::new`] with an arena of `arena_slots` slots in host memory after the device's (see the
    /// module docs): slot `slots + i` is the arena's `i`th.
    ///
    /// # Errors
    ///
    /// As [`GpuPool::new`]; [`Error::InvalidConfig`] on a device without host storage buffers
    /// (`Context::host_storage`) or for more slots in all than `u32` counts; [`Error::ArenaAllocation`] when
    /// the host memory is refused.
    pub fn with_arena(
        ctx: &Context,
        layout: &ExpertLayout,
        slots: usize,
        arena_slots: usize,
    ) -> Result<Self> {
        let mut pool = Self::new(ctx, layout, slots)?;
        if arena_slots == 0 {
            return Ok(pool);
        }
        let Some(host) = ctx.host_storage_usage() else {
            return Err(Error::InvalidConfig {
                field: "arena_slots",
                reason: format!(
                    "is {arena_slots}, but {} cannot bind host memory to its kernels (no mappable primary buffers)",
                    ctx.info.name
                ),
            });
        };
        if u32::try_from(slots + arena_slots).is_err() {
            return Err(Error::InvalidConfig {
                field: "arena_slots",
                reason: format!("is {arena_slots}; with {slots} device slots that passes u32::MAX slots"),
            });
        }
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let per_part = slots_per_part(&pool.regions, &ctx.limits);
        let arena = make_parts(&ctx.device, &pool.regions, slots as u64, arena_slots as u64, per_part, host);
        if let Some(e) = ready(scope.pop()).flatten() {
            return Err(Error::ArenaAllocation {
                bytes: arena_slots as u64 * pool.regions.iter().map(|r| r.len).sum::<u64>(),
                detail: e.to_string(),
            });
        }
        pool.parts.extend(arena);
        pool.arena_slots = arena_slots;
        Ok(pool)
    }

    /// [`GpuPool::new`] on a device and queue made elsewhere, with the limits the device was created with.
    ///
    /// # Errors
    ///
    /// As [`GpuPool::new`].
    pub fn with_device(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        limits: &wgpu::Limits,
        layout: &ExpertLayout,
        slots: usize,
    ) -> Result<Self> {
        let regions = check_layout(layout)?;
        if slots == 0 || u32::try_from(slots).is_err() {
            return Err(Error::InvalidConfig {
                field: "slots",
                reason: format!("is {slots}; the GPU pool needs 1 to u32::MAX slots"),
            });
        }
        let n = slots as u64;
        let largest = regions.iter().map(|r| r.len).max().unwrap_or(1);
        if largest > limits.max_buffer_size {
            let plane = Plane::ALL[regions.iter().position(|r| r.len == largest).unwrap_or(0)];
            return Err(Error::SlotTooLarge {
                plane: plane.name(),
                bytes: largest,
                max: limits.max_buffer_size,
            });
        }
        let per_part = slots_per_part(&regions, limits).min(n);
        let align = u64::from(limits.min_storage_buffer_offset_alignment);
        let max_binding = limits.max_storage_buffer_binding_size;
        for (big, small) in [(Plane::GateUpQ, Plane::GateUpScales), (Plane::DownQ, Plane::DownScales)] {
            let (big_len, small_len) = (regions[big.index()].len, regions[small.index()].len);
            // The expert kernels split each part over bindings by slot ranges (one slot per row).
            if diskformer_kernels::plan_row_split(per_part, big_len, small_len, 1, max_binding, align)
                .is_none()
            {
                let step = diskformer_kernels::row_split_step(big_len, small_len, 1, align);
                return Err(Error::Unbindable {
                    plane: big.name(),
                    slots_per_step: step,
                    bytes: step * big_len,
                    max_binding,
                });
            }
        }

        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let parts = make_parts(device, &regions, 0, n, per_part, wgpu::BufferUsages::empty());
        if let Some(e) = ready(scope.pop()).flatten() {
            return Err(Error::Allocation {
                bytes: n * regions.iter().map(|r| r.len).sum::<u64>(),
                detail: e.to_string(),
            });
        }
        Ok(Self {
            device: device.clone(),
            queue: queue.clone(),
            device_parts: parts.len(),
            parts,
            regions,
            slots,
            arena_slots: 0,
            arena_filled: std::sync::atomic::AtomicBool::new(false),
            record_bytes: layout.record_bytes as usize,
            staging: StagingClock::default(),
        })
    }

    /// Where the uploads staged through rings spent their time, since the pool was made or
    /// [`reset_staging_times`](Self::reset_staging_times).
    pub fn staging_times(&self) -> StagingTimes {
        self.staging.times()
    }

    /// Zeroes [`staging_times`](Self::staging_times).
    pub fn reset_staging_times(&self) {
        self.staging.reset();
    }

    /// Slots on the device (the arena's not counted).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slots of the arena in host memory, numbered from [`slots`](Self::slots) on (0 without one).
    pub fn arena_slots(&self) -> usize {
        self.arena_slots
    }

    /// The device's parts, in slot order (one unless the planes exceed the device's max buffer size).
    pub fn parts(&self) -> &[PoolPart] {
        &self.parts[..self.device_parts]
    }

    /// The device's parts, then the arena's.
    pub fn parts_with_arena(&self) -> &[PoolPart] {
        &self.parts
    }

    /// The buffer of `plane` holding `slot` (a device or an arena slot), and the slot's byte offset in it.
    ///
    /// # Panics
    /// For a slot past the arena.
    pub fn locate(&self, plane: Plane, slot: Slot) -> (&wgpu::Buffer, u64) {
        let at = self.parts.partition_point(|p| p.first <= slot.0) - 1;
        let part = &self.parts[at];
        assert!(slot.0 - part.first < part.slots, "{slot} is past the pool's parts");
        (part.buffer(plane), u64::from(slot.0 - part.first) * self.slot_bytes(plane))
    }

    /// Checks that `slot` is the device's or the arena's.
    fn check_slot(&self, slot: Slot) -> Result<(), BackendError> {
        if slot.index() >= self.slots + self.arena_slots {
            return Err(format!(
                "{slot} is past the GPU pool's {} slots and its arena's {}",
                self.slots, self.arena_slots
            )
            .into());
        }
        Ok(())
    }

    /// Bytes of one slot in `plane`.
    pub fn slot_bytes(&self, plane: Plane) -> u64 {
        self.regions[plane.index()].len
    }

    /// Where `plane` sits inside a record.
    pub fn region(&self, plane: Plane) -> Region {
        self.regions[plane.index()]
    }

    /// Device bytes of all four planes.
    pub fn device_bytes(&self) -> u64 {
        planes_bytes(self.parts())
    }

    /// Host bytes of the arena's planes.
    pub fn arena_bytes(&self) -> u64 {
        planes_bytes(&self.parts[self.device_parts..])
    }

    /// Bytes of one store record (regions and padding); [`upload_record`](Self::upload_record) takes at
    /// least this many.
    pub fn record_bytes(&self) -> usize {
        self.record_bytes
    }

    /// Records into `enc` the copy of the record in arena slot `from` into device slot `to` (every plane
    /// that holds bytes), ordered after the work submitted before `enc` and before the work after.
    ///
    /// # Errors
    /// A `from` outside the arena or a `to` outside the device's slots.
    pub fn copy_from_arena(
        &self,
        enc: &mut wgpu::CommandEncoder,
        from: Slot,
        to: Slot,
    ) -> Result<(), BackendError> {
        if !(self.slots..self.slots + self.arena_slots).contains(&from.index()) || to.index() >= self.slots {
            return Err(format!(
                "a copy from {from} to {to}: the arena holds slots {}..{}, the device 0..{}",
                self.slots,
                self.slots + self.arena_slots,
                self.slots
            )
            .into());
        }
        for plane in Plane::ALL.into_iter().filter(|&p| self.slot_bytes(p) > 0) {
            let (src, src_at) = self.locate(plane, from);
            let (dst, dst_at) = self.locate(plane, to);
            enc.copy_buffer_to_buffer(src, src_at, dst, dst_at, self.slot_bytes(plane));
        }
        Ok(())
    }

    /// Marks the arena filled, every record in its slot (`slots + layer · experts + expert`): the backend's
    /// loads then copy records from there on the device's queue, with no read and no host copy (the fill
    /// checked them as it read them).
    pub fn mark_arena_filled(&self) {
        self.arena_filled.store(self.arena_slots > 0, std::sync::atomic::Ordering::Release);
    }

    /// Whether loads copy from the arena ([`GpuPool::mark_arena_filled`]).
    pub fn arena_filled(&self) -> bool {
        self.arena_filled.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until the device has finished every copy submitted so far (the arena's fill, say).
    ///
    /// # Errors
    /// The device's, when it was lost.
    pub fn wait_for_uploads(&self) -> Result<(), BackendError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("waiting for the device: {e}"))?;
        Ok(())
    }

    /// The device the planes live on.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The queue uploads go through.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Copies the four regions of `record` (one store record) into `slot` of each plane with
    /// `queue.write_buffer`, then submits so the copies start (and their staging memory is freed) without
    /// waiting for the engine's next submit. Returns before the device has the bytes; queue order puts the
    /// copies before any later submit that reads the slot. Safe to call from several threads for different
    /// slots.
    ///
    /// # Errors
    ///
    /// A slot past the pool or a record shorter than the layout's record.
    // Performance notes: on the H200 (DESIGN.md) `write_buffer` of 5 MB records ran at 3.3–5.7 GB/s from one
    // thread, a ring of mapped MAP_WRITE staging buffers + copy at 12.8 GB/s (`upload_pieces`,
    // `upload_read_ahead`).
    pub fn upload_record(&self, slot: Slot, record: &[u8]) -> Result<(), BackendError> {
        self.check_slot(slot)?;
        self.check_record(record)?;
        for plane in Plane::ALL.into_iter().filter(|&p| self.slot_bytes(p) > 0) {
            let r = self.region(plane);
            let src = &record[r.offset as usize..r.end() as usize];
            let (buffer, offset) = self.locate(plane, slot);
            self.queue.write_buffer(buffer, offset, src);
        }
        self.queue.submit([]);
        Ok(())
    }

    /// A ring of mapped `MAP_WRITE` staging buffers for one thread's uploads: `len` (at least 1) records'
    /// worth, each record in `pieces` (at least 1) buffers of whole 4 KiB pages, so that
    /// [`upload_pieces`](Self::upload_pieces) can copy a piece to the device as soon as it is written.
    pub fn staging_ring(&self, len: usize, pieces: usize) -> StagingRing {
        let (piece, pieces) = StagingRing::layout(self.record_bytes, pieces);
        let entries = (0..len.max(1) * pieces)
            .map(|_| RingEntry {
                buffer: self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("expert staging"),
                    size: piece as u64,
                    usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                }),
                state: Arc::new(AtomicU8::new(MAPPED)),
                submission: None,
            })
            .collect();
        StagingRing { entries, piece, pieces, next: 0 }
    }

    /// Uploads `record` into `slot` through the next record of `ring` (its pieces copied on as many
    /// threads). Same ordering promise as [`upload_record`](Self::upload_record).
    ///
    /// # Errors
    ///
    /// As [`upload_record`](Self::upload_record), and a staging buffer the device failed to map.
    pub fn upload_staged(
        &self,
        slot: Slot,
        record: &[u8],
        ring: &mut StagingRing,
    ) -> Result<(), BackendError> {
        self.check_record(record)?;
        self.upload_pieces(slot, ring, true, |start, dst| {
            dst.copy_from_slice(&record[start..start + dst.len()]);
            Ok(())
        })
    }

    /// Stages one record through the next record's pieces of `ring`, with `parallel` each on its own thread,
    /// else one after another on this one: waits until the piece's buffer is mapped again (its previous copy
    /// done), lets `fill(start, dst)` write record bytes `start..start + dst.len()` into its mapped memory
    /// `dst`, then copies the piece into `slot` of the planes it covers and submits at once. For fills bound
    /// by the host's copy into mapped memory (reads from the page cache). Same ordering promise as
    /// [`upload_record`](Self::upload_record).
    ///
    /// # Errors
    ///
    /// A slot past the pool, `fill`'s first error, or a staging buffer the device failed to map. A failed
    /// record may have some of its pieces in the slot.
    pub fn upload_pieces<F>(
        &self,
        slot: Slot,
        ring: &mut StagingRing,
        parallel: bool,
        fill: F,
    ) -> Result<(), BackendError>
    where
        F: Fn(usize, &mut [u8]) -> Result<(), BackendError> + Sync,
    {
        let (entries, pieces) = self.next_record(slot, ring)?;
        let fill = &fill;
        if !parallel {
            return entries.iter_mut().zip(pieces).try_for_each(|(entry, (start, len))| {
                self.stage_piece(slot, entry, start, len, |dst| fill(start, dst))
            });
        }
        let mut jobs = entries.iter_mut().zip(pieces).map(|(entry, (start, len))| {
            move || self.stage_piece(slot, entry, start, len, |dst| fill(start, dst))
        });
        let mut first = jobs.next().expect("a record has at least one piece");
        std::thread::scope(|scope| {
            let others: Vec<_> = jobs.map(|job| scope.spawn(job)).collect();
            let mut result = first();
            for handle in others {
                let piece = handle.join().unwrap_or_else(|_| Err("a staging thread panicked".into()));
                result = result.and(piece);
            }
            result
        })
    }

    /// Stages one record through the next record's pieces of `ring` as they are read: a helper thread calls
    /// `read(start, dst)` for the pieces in order, each into its part of `bounce` (at least a record long),
    /// and this thread copies each piece read into staging and into `slot` at once, so that the host and
    /// device copies of one piece overlap the read of the next while the store sees one read at a time. For
    /// O_DIRECT reads, which cannot land in mapped device memory and which some disks serve fastest one at a
    /// time. `seen(start, piece)` then takes each piece, in record order, on this thread while the next is
    /// read (a load's checksum, so that it does not wait for the last piece). Same ordering promise as
    /// [`upload_record`](Self::upload_record).
    ///
    /// # Errors
    ///
    /// A slot past the pool, a short `bounce`, `read`'s first error, or a staging buffer the device failed to
    /// map. A failed record may have some of its pieces in the slot.
    pub fn upload_read_ahead<F>(
        &self,
        slot: Slot,
        ring: &mut StagingRing,
        bounce: &mut [u8],
        read: F,
        mut seen: impl FnMut(usize, &[u8]),
    ) -> Result<(), BackendError>
    where
        F: Fn(usize, &mut [u8]) -> Result<(), BackendError> + Sync,
    {
        if bounce.len() < self.record_bytes {
            return Err(format!("a bounce buffer of {} bytes holds no record", bounce.len()).into());
        }
        let (piece, count) = (ring.piece, ring.pieces);
        let (entries, pieces) = self.next_record(slot, ring)?;
        let (tx, rx) = crossbeam_channel::bounded(count);
        std::thread::scope(|scope| {
            let read = &read;
            let bounds = pieces.clone();
            let reader = scope.spawn(move || {
                for (dst, (start, len)) in bounce.chunks_mut(piece).zip(bounds) {
                    let got = read(start, &mut dst[..len]).map(|()| &dst[..len]);
                    let failed = got.is_err();
                    // A closed channel: the stager failed and stopped listening.
                    if tx.send(got).is_err() || failed {
                        break;
                    }
                }
            });
            let mut result = Ok(());
            for (entry, (start, _)) in entries.iter_mut().zip(pieces) {
                result = rx
                    .recv()
                    .map_err(|_| BackendError::from("the record reader thread stopped"))
                    .and_then(|got| got)
                    .and_then(|src| {
                        self.stage_piece(slot, entry, start, src.len(), |dst| {
                            dst.copy_from_slice(src);
                            Ok(())
                        })?;
                        seen(start, src);
                        Ok(())
                    });
                if result.is_err() {
                    break;
                }
            }
            drop(rx);
            if reader.join().is_err() {
                result = result.and(Err("the record reader thread panicked".into()));
            }
            result
        })
    }

    /// Refuses a record shorter than the layout's.
    fn check_record(&self, record: &[u8]) -> Result<(), BackendError> {
        if record.len() < self.record_bytes {
            return Err(format!(
                "record of {} bytes, the layout's records are {}",
                record.len(),
                self.record_bytes
            )
            .into());
        }
        Ok(())
    }

    /// The next record's entries of `ring` and its pieces as (start, len) in the record; checks `slot`.
    fn next_record<'r>(
        &self,
        slot: Slot,
        ring: &'r mut StagingRing,
    ) -> Result<
        (&'r mut [RingEntry], impl Iterator<Item = (usize, usize)> + Clone + Send + use<>),
        BackendError,
    > {
        self.check_slot(slot)?;
        let (piece, pieces, n) = (ring.piece, ring.pieces, self.record_bytes);
        let at = ring.next;
        ring.next = (at + 1) % (ring.entries.len() / pieces);
        let bounds = (0..pieces).map(move |i| (i * piece, piece.min(n - i * piece)));
        Ok((&mut ring.entries[at * pieces..(at + 1) * pieces], bounds))
    }

    /// One piece of a record: waits until `entry` is mapped again, lets `fill` write record bytes
    /// `start..start + len` into it, copies them into `slot` of the planes they cover and submits.
    fn stage_piece(
        &self,
        slot: Slot,
        entry: &mut RingEntry,
        start: usize,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let started = Instant::now();
        if let Some(index) = entry.submission.take() {
            self.device
                .poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None })
                .map_err(|e| format!("waiting for an expert staging buffer: {e}"))?;
        }
        // The map callback runs in a poll after the copy finished; another thread's poll may be running it.
        while entry.state.load(Ordering::Acquire) == PENDING {
            self.device.poll(wgpu::PollType::Poll).map_err(|e| format!("polling the device: {e}"))?;
            std::thread::yield_now();
        }
        if entry.state.load(Ordering::Acquire) == FAILED {
            return Err("the device failed to map an expert staging buffer".into());
        }
        let mapped_at = Instant::now();
        {
            let mut view = entry
                .buffer
                .get_mapped_range_mut(..)
                .map_err(|e| format!("expert staging buffer not mapped: {e}"))?;
            let mut whole = view.slice(..);
            let mapped = whole.len();
            // SAFETY: the mapping is valid for writes of `mapped` bytes while `view` lives, and nothing else
            // touches it meanwhile. wgpu hands out write-only access because the memory may be
            // write-combining (slow to read, never wrong); `fill` only writes it (a `pread`'s kernel copy, or
            // `copy_from_slice`).
            let dst = unsafe { std::slice::from_raw_parts_mut(whole.as_raw_element_ptr().as_ptr(), mapped) };
            fill(&mut dst[..len])?;
        }
        entry.buffer.unmap();
        let filled_at = Instant::now();
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("expert upload") });
        let (lo, hi) = (start as u64, (start + len) as u64);
        for plane in Plane::ALL {
            let r = self.region(plane);
            let (from, to) = (lo.max(r.offset), hi.min(r.end()));
            if from < to {
                let (buffer, offset) = self.locate(plane, slot);
                enc.copy_buffer_to_buffer(
                    &entry.buffer,
                    from - lo,
                    buffer,
                    offset + from - r.offset,
                    to - from,
                );
            }
        }
        entry.submission = Some(self.queue.submit([enc.finish()]));
        self.staging.add(mapped_at - started, filled_at - mapped_at, filled_at.elapsed());
        entry.state.store(PENDING, Ordering::Release);
        let state = Arc::clone(&entry.state);
        entry.buffer.map_async(wgpu::MapMode::Write, .., move |r| {
            state.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
        });
        Ok(())
    }
}

const PENDING: u8 = 0;
const MAPPED: u8 = 1;
const FAILED: u8 = 2;

/// Parts of at most `per_part` slots for slots `first..first + n`, each plane a storage buffer with `extra`
/// usage besides (`MAP_READ` puts the arena in host memory).
fn make_parts(
    device: &wgpu::Device,
    regions: &[Region; 4],
    first: u64,
    n: u64,
    per_part: u64,
    extra: wgpu::BufferUsages,
) -> Vec<PoolPart> {
    (0..n.div_ceil(per_part))
        .map(|i| {
            let count = per_part.min(n - i * per_part);
            let buffers = Plane::ALL.map(|plane| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(plane.name()),
                    // Records of blocks leave the scale planes empty: a word keeps the buffer valid.
                    size: (count * regions[plane.index()].len).max(4),
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_DST
                        | wgpu::BufferUsages::COPY_SRC
                        | extra,
                    mapped_at_creation: false,
                })
            });
            PoolPart { first: (first + i * per_part) as u32, slots: count as u32, buffers }
        })
        .collect()
}

/// How many slots a part holds on a device of `limits`: as many as the largest plane's buffer allows.
fn slots_per_part(regions: &[Region; 4], limits: &wgpu::Limits) -> u64 {
    let largest = regions.iter().map(|r| r.len).max().unwrap_or(1).max(1);
    limits.max_buffer_size / largest
}

/// Bytes of the planes of `parts`.
fn planes_bytes(parts: &[PoolPart]) -> u64 {
    parts.iter().flat_map(|p| p.buffers.iter().map(wgpu::Buffer::size)).sum()
}

/// One thread's ring of mapped staging buffers for [`GpuPool::upload_pieces`] and
/// [`GpuPool::upload_read_ahead`]: records of `pieces` buffers.
#[derive(Debug)]
pub struct StagingRing {
    entries: Vec<RingEntry>,
    /// Bytes of each buffer (the last piece of a record may use fewer).
    piece: usize,
    /// Buffers per record.
    pieces: usize,
    /// The record the next upload uses.
    next: usize,
}

impl StagingRing {
    /// Bytes of each staging buffer when records of `record_bytes` are staged in `pieces` pieces: whole 4 KiB
    /// pages, so that O_DIRECT can read each piece on its own.
    pub fn piece_bytes(record_bytes: usize, pieces: usize) -> usize {
        diskformer_store::part_bytes(record_bytes, pieces)
    }

    /// Mapped staging bytes of a ring of `len` records in `pieces` pieces (what it takes from the budget).
    pub fn bytes(record_bytes: usize, len: usize, pieces: usize) -> u64 {
        let (piece, per_record) = Self::layout(record_bytes, pieces);
        (len.max(1) * per_record * piece) as u64
    }

    /// The bytes of each buffer and the buffers a record takes (`pieces` asked, fewer when whole pages
    /// leave nothing for the last): what [`GpuPool::staging_ring`] allocates and [`StagingRing::bytes`]
    /// counts.
    fn layout(record_bytes: usize, pieces: usize) -> (usize, usize) {
        let piece = Self::piece_bytes(record_bytes, pieces);
        (piece, record_bytes.div_ceil(piece))
    }
}

#[derive(Debug)]
struct RingEntry {
    buffer: wgpu::Buffer,
    /// `PENDING` after a copy was submitted, `MAPPED` once mapped again, `FAILED` if the map failed.
    state: Arc<AtomicU8>,
    /// The submission that copies out of the buffer, until waited for.
    submission: Option<wgpu::SubmissionIndex>,
}

/// How [`GpuBackend`] moves a record from host memory into the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UploadMethod {
    /// [`GpuPool::upload_record`]: `queue.write_buffer` per plane (wgpu stages each write itself).
    #[default]
    WriteBuffer,
    /// Each reader thread's ring of mapped staging buffers for this many records: a record is read into it
    /// (through a bounce buffer with O_DIRECT) and copied to the device piece by piece
    /// ([`GpuBackend::with_read_split`]).
    StagingRing(usize),
}

/// The [`Backend`] of the GPU pool: reads records with the store's [`RecordReader`] (`pread`, O_DIRECT when
/// the reader was opened so) and uploads them: into mapped staging memory piece by piece with
/// [`GpuPool::upload_pieces`] or [`GpuPool::upload_read_ahead`] ([`UploadMethod::StagingRing`]), or into a
/// per-thread aligned buffer then [`GpuPool::upload_record`] ([`UploadMethod::WriteBuffer`]). A reader
/// that checks reads ([`RecordReader::with_checks`]) has each record checked before its load completes.
#[derive(Debug)]
pub struct GpuBackend {
    pool: GpuPool,
    /// Shared with the speculative reads, so that its activity counts every read of the disk.
    reader: Arc<RecordReader>,
    method: UploadMethod,
    read_split: usize,
    /// Page-cache loads running now (their pieces go on threads of their own only while few run).
    page_cache_loads: AtomicUsize,
    /// Guessed records read into host memory ahead of demand ([`GpuBackend::with_speculation`]).
    speculation: Option<SpeculativeReads>,
    /// Records the host tier hands to loads ([`GpuBackend::with_handoff`]).
    handoff: Option<Arc<HostHandoff>>,
}

/// Page-cache loads that may each put their pieces on threads of their own; past this many at once (a
/// prefill's burst of misses) the loads already keep the cores busy and more threads only add switching.
const PARALLEL_LOADS: usize = 2;

/// Bytes a checked load from the page cache reads, hashes and copies at a time: small enough to stay in a
/// core's cache between the three.
const CHECK_CHUNK: usize = 128 << 10;

impl GpuBackend {
    /// A backend filling `pool` from `reader`.
    ///
    /// # Errors
    ///
    /// [`Error::BadLayout`] when the reader's record layout is not the one the pool was made for.
    pub fn new(pool: GpuPool, reader: RecordReader) -> Result<Self> {
        let regions = Plane::ALL.map(|p| p.region(reader.layout()));
        if regions != pool.regions || reader.layout().record_bytes as usize != pool.record_bytes {
            return Err(Error::BadLayout {
                reason: format!(
                    "the store's records ({} bytes, regions {regions:?}) are not those the pool was made for \
                     ({} bytes, regions {:?})",
                    reader.layout().record_bytes,
                    pool.record_bytes,
                    pool.regions
                ),
            });
        }
        Ok(Self {
            pool,
            reader: Arc::new(reader),
            method: UploadMethod::default(),
            read_split: 1,
            page_cache_loads: AtomicUsize::new(0),
            speculation: None,
            handoff: None,
        })
    }

    /// Reads, stages and uploads each record as `parts` pieces of whole 4 KiB pages (default 1) with
    /// [`UploadMethod::StagingRing`], each piece copied to the device as soon as it is staged: through the page
    /// cache the pieces are read on as many threads at once while at most two such loads run, one after
    /// another beyond ([`GpuPool::upload_pieces`]: the copy out of the page cache is the bound); with O_DIRECT
    /// one after another, each staged and uploaded while the next is read ([`GpuPool::upload_read_ahead`]).
    /// Demand misses only: prefetch loads read whole records.
    pub fn with_read_split(mut self, parts: usize) -> Self {
        self.read_split = parts.max(1);
        self
    }

    /// Uses `method` for uploads (the default is [`UploadMethod::WriteBuffer`]).
    pub fn with_method(mut self, method: UploadMethod) -> Self {
        self.method = method;
        self
    }

    /// Reads guessed records ([`SpeculativeReads`], `buffers` of host memory, each guess read in `parts`
    /// pieces of whole pages) through this backend's reader, and stages a load from there when the record
    /// was guessed (waiting for the guess's read if it runs); every other load's read is a demand read,
    /// which guesses wait for.
    ///
    /// # Errors
    ///
    /// As [`SpeculativeReads::new`].
    pub fn with_speculation(mut self, buffers: usize, parts: usize) -> Result<Self> {
        let reader = Arc::clone(&self.reader);
        let read = Arc::new(move |key, start, dst: &mut [u8]| {
            let len = dst.len();
            reader.read_part_into(key, start, dst, len).map_err(Into::into)
        });
        let record = self.pool.record_bytes;
        self.speculation = Some(SpeculativeReads::new(read, record, buffers, part_bytes(record, parts))?);
        Ok(self)
    }

    /// Loads a record offered in `handoff` (by the host tier, which holds it) from there instead of the
    /// disk.
    pub fn with_handoff(mut self, handoff: Arc<HostHandoff>) -> Self {
        self.handoff = Some(handoff);
        self
    }

    /// The speculative reads, if any.
    pub fn speculation(&self) -> Option<&SpeculativeReads> {
        self.speculation.as_ref()
    }

    /// The upload method.
    pub fn method(&self) -> UploadMethod {
        self.method
    }

    /// The device pool (its buffers are what the expert kernels bind).
    pub fn pool(&self) -> &GpuPool {
        &self.pool
    }

    /// The record reader.
    pub fn reader(&self) -> &RecordReader {
        &self.reader
    }

    /// The arena slot that holds `key`'s record: `slots + layer · experts + expert`, the arena's records in
    /// the store's order (`None` past the arena, or without one).
    pub fn arena_slot(&self, key: ExpertKey) -> Option<Slot> {
        let record = u64::from(key.layer) * u64::from(self.reader.layout().n_experts) + u64::from(key.expert);
        (record < self.pool.arena_slots as u64).then(|| Slot((self.pool.slots as u64 + record) as u32))
    }

    /// Stages a record that a host copy fills (from the page cache or host memory) through `ring`'s pieces:
    /// at once while few such loads run, one after another in a burst.
    fn host_copy_pieces<F>(&self, slot: Slot, ring: &mut StagingRing, fill: F) -> Result<(), BackendError>
    where
        F: Fn(usize, &mut [u8]) -> Result<(), BackendError> + Sync,
    {
        let running = self.page_cache_loads.fetch_add(1, Ordering::Relaxed);
        let result = self.pool.upload_pieces(slot, ring, running < PARALLEL_LOADS, fill);
        self.page_cache_loads.fetch_sub(1, Ordering::Relaxed);
        result
    }

    /// Stages a record already in host memory (handed off or guessed): into the record buffer, or through
    /// `ring`'s pieces, a copy out of host memory as from the page cache.
    fn stage_from_host(
        &self,
        slot: Slot,
        record: &mut RecordBuf,
        ring: &mut Option<StagingRing>,
        held: &[u8],
    ) -> Result<(), BackendError> {
        match ring {
            None => record.as_mut_slice()[..self.pool.record_bytes].copy_from_slice(held),
            Some(ring) => self.copy_pieces(slot, ring, held)?,
        }
        Ok(())
    }

    /// Stages `record`, in host memory, through `ring`'s pieces.
    fn copy_pieces(&self, slot: Slot, ring: &mut StagingRing, record: &[u8]) -> Result<(), BackendError> {
        self.host_copy_pieces(slot, ring, |start, dst| {
            dst.copy_from_slice(&record[start..start + dst.len()]);
            Ok(())
        })
    }
}

/// One reader thread's staging of [`GpuBackend`]: an O_DIRECT-aligned record buffer (what a record is read
/// into, or with [`UploadMethod::StagingRing`] and O_DIRECT the bounce buffer of its pieces), and the thread's
/// ring of mapped staging buffers with [`UploadMethod::StagingRing`].
#[derive(Debug)]
pub struct GpuStaging {
    record: RecordBuf,
    ring: Option<StagingRing>,
    /// The last `read` copied its record from the arena: nothing to upload.
    from_arena: bool,
}

impl GpuStaging {
    /// The record buffer: the bytes last read with [`UploadMethod::WriteBuffer`] (a whole record, padded to
    /// the alignment).
    pub fn bytes(&self) -> &[u8] {
        self.record.as_slice()
    }
}

impl Backend for GpuBackend {
    type Staging = GpuStaging;

    fn record_bytes(&self) -> usize {
        self.pool.record_bytes
    }

    fn staging(&self, prefetch: bool) -> GpuStaging {
        // Prefetch loads keep whole records: nothing waits for them, and their many pieces' submits would
        // compete with the engine's.
        let pieces = if prefetch { 1 } else { self.read_split };
        let ring = match self.method {
            UploadMethod::WriteBuffer => None,
            UploadMethod::StagingRing(len) => Some(self.pool.staging_ring(len, pieces)),
        };
        GpuStaging { record: RecordBuf::new(self.pool.record_bytes), ring, from_arena: false }
    }

    fn read(&self, key: ExpertKey, slot: Slot, staging: &mut GpuStaging) -> Result<usize, BackendError> {
        let GpuStaging { record, ring, from_arena } = staging;
        *from_arena = self.pool.arena_filled();
        if *from_arena {
            let from = self.arena_slot(key).ok_or_else(|| format!("{key} is past the arena"))?;
            let mut enc = self.pool.device.create_command_encoder(&Default::default());
            self.pool.copy_from_arena(&mut enc, from, slot)?;
            self.pool.queue.submit([enc.finish()]);
            return Ok(self.pool.record_bytes);
        }
        if let Some(held) = self.handoff.as_ref().and_then(|h| h.take(key)) {
            self.stage_from_host(slot, record, ring, &held.as_slice()[..self.pool.record_bytes])?;
            return Ok(self.pool.record_bytes);
        }
        let speculation = self.speculation.as_ref();
        // A guess whose bytes do not match its checksum is read again on demand (checked again there).
        if let Some(held) =
            speculation.and_then(|s| s.take(key)).filter(|h| self.reader.matches(key, h.bytes()))
        {
            self.stage_from_host(slot, record, ring, held.bytes())?;
            return Ok(self.pool.record_bytes);
        }
        let _demand = speculation.map(SpeculativeReads::demand);
        let Some(ring) = ring else {
            self.reader.read(key, record)?;
            return Ok(self.pool.record_bytes);
        };
        let reader = &self.reader;
        let read = |start: usize, dst: &mut [u8]| -> Result<(), BackendError> {
            Ok(reader.read_part_into(key, start, dst, dst.len())?)
        };
        if reader.is_direct() {
            // O_DIRECT cannot read into mapped device memory: the pieces land in the record buffer, one read
            // at a time, each staged, uploaded and (with checks) hashed while the next is read; the check
            // completes before the load does (a slot is used only then), and a record that does not match is
            // read again once.
            reader.with_reread(key, || {
                let mut hasher = reader.hasher(key);
                self.pool.upload_read_ahead(slot, ring, record.as_mut_slice(), read, |start, piece| {
                    if let Some(h) = hasher.as_mut() {
                        h.update(start, piece);
                    }
                })?;
                Ok::<_, BackendError>(hasher.as_ref().is_none_or(RecordHasher::matches))
            })?;
        } else if reader.checks_reads() {
            // Through the page cache, checked: each piece read 128 KiB at a time through a bounce buffer that
            // stays in the CPU's cache, hashed there and copied on into mapped staging memory
            // (`read_part_hashed`), so that the record crosses memory once, as an unchecked load's does. The
            // pieces go in record order, as the hash takes them; the check completes before the load does.
            reader.with_reread(key, || {
                let chunk = CHECK_CHUNK.min(record.as_slice().len());
                let hasher = reader.hasher(key).expect("reads are checked");
                let state = std::sync::Mutex::new((hasher, &mut record.as_mut_slice()[..chunk]));
                self.pool.upload_pieces(slot, ring, false, |start, dst| {
                    let mut state = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let (hasher, bounce) = &mut *state;
                    Ok(reader.read_part_hashed(key, start, dst, bounce, hasher)?)
                })?;
                let (hasher, _) = state.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok::<_, BackendError>(hasher.matches())
            })?;
        } else {
            // Through the page cache, straight into mapped staging memory (one host copy).
            self.host_copy_pieces(slot, ring, read)?;
        }
        Ok(self.pool.record_bytes)
    }

    fn upload(&self, slot: Slot, staging: &mut GpuStaging) -> Result<(), BackendError> {
        match &staging.ring {
            // `read` copied the record from the arena.
            _ if staging.from_arena => Ok(()),
            None => self.pool.upload_record(slot, staging.record.as_slice()),
            // `read` copied each piece to the device as it arrived.
            Some(_) => Ok(()),
        }
    }
}

/// Checks that `layout` holds Q8_0 or Q4_0 planes, or blocks of the types the expert kernels read, returning
/// the four regions.
fn check_layout(layout: &ExpertLayout) -> Result<[Region; 4]> {
    let bad = |reason: String| Err(Error::BadLayout { reason });
    if layout.blocks.is_some() {
        return check_blocks(layout);
    }
    // Quant-plane bytes per value ×2: Q8_0 one byte a value, Q4_0 half a byte; both one f16 scale per 32.
    let twice_bytes_per_value = match layout.quant_type.as_str() {
        "q8_0" => 2,
        "q4_0" => 1,
        other => return bad(format!("quant type {other:?}; the expert kernels read q8_0 and q4_0")),
    };
    let (h, f) = (layout.hidden, layout.ffn);
    if h == 0 || f == 0 || !h.is_multiple_of(32) || !f.is_multiple_of(32) {
        return bad(format!("hidden {h} and ffn {f} must be non-zero multiples of 32"));
    }
    let q = |values: u64| values * twice_bytes_per_value / 2;
    let want = [q(2 * f * h), 2 * f * h / 16, q(h * f), h * f / 16];
    let regions = Plane::ALL.map(|p| p.region(layout));
    for ((plane, region), want) in Plane::ALL.into_iter().zip(regions).zip(want) {
        if region.len != want {
            return bad(format!(
                "{} is {} bytes, expected {want} for hidden {h}, ffn {f}",
                plane.name(),
                region.len
            ));
        }
        if region.end() > layout.record_bytes {
            return bad(format!(
                "{} ends at {}, past the {}-byte record",
                plane.name(),
                region.end(),
                layout.record_bytes
            ));
        }
    }
    Ok(regions)
}

/// [`check_layout`] for records of blocks: every layer's gate, up and down of a type the expert kernels
/// read ([`BlockQuant`]), inside its region. The scale planes are empty.
fn check_blocks(layout: &ExpertLayout) -> Result<[Region; 4]> {
    let regions = Plane::ALL.map(|p| p.region(layout));
    for layer in 0..layout.n_layers {
        for (part, within) in
            [(ExpertPart::Gate, regions[0]), (ExpertPart::Up, regions[0]), (ExpertPart::Down, regions[2])]
        {
            let Some((ty, r)) = layout.part(layer, part) else {
                return Err(Error::BadLayout {
                    reason: format!("layer {layer} has no {} type", part.name()),
                });
            };
            if BlockQuant::from_name(ty.name()).is_none() {
                return Err(Error::BadLayout {
                    reason: format!(
                        "blk.{layer}.ffn_{}_exps is {}; the GPU expert kernels read the block types of BlockQuant \
                         (and Q8_0 or Q4_0 experts of one type throughout)",
                        part.name(),
                        ty.name()
                    ),
                });
            }
            if r.offset < within.offset || r.end() > within.end() || within.end() > layout.record_bytes {
                return Err(Error::BadLayout {
                    reason: format!("layer {layer}'s {} blocks {r:?} lie outside {within:?}", part.name()),
                });
            }
        }
    }
    Ok(regions)
}

/// The value of a future that is already ready (wgpu's native error scopes resolve at once), else `None`.
fn ready<T>(fut: impl Future<Output = T>) -> Option<T> {
    let mut cx = std::task::Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(h: u64, f: u64) -> ExpertLayout {
        ExpertLayout::new(diskformer_gguf::TensorType::Q8_0, 2, 4, h, f)
    }

    #[test]
    fn qwen_layouts_pass_and_others_are_refused() {
        let l = layout(2048, 768);
        assert_eq!(l.record_bytes, 5_013_504);
        assert!(check_layout(&l).is_ok());
        let q4 = ExpertLayout::new(diskformer_gguf::TensorType::Q4_0, 2, 4, 2048, 768);
        assert_eq!(check_layout(&q4).unwrap()[0].len, 2 * 768 * 2048 / 2);
        // A Q8_0-sized record labelled q4_0 has the wrong plane sizes.
        let mislabelled = ExpertLayout { quant_type: "q4_0".into(), ..l.clone() };
        assert!(matches!(check_layout(&mislabelled), Err(Error::BadLayout { .. })));
        let q5 = ExpertLayout { quant_type: "q5_0".into(), ..l.clone() };
        assert!(matches!(check_layout(&q5), Err(Error::BadLayout { .. })));
        let short =
            ExpertLayout { down_scales: Region { offset: l.down_scales.offset, len: 4 }, ..l.clone() };
        assert!(matches!(check_layout(&short), Err(Error::BadLayout { .. })));
        let past = ExpertLayout { record_bytes: l.down_scales.offset, ..l };
        assert!(matches!(check_layout(&past), Err(Error::BadLayout { .. })));
    }
}
