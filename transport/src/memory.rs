//! The memory behind a region: an interface to bytes someone else owns.
//!
//! A memory region is a *view*: the application (or, through the C ABI, a C program) owns
//! the bytes and the transport reaches them only through [`RegionMemory`]. Every call the
//! transport makes has already passed [`MrTable::check`](crate::mr) — key, protection
//! domain, access right and bounds — so an implementation only copies. It must still never
//! touch a byte outside `0..len()` (a bad offset is a bug in the caller, not a licence to
//! corrupt memory), which is why the methods return whether they did the copy.
//!
//! The copies go straight between a frame buffer and the application's memory: there is no
//! staging buffer in the transport.
//!
//! [`OwnedMemory`] is the safe kind every Rust user can have: a buffer moved into the
//! region, guarded by its own lock, so the application reads it after a completion without
//! taking the device's lock. Kinds that need `unsafe` (raw C memory, borrowed Rust buffers)
//! live in the `ferroce` crate; this crate stays free of `unsafe`.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use ferroce_wire::icrc_fold::{self, Fold};

/// A remote atomic operation on one naturally aligned 8-byte word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare-and-swap: store `swap` when the word equals `compare`.
    CmpSwp {
        /// The value the word must hold.
        compare: u64,
        /// The value stored when it does.
        swap: u64,
    },
    /// Fetch-and-add (wrapping).
    FetchAdd(u64),
    /// Store (an atomic write): the word becomes the value, read as the others are.
    Store(u64),
}

impl AtomicOp {
    /// The word's new value given its original one.
    pub fn apply(self, orig: u64) -> u64 {
        match self {
            AtomicOp::CmpSwp { compare, swap } if orig == compare => swap,
            AtomicOp::CmpSwp { .. } => orig,
            AtomicOp::FetchAdd(add) => orig.wrapping_add(add),
            AtomicOp::Store(v) => v,
        }
    }
}

/// Bytes a memory region is a view of.
///
/// The transport calls these with ranges it has checked against the registration; an
/// implementation copies and returns `true`, or returns `false` without touching memory
/// if the range is not inside `0..len()`. Implementations are shared between the
/// application and the driver (`Send + Sync`), so writes go through `&self`.
pub trait RegionMemory: Send + Sync + fmt::Debug {
    /// Length in bytes, fixed for the life of the registration.
    fn len(&self) -> usize;

    /// True for a zero-length region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `out.len()` bytes at `offset` into `out`.
    fn read_at(&self, offset: usize, out: &mut [u8]) -> bool;

    /// Copies `data` into the memory at `offset`.
    fn write_at(&self, offset: usize, data: &[u8]) -> bool;

    /// [`read_at`](RegionMemory::read_at) that also folds the bytes into `crc` (a finished
    /// CRC-32 of what came before) with `fold`, and returns the new CRC, or `None` without
    /// touching memory for a range outside `0..len()`. The default copies, then hashes the
    /// copy; kinds that can hand `fold` their bytes as a slice fold while copying.
    fn read_at_folding(&self, offset: usize, out: &mut [u8], crc: u32, fold: &Fold) -> Option<u32> {
        let _ = fold;
        if !self.read_at(offset, out) {
            return None;
        }
        Some(icrc_fold::continue_crc(crc, out))
    }

    /// Performs `op` on the 8 bytes at `offset`, read as a little-endian u64 (the host
    /// order of x86 and arm, where rxe accesses a native `u64`), atomically with respect
    /// to every other call on this memory; returns the original value.
    fn atomic_at(&self, offset: usize, op: AtomicOp) -> Option<u64>;
}

/// Whether `offset..offset + len` lies inside `0..size`, without overflow.
pub fn in_bounds(offset: usize, len: usize, size: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

/// A buffer the region owns, behind its own lock: the safe kind of region memory.
///
/// `B` is any byte buffer (`Vec<u8>`, `Box<[u8]>`, a memory map...); its heap allocation
/// does not move while registered, and [`OwnedMemory::into_inner`] gives it back. The lock
/// is the region's own, never the device's: an application reading its buffer after a
/// completion does not stall the driver, and a copy by the driver never tears a read.
pub struct OwnedMemory<B = Vec<u8>> {
    len: usize,
    bytes: Mutex<B>,
}

impl<B: AsRef<[u8]>> OwnedMemory<B> {
    /// Wraps `buf`; its length is the region's length.
    pub fn new(buf: B) -> Self {
        OwnedMemory {
            len: buf.as_ref().len(),
            bytes: Mutex::new(buf),
        }
    }

    /// Locks the memory for the application (the driver waits for the guard).
    pub fn lock(&self) -> MutexGuard<'_, B> {
        // A panic while the lock was held cannot leave the bytes inconsistent beyond what
        // a racing peer could: take the guard back.
        self.bytes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The buffer, once nobody else holds the memory.
    pub fn into_inner(self) -> B {
        self.bytes
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<B> fmt::Debug for OwnedMemory<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedMemory")
            .field("len", &self.len)
            .finish()
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]> + Send> RegionMemory for OwnedMemory<B> {
    fn len(&self) -> usize {
        self.len
    }

    fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        let g = self.lock();
        match g.as_ref().get(offset..offset.wrapping_add(out.len())) {
            Some(s) if in_bounds(offset, out.len(), self.len) => {
                out.copy_from_slice(s);
                true
            }
            _ => false,
        }
    }

    fn read_at_folding(&self, offset: usize, out: &mut [u8], crc: u32, fold: &Fold) -> Option<u32> {
        let g = self.lock();
        match g.as_ref().get(offset..offset.wrapping_add(out.len())) {
            Some(s) if in_bounds(offset, out.len(), self.len) => Some((fold.copy)(out, s, crc)),
            _ => None,
        }
    }

    fn write_at(&self, offset: usize, data: &[u8]) -> bool {
        let mut g = self.lock();
        if !in_bounds(offset, data.len(), self.len) {
            return false;
        }
        match g.as_mut().get_mut(offset..offset + data.len()) {
            Some(s) => {
                s.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    fn atomic_at(&self, offset: usize, op: AtomicOp) -> Option<u64> {
        let mut g = self.lock();
        if !in_bounds(offset, 8, self.len) {
            return None;
        }
        let word: &mut [u8; 8] = g.as_mut().get_mut(offset..offset + 8)?.try_into().ok()?;
        let orig = u64::from_le_bytes(*word);
        *word = op.apply(orig).to_le_bytes();
        Some(orig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_memory_refuses_ranges_outside_it() {
        let m = OwnedMemory::new(vec![0u8; 16]);
        assert!(m.write_at(12, &[1, 2, 3, 4]));
        assert!(!m.write_at(13, &[1, 2, 3, 4]));
        assert!(!m.write_at(usize::MAX, &[1]));
        let mut out = [0u8; 4];
        assert!(m.read_at(12, &mut out));
        assert_eq!(out, [1, 2, 3, 4]);
        assert!(!m.read_at(usize::MAX - 1, &mut out));
        assert!(m.read_at(16, &mut []));
        assert_eq!(m.atomic_at(9, AtomicOp::FetchAdd(1)), None);
        assert_eq!(m.atomic_at(0, AtomicOp::FetchAdd(7)), Some(0));
        assert_eq!(
            m.atomic_at(
                0,
                AtomicOp::CmpSwp {
                    compare: 7,
                    swap: 9
                }
            ),
            Some(7)
        );
        assert_eq!(&m.lock()[..8], &9u64.to_le_bytes());
        assert_eq!(m.into_inner().len(), 16);
    }
}
