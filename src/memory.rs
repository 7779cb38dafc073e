//! Region memory that needs `unsafe`: raw (address, length) memory for the C ABI and
//! borrowed Rust buffers. This module is the only place outside the link layer where
//! ferroce dereferences a pointer it did not allocate.
//!
//! The transport sees both through [`RegionMemory`]: it calls them only with ranges it has
//! checked against the registration, and [`RawMemory`] checks them again so that no caller
//! bug can reach outside `ptr..ptr + len`.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ferroce_transport::{in_bounds, AtomicOp, RegionMemory};
use ferroce_wire::icrc_fold::Fold;

/// `len` bytes at `ptr` that someone else owns: a C program's buffer (`ibv_reg_mr`) or a
/// Rust buffer borrowed for a [`scope`](crate::verbs::ProtectionDomain::scope).
///
/// Every access ferroce makes goes through one lock of this memory's own, so the driver's
/// copies never race each other or a Rust caller's copies through
/// [`RawMemory::read_at`]/[`RawMemory::write_at`]. A C program that touches its buffer while
/// an operation on it is in flight gets what it gets on any RDMA device: the bytes are
/// unspecified, but nothing outside the buffer is touched.
pub struct RawMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// Serialises every access; `false` once [`RawMemory::revoke`] ran.
    live: Mutex<bool>,
}

// SAFETY: `RawMemory` is a pointer and a length; the contract of `RawMemory::new` makes the
// memory valid for reads and writes from any thread for as long as the value lives, and
// every access is serialised by `live`.
unsafe impl Send for RawMemory {}
// SAFETY: as for `Send`: shared references only reach the memory under `live`.
unsafe impl Sync for RawMemory {}

impl RawMemory {
    /// Wraps `len` bytes at `ptr`. A null `ptr` is accepted only with `len == 0`.
    ///
    /// # Safety
    /// Until [`RawMemory::revoke`] has returned (or the value is dropped), `ptr..ptr +
    /// len` must be one allocation that stays valid for reads and writes, is not freed or
    /// unmapped, and is not accessed through a Rust reference by anyone else. Owners keep
    /// this by deregistering the region and revoking the memory before it goes away.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Option<RawMemory> {
        let ptr = match NonNull::new(ptr) {
            Some(p) => p,
            None if len == 0 => NonNull::dangling(),
            None => return None,
        };
        // A range that wraps the address space cannot be one allocation.
        (ptr.as_ptr() as usize).checked_add(len)?;
        Some(RawMemory {
            ptr,
            len,
            live: Mutex::new(true),
        })
    }

    /// Ends all access: every later call fails without touching memory. The owner calls
    /// this before the memory goes away, so even a reference kept by mistake (a clone of
    /// the `Arc`) cannot reach it afterwards. Waits for a copy in progress.
    pub fn revoke(&self) {
        *self.enter() = false;
    }

    fn enter(&self) -> MutexGuard<'_, bool> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first byte's address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
}

impl fmt::Debug for RawMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMemory")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .finish()
    }
}

impl RegionMemory for RawMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        let live = self.enter();
        if !*live || !in_bounds(offset, out.len(), self.len) {
            return false;
        }
        // SAFETY: `offset + out.len() <= len` (checked above), so the source lies inside
        // the allocation `new`'s contract keeps valid until `revoke` (checked above under
        // the lock); `out` is a distinct Rust buffer, so the ranges cannot overlap; the lock
        // excludes every other access ferroce makes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        true
    }

    fn read_at_folding(&self, offset: usize, out: &mut [u8], crc: u32, fold: &Fold) -> Option<u32> {
        let live = self.enter();
        if !*live || !in_bounds(offset, out.len(), self.len) {
            return None;
        }
        // SAFETY: the range lies inside the allocation `new`'s contract keeps valid until
        // `revoke` (both checked above, under the lock), and the lock excludes every other
        // access ferroce makes, so no Rust reference to these bytes exists while this
        // shared one lives; it does not outlive the lock's guard. `out` is a distinct Rust
        // buffer. A C program writing the buffer meanwhile races this read exactly as it
        // races `read_at`'s copy (the bytes sent are unspecified, as on any RDMA device);
        // the kernel reads each byte once.
        let src = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), out.len()) };
        Some((fold.copy)(out, src, crc))
    }

    fn write_at(&self, offset: usize, data: &[u8]) -> bool {
        let live = self.enter();
        if !*live || !in_bounds(offset, data.len(), self.len) {
            return false;
        }
        // SAFETY: as in `read_at`, with the roles of source and destination swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        };
        true
    }

    fn atomic_at(&self, offset: usize, op: AtomicOp) -> Option<u64> {
        let live = self.enter();
        if !*live || !in_bounds(offset, 8, self.len) {
            return None;
        }
        // SAFETY: the 8 bytes lie inside the allocation (checked above).
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        if (p as usize).is_multiple_of(8) {
            // SAFETY: `p` is 8-aligned and valid for 8 bytes of reads and writes for the
            // life of `self`; a C program using CPU atomics on the same word sees a real
            // atomic read-modify-write.
            let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
            let orig = word
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(op.apply(u64::from_le(v)).to_le())
                })
                .unwrap_or_else(|v| v);
            // The word holds little-endian bytes on every host ferroce runs on.
            Some(u64::from_le(orig))
        } else {
            // An iova chosen 8-aligned over a virtual address that is not: no CPU atomic
            // exists; the lock still makes it atomic against ferroce's own accesses.
            let mut w = [0u8; 8];
            // SAFETY: 8 in-bounds bytes, unaligned access is done bytewise.
            unsafe { std::ptr::copy_nonoverlapping(p, w.as_mut_ptr(), 8) };
            let orig = u64::from_le_bytes(w);
            let new = op.apply(orig).to_le_bytes();
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(new.as_ptr(), p, 8) };
            Some(orig)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_memory_stays_inside_its_range() {
        let mut buf = vec![0u8; 32];
        // SAFETY: `buf` outlives `m` and is not touched while `m` lives.
        let m = unsafe { RawMemory::new(buf.as_mut_ptr().wrapping_add(8), 16) }.unwrap();
        assert!(m.write_at(0, &[7; 16]));
        assert!(!m.write_at(1, &[7; 16]));
        assert!(!m.write_at(usize::MAX, &[7]));
        let mut out = [0u8; 16];
        assert!(!m.read_at(8, &mut out));
        assert!(m.read_at(0, &mut out));
        assert_eq!(out, [7; 16]);
        assert_eq!(m.atomic_at(9, AtomicOp::FetchAdd(1)), None);
        assert_eq!(
            m.atomic_at(0, AtomicOp::FetchAdd(1)),
            Some(u64::from_le_bytes([7; 8]))
        );
        assert!(m.atomic_at(3, AtomicOp::FetchAdd(0)).is_some());
        m.revoke();
        assert!(!m.read_at(0, &mut out), "revoked memory is never touched");
        assert_eq!(&buf[..8], &[0; 8], "nothing before the range");
        assert_eq!(&buf[24..], &[0; 8], "nothing after the range");
        assert_eq!(buf[8], 8, "the little-endian add landed in the first byte");
        // SAFETY: a null pointer is refused unless the length is zero.
        assert!(unsafe { RawMemory::new(std::ptr::null_mut(), 1) }.is_none());
        // SAFETY: zero bytes at null are never touched.
        let empty = unsafe { RawMemory::new(std::ptr::null_mut(), 0) }.unwrap();
        assert!(empty.read_at(0, &mut []));
        assert!(!empty.read_at(0, &mut [0]));
    }
}
