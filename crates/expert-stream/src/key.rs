//! The names the pool trades in: which expert, which slot, which load.

use std::fmt;

/// One routed expert of one layer, as the store names its records.
pub use diskformer_store::ExpertKey;

/// A slot of the pool: where a record lives on the device (slot `s` of every plane starts at
/// `s × plane bytes`).
///
/// `#[repr(transparent)]`, so a `&[Slot]` can be cast to the `&[u32]` slot index the expert kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct Slot(pub u32);

impl Slot {
    /// The slot number as an index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot {}", self.0)
    }
}

/// One read-and-upload of one record into one slot; ids are never reused within a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LoadId(pub u64);
