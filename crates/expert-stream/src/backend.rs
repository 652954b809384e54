//! What the pool needs from the device side: read a record, upload it into a slot.

use crate::{BackendError, ExpertKey, Slot};

/// Moves expert records from a store into the pool's slots. [`ExpertPool`](crate::ExpertPool) calls it from
/// its reader threads, one load at a time per thread, each with the thread's own staging buffer.
///
/// A GPU backend reads with `pread` straight into mapped staging memory (a `MAP_WRITE` ring buffer) and
/// uploads with a copy into slot `s` of each plane; [`MemoryBackend`](crate::MemoryBackend) keeps records and
/// slots in RAM for tests. The pool guarantees that a slot belongs to one load from its `read` until its
/// `upload` returned: no other load reads into or uploads into it meanwhile.
pub trait Backend: Send + Sync + 'static {
    /// Per-thread scratch a record is read into and uploaded from.
    type Staging: Send + 'static;

    /// Bytes of one record; a read that returns fewer is a short read.
    fn record_bytes(&self) -> usize;

    /// A staging buffer for one reader thread (made once per thread, and again after a panic); `prefetch`
    /// for the threads that only run prefetch loads, which nothing waits for.
    fn staging(&self, prefetch: bool) -> Self::Staging;

    /// Reads record `key` into `staging` for `slot`, returning the bytes read. A backend may already copy the
    /// pieces it has read into `slot` (so that the device copy of one piece overlaps the read of the next);
    /// [`upload`](Self::upload) then finishes what is left.
    ///
    /// # Errors
    ///
    /// Any I/O failure (or a device failure while uploading pieces); the pool frees the slot and reports the
    /// record.
    fn read(&self, key: ExpertKey, slot: Slot, staging: &mut Self::Staging) -> Result<usize, BackendError>;

    /// Uploads the record in `staging` (just read) into `slot`. It may return before the device has the bytes
    /// if the device orders the copy before any later work that reads the slot (a wgpu queue does).
    ///
    /// # Errors
    ///
    /// Any device failure; the pool frees the slot and reports the record.
    fn upload(&self, slot: Slot, staging: &mut Self::Staging) -> Result<(), BackendError>;
}
