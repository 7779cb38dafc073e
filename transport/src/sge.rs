//! How work requests name memory: protection domains and scatter/gather elements.
//!
//! A leaf module: the memory-region table checks SGEs against PDs and the verbs
//! vocabulary puts them in work requests; neither needs to import the other for them.

/// Protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// A scatter/gather element: `length` bytes at `addr` in the region of `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Start address, in the region's iova space.
    pub addr: u64,
    /// Bytes from `addr`.
    pub length: u32,
    /// Local key of the region holding the bytes.
    pub lkey: u32,
}
