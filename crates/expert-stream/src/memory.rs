//! [`MemoryBackend`]: records and slots in RAM, with hooks to hold, fail or watch loads (for tests and the
//! simulator).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::{Backend, BackendError, ExpertKey, Slot};

/// A fault to inject into the next read of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The read returns an I/O error.
    ReadError,
    /// The read returns this many bytes.
    Short(usize),
    /// The upload returns an error.
    UploadError,
    /// The read panics.
    Panic,
}

/// What a [`MemoryBackend`] reports on its [`events`](MemoryBackend::events) channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A read of the record began (before any [`hold`](MemoryBackend::hold) on it).
    ReadStarted(ExpertKey),
    /// The record was copied into the slot.
    Uploaded(ExpertKey, Slot),
}

/// Opens a held read when dropped or [`open`](Gate::open)ed.
#[derive(Debug)]
pub struct Gate(#[allow(dead_code)] Sender<()>);

impl Gate {
    /// Lets the held read go on.
    pub fn open(self) {}
}

/// Staging of [`MemoryBackend`]: the record last read.
#[derive(Debug, Default)]
pub struct MemoryStaging {
    key: Option<ExpertKey>,
    bytes: Vec<u8>,
}

/// An in-memory [`Backend`]: record `(layer, expert)` is [`MemoryBackend::record`], and the "device" is one
/// byte vector of `slots × record_bytes`.
///
/// Tests control ordering with [`hold`](Self::hold) (a read waits for its gate) and [`events`](Self::events)
/// (a channel that says when reads start and uploads land), never with sleeps; [`fail_next`](Self::fail_next)
/// injects faults and [`with_read_delay`](Self::with_read_delay) mimics a disk for demos.
#[derive(Debug)]
pub struct MemoryBackend {
    experts: u32,
    record_bytes: usize,
    device: Mutex<Vec<u8>>,
    reads: Mutex<HashMap<ExpertKey, u32>>,
    uploads: AtomicU64,
    faults: Mutex<HashMap<ExpertKey, Fault>>,
    gates: Mutex<HashMap<ExpertKey, Receiver<()>>>,
    events: Mutex<Option<Sender<Event>>>,
    read_delay: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryBackend {
    /// A backend for `experts` experts per layer, records of `record_bytes` (at least 4), and `slots` slots.
    pub fn new(experts: u32, record_bytes: usize, slots: usize) -> Self {
        assert!(record_bytes >= 4, "records hold their key index in the first 4 bytes");
        Self {
            experts,
            record_bytes,
            device: Mutex::new(vec![0; slots * record_bytes]),
            reads: Mutex::default(),
            uploads: AtomicU64::new(0),
            faults: Mutex::default(),
            gates: Mutex::default(),
            events: Mutex::default(),
            read_delay: Duration::ZERO,
        }
    }

    /// Makes every read sleep `delay` (for demos; tests order events with [`hold`](Self::hold) instead).
    pub fn with_read_delay(mut self, delay: Duration) -> Self {
        self.read_delay = delay;
        self
    }

    /// The bytes of record `key`: its index `layer × experts + expert` as a little-endian `u32`, then a
    /// pattern that depends on the index and the position.
    pub fn record(&self, key: ExpertKey) -> Vec<u8> {
        let index = key.layer * self.experts + key.expert;
        let mut bytes = vec![0; self.record_bytes];
        bytes[..4].copy_from_slice(&index.to_le_bytes());
        for (i, b) in bytes.iter_mut().enumerate().skip(4) {
            *b = (index as usize).wrapping_mul(131).wrapping_add(i.wrapping_mul(7)) as u8;
        }
        bytes
    }

    /// What slot `slot` of the device holds now.
    pub fn slot_bytes(&self, slot: Slot) -> Vec<u8> {
        let start = slot.index() * self.record_bytes;
        lock(&self.device)[start..start + self.record_bytes].to_vec()
    }

    /// How many times record `key` was read.
    pub fn reads(&self, key: ExpertKey) -> u32 {
        lock(&self.reads).get(&key).copied().unwrap_or(0)
    }

    /// Reads of all records.
    pub fn total_reads(&self) -> u64 {
        lock(&self.reads).values().map(|&n| u64::from(n)).sum()
    }

    /// Uploads done.
    pub fn uploads(&self) -> u64 {
        self.uploads.load(Ordering::Relaxed)
    }

    /// Makes the next read of `key` wait until the returned gate opens (or is dropped).
    pub fn hold(&self, key: ExpertKey) -> Gate {
        let (tx, rx) = crossbeam_channel::bounded(1);
        lock(&self.gates).insert(key, rx);
        Gate(tx)
    }

    /// Makes the next load of `key` fail with `fault`.
    pub fn fail_next(&self, key: ExpertKey, fault: Fault) {
        lock(&self.faults).insert(key, fault);
    }

    /// A channel reporting every read start and upload from now on (replacing any earlier channel).
    pub fn events(&self) -> Receiver<Event> {
        let (tx, rx) = crossbeam_channel::unbounded();
        *lock(&self.events) = Some(tx);
        rx
    }

    fn emit(&self, event: Event) {
        if let Some(tx) = &*lock(&self.events) {
            let _ = tx.send(event);
        }
    }
}

impl Backend for MemoryBackend {
    type Staging = MemoryStaging;

    fn record_bytes(&self) -> usize {
        self.record_bytes
    }

    fn staging(&self, _prefetch: bool) -> MemoryStaging {
        MemoryStaging::default()
    }

    fn read(&self, key: ExpertKey, _slot: Slot, staging: &mut MemoryStaging) -> Result<usize, BackendError> {
        self.emit(Event::ReadStarted(key));
        let gate = lock(&self.gates).remove(&key);
        if let Some(gate) = gate {
            // Opened by a send or by dropping the gate; either way the read goes on.
            let _ = gate.recv();
        }
        if !self.read_delay.is_zero() {
            std::thread::sleep(self.read_delay);
        }
        *lock(&self.reads).entry(key).or_default() += 1;
        let fault = lock(&self.faults).get(&key).copied();
        staging.key = Some(key);
        staging.bytes = self.record(key);
        match fault {
            Some(Fault::ReadError) => {
                lock(&self.faults).remove(&key);
                Err(std::io::Error::other(format!("injected read error on {key}")).into())
            }
            Some(Fault::Short(n)) => {
                lock(&self.faults).remove(&key);
                staging.bytes.truncate(n);
                Ok(n.min(self.record_bytes))
            }
            Some(Fault::Panic) => {
                lock(&self.faults).remove(&key);
                panic!("injected panic reading {key}")
            }
            Some(Fault::UploadError) | None => Ok(self.record_bytes),
        }
    }

    fn upload(&self, slot: Slot, staging: &mut MemoryStaging) -> Result<(), BackendError> {
        let key = staging.key.expect("upload follows a read");
        if lock(&self.faults).get(&key) == Some(&Fault::UploadError) {
            lock(&self.faults).remove(&key);
            return Err(format!("injected upload error on {key}").into());
        }
        let start = slot.index() * self.record_bytes;
        lock(&self.device)[start..start + self.record_bytes].copy_from_slice(&staging.bytes);
        self.uploads.fetch_add(1, Ordering::Relaxed);
        self.emit(Event::Uploaded(key, slot));
        Ok(())
    }
}
