//! Protection domains and memory regions.
//!
//! A region is a view of memory someone else owns ([`RegionMemory`]), addressed by an I/O
//! virtual address (iova) range, as the peer sees it in RETHs. Every byte the engine
//! touches goes through [`MrTable::check`]: key, protection domain, bounds (overflow-safe),
//! access right and, for atomics, 8-byte alignment. There is no other way in.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::flags::flags;
pub(crate) use crate::memory::AtomicOp;
use crate::memory::RegionMemory;
use crate::random::Random;
use crate::sge::{PdId, Sge};
use ferroce_wire::icrc_fold::Fold;

mod mw;
use mw::Window;
pub use mw::{next_rkey, MwBind, MwId, MwType};

flags! {
    /// Memory and QP access rights (ibv_access_flags, same bit values).
    Access: u32 {
        /// The local side may write (receives, READ responses, atomics' results).
        LOCAL_WRITE = 1 << 0;
        /// Peers may RDMA WRITE.
        REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ.
        REMOTE_READ = 1 << 2;
        /// Peers may perform atomics.
        REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region (regions only).
        MW_BIND = 1 << 4;
    }
}

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MrError {
    /// No region has this key (never registered, deregistered, or a stale key).
    InvalidKey(u32),
    /// The region was invalidated (SEND with invalidate).
    Invalidated(u32),
    /// A peer asked to invalidate an ordinary region: as in rxe, only memory windows and
    /// fast-registration regions (which ferroce does not have) may be invalidated
    /// remotely, so a peer cannot revoke memory the application never handed it.
    NotInvalidatable(u32),
    /// The region belongs to another protection domain.
    PdMismatch,
    /// The range is not inside the region (or wraps around the address space).
    OutOfBounds {
        /// First byte of the access.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// The region does not grant the access.
    AccessDenied(Access),
    /// An atomic target that is not 8-byte aligned.
    Misaligned(u64),
    /// A memory window key used by a QP other than the one the window is bound to.
    WrongQp(u32),
    /// A memory window bind the IB spec forbids; the text says which rule.
    BindRefused(&'static str),
}

impl core::fmt::Display for MrError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MrError::InvalidKey(k) => write!(f, "invalid memory key {k:#x}"),
            MrError::Invalidated(k) => write!(f, "memory key {k:#x} was invalidated"),
            MrError::NotInvalidatable(k) => {
                write!(
                    f,
                    "memory key {k:#x} names an ordinary region: not invalidatable"
                )
            }
            MrError::PdMismatch => write!(f, "memory region is in another protection domain"),
            MrError::OutOfBounds { addr, len } => {
                write!(f, "{len} bytes at {addr:#x} are outside the region")
            }
            MrError::AccessDenied(a) => write!(f, "access {:#x} not granted", a.0),
            MrError::Misaligned(a) => write!(f, "atomic address {a:#x} is not 8-byte aligned"),
            MrError::WrongQp(k) => write!(f, "memory window {k:#x} is bound to another QP"),
            MrError::BindRefused(why) => write!(f, "memory window bind refused: {why}"),
        }
    }
}

impl std::error::Error for MrError {}

/// What a registered region looks like to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrInfo {
    /// The local key (what SGEs name).
    pub lkey: u32,
    /// Equal to `lkey`, as rxe does for ordinary MRs.
    pub rkey: u32,
    /// The iova of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Whether a key came from the local side (lkey) or over the wire (rkey), and then on
/// which QP (a type 2 memory window answers only the QP it is bound to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    Local,
    Remote { qpn: u32 },
}

#[derive(Debug)]
struct Mr {
    key: u32,
    pd: PdId,
    iova: u64,
    access: Access,
    invalidated: bool,
    len: u64,
    mem: Arc<dyn RegionMemory>,
}

/// A checked location: region slot and byte offset. Only [`MrTable::check`] makes one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checked {
    slot: usize,
    offset: usize,
    len: usize,
}

/// Default iovas are drawn page-aligned below this bound (the size of a 47-bit user
/// address space, like the application addresses rxe exposes).
const AUTO_IOVA_LIMIT: u64 = 1 << 47;
/// Page size of default iovas.
const PAGE: u64 = 4096;
/// Attempts at a fresh random key or iova before giving up (each collides with
/// probability about live regions / 2^32).
const DRAWS: usize = 64;

/// Hashes a memory key. Keys are drawn from the endpoint's random source, so their bits
/// are already uniform: one multiply spreads them, and a peer probing with keys of its
/// choice only ever looks up, never inserts.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, k: u32) {
        self.0 = u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// All protection domains and memory regions of an endpoint.
#[derive(Debug, Default)]
pub struct MrTable {
    slots: Vec<Option<Mr>>,
    /// Key to slot. Keys are random 32-bit values (nonzero, unique among live regions):
    /// a peer cannot derive one from another or from the order of registration.
    keys: HashMap<u32, usize, BuildHasherDefault<KeyHasher>>,
    /// The key and slot [`MrTable::slot_of`] found last (a hint, checked on every use).
    last: Cell<(u32, usize)>,
    pds: Vec<bool>,
    /// Memory windows by index (their R_Key without its low 8 bits, which a bind
    /// changes). No region key shares its upper 24 bits with a live window's index, so
    /// a key names at most one of the two.
    windows: HashMap<u32, Window, BuildHasherDefault<KeyHasher>>,
}

impl MrTable {
    pub(crate) fn alloc_pd(&mut self) -> PdId {
        self.pds.push(true);
        PdId(self.pds.len() as u32 - 1)
    }

    pub(crate) fn pd_exists(&self, pd: PdId) -> bool {
        self.pds.get(pd.0 as usize).copied().unwrap_or(false)
    }

    pub(crate) fn pd_in_use(&self, pd: PdId) -> bool {
        self.slots.iter().flatten().any(|m| m.pd == pd) || self.windows.values().any(|w| w.pd == pd)
    }

    pub(crate) fn dealloc_pd(&mut self, pd: PdId) {
        if let Some(p) = self.pds.get_mut(pd.0 as usize) {
            *p = false;
        }
    }

    /// Registers `mem` at `iova` (or a random page-aligned base that overlaps no live
    /// region) under a fresh random key. The caller checked the PD and the access
    /// combination.
    pub(crate) fn register(
        &mut self,
        pd: PdId,
        mem: Arc<dyn RegionMemory>,
        iova: Option<u64>,
        access: Access,
        rng: &mut Random,
    ) -> Option<MrInfo> {
        let len = mem.len() as u64;
        let iova = match iova {
            Some(a) => a,
            None => self.random_iova(len, rng)?,
        };
        iova.checked_add(len)?;
        let key = (0..DRAWS).map(|_| rng.u32()).find(|k| {
            *k != 0 && !self.keys.contains_key(k) && !self.windows.contains_key(&(k >> 8))
        })?;
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.keys.insert(key, slot);
        self.slots[slot] = Some(Mr {
            key,
            pd,
            iova,
            access,
            invalidated: false,
            len,
            mem,
        });
        Some(MrInfo {
            lkey: key,
            rkey: key,
            addr: iova,
            len,
        })
    }

    /// A random page-aligned iova for `len` bytes, below `AUTO_IOVA_LIMIT`, overlapping
    /// no live region (so a stray address never lands in another region).
    fn random_iova(&self, len: u64, rng: &mut Random) -> Option<u64> {
        let span = len.checked_add(PAGE - 1)? & !(PAGE - 1);
        let pages = AUTO_IOVA_LIMIT.checked_sub(span)? / PAGE;
        (0..DRAWS).find_map(|_| {
            // Page 0 stays unused: a zero address is never a default.
            let a = (1 + rng.u64() % pages.max(1)) * PAGE;
            let end = a.checked_add(span)?;
            let free = self
                .slots
                .iter()
                .flatten()
                .all(|m| end <= m.iova || a >= m.iova.saturating_add(m.len));
            (free && end <= AUTO_IOVA_LIMIT).then_some(a)
        })
    }

    fn slot_of(&self, key: u32) -> Option<usize> {
        // Most lookups repeat the last key (every packet of a message names the same
        // region): its slot is taken again if that slot still holds a region with this
        // key. Keys are unique among live regions and a region's key never changes, so
        // that is the slot the map would give; a stale entry (region gone, slot reused)
        // fails the comparison and falls through to the map.
        let (last_key, last_slot) = self.last.get();
        if last_key == key
            && self
                .slots
                .get(last_slot)
                .and_then(Option::as_ref)
                .is_some_and(|m| m.key == key)
        {
            return Some(last_slot);
        }
        let slot = self.keys.get(&key).copied()?;
        self.last.set((key, slot));
        Some(slot)
    }

    fn get(&self, key: u32) -> Option<&Mr> {
        self.slots.get(self.slot_of(key)?)?.as_ref()
    }

    fn get_mut(&mut self, key: u32) -> Option<&mut Mr> {
        let slot = self.slot_of(key)?;
        self.slots.get_mut(slot)?.as_mut()
    }

    /// Removes a region; its memory is returned. A region under a bound memory window
    /// stays (`None`; [`MrTable::has_windows`] tells that from an unknown key).
    pub(crate) fn deregister(&mut self, lkey: u32) -> Option<Arc<dyn RegionMemory>> {
        if self.has_windows(lkey) {
            return None;
        }
        let slot = self.keys.remove(&lkey)?;
        self.slots.get_mut(slot)?.take().map(|m| m.mem)
    }

    /// A peer's SEND with invalidate, received on QP `qpn`, names `rkey`. Only a type 2
    /// memory window bound to that QP may be invalidated; an ordinary region (as in rxe
    /// and the spec, which lets peers invalidate memory windows and fast-registration
    /// regions only) may not: otherwise any peer could revoke any region of the PD,
    /// advertised or not. The error says what the key named.
    pub(crate) fn invalidate(&mut self, pd: PdId, qpn: u32, rkey: u32) -> Result<(), MrError> {
        let Some(mr) = self.get_mut(rkey) else {
            return self.invalidate_window(pd, Some(qpn), rkey);
        };
        if mr.pd != pd {
            return Err(MrError::PdMismatch);
        }
        if mr.invalidated {
            return Err(MrError::Invalidated(rkey));
        }
        Err(MrError::NotInvalidatable(rkey))
    }

    /// Registration info of a live region.
    pub(crate) fn info(&self, lkey: u32) -> Option<MrInfo> {
        self.get(lkey).map(|m| MrInfo {
            lkey: m.key,
            rkey: m.key,
            addr: m.iova,
            len: m.len,
        })
    }

    /// The memory a live region is a view of.
    pub(crate) fn memory(&self, lkey: u32) -> Option<&Arc<dyn RegionMemory>> {
        self.get(lkey).map(|m| &m.mem)
    }

    /// The one gate to region memory: `len` bytes at `addr` under `key`, from `pd`, with
    /// right `need` (empty for a local read, which every valid lkey allows).
    pub(crate) fn check(
        &self,
        key: u32,
        kind: KeyKind,
        pd: PdId,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Checked, MrError> {
        let Some(slot) = self.slot_of(key) else {
            return match kind {
                KeyKind::Remote { qpn } => self.check_window(key, qpn, pd, addr, len, need),
                KeyKind::Local => Err(MrError::InvalidKey(key)),
            };
        };
        let mr = self
            .slots
            .get(slot)
            .and_then(Option::as_ref)
            .ok_or(MrError::InvalidKey(key))?;
        if mr.invalidated {
            return Err(MrError::Invalidated(key));
        }
        if mr.pd != pd {
            return Err(MrError::PdMismatch);
        }
        if matches!(kind, KeyKind::Remote { .. }) && need.is_empty() {
            // Remote access always names a right; refuse a caller bug rather than allow.
            return Err(MrError::AccessDenied(need));
        }
        if !mr.access.contains(need) {
            return Err(MrError::AccessDenied(need));
        }
        let oob = MrError::OutOfBounds { addr, len };
        let end = addr.checked_add(len).ok_or(oob)?;
        let mr_end = mr.iova + mr.len;
        if addr < mr.iova || end > mr_end {
            return Err(oob);
        }
        let offset = usize::try_from(addr - mr.iova).map_err(|_| oob)?;
        let len = usize::try_from(len).map_err(|_| oob)?;
        Ok(Checked { slot, offset, len })
    }

    fn memory_of(&self, c: Checked) -> Result<&dyn RegionMemory, MrError> {
        // `check` proved the slot is live; the memory re-checks its own bounds.
        match &self.slots[c.slot] {
            Some(m) => Ok(&*m.mem),
            None => Err(MrError::OutOfBounds {
                addr: 0,
                len: c.len as u64,
            }),
        }
    }

    /// Copies region bytes out (`out.len()` bytes at `addr`).
    pub(crate) fn read(
        &self,
        key: u32,
        kind: KeyKind,
        pd: PdId,
        addr: u64,
        need: Access,
        out: &mut [u8],
    ) -> Result<(), MrError> {
        self.copy_out(key, kind, pd, addr, need, out.len(), |m, at| {
            m.read_at(at, out).then_some(())
        })
    }

    /// [`MrTable::read`] that folds the bytes into `crc` as it copies them
    /// ([`RegionMemory::read_at_folding`]) and returns the new CRC.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_folding(
        &self,
        key: u32,
        kind: KeyKind,
        pd: PdId,
        addr: u64,
        need: Access,
        out: &mut [u8],
        crc: u32,
        fold: &Fold,
    ) -> Result<u32, MrError> {
        self.copy_out(key, kind, pd, addr, need, out.len(), |m, at| {
            m.read_at_folding(at, out, crc, fold)
        })
    }

    /// Checks `len` bytes at `addr` under `key` and hands `copy` the region's memory and
    /// the offset in it; a copy the memory refuses is out of bounds.
    #[allow(clippy::too_many_arguments)]
    fn copy_out<R>(
        &self,
        key: u32,
        kind: KeyKind,
        pd: PdId,
        addr: u64,
        need: Access,
        len: usize,
        copy: impl FnOnce(&dyn RegionMemory, usize) -> Option<R>,
    ) -> Result<R, MrError> {
        let c = self.check(key, kind, pd, addr, len as u64, need)?;
        copy(self.memory_of(c)?, c.offset).ok_or(MrError::OutOfBounds {
            addr,
            len: len as u64,
        })
    }

    /// Copies bytes into a region.
    pub(crate) fn write(
        &self,
        key: u32,
        kind: KeyKind,
        pd: PdId,
        addr: u64,
        need: Access,
        data: &[u8],
    ) -> Result<(), MrError> {
        let c = self.check(key, kind, pd, addr, data.len() as u64, need)?;
        if self.memory_of(c)?.write_at(c.offset, data) {
            Ok(())
        } else {
            Err(MrError::OutOfBounds {
                addr,
                len: data.len() as u64,
            })
        }
    }

    /// Performs a remote atomic on the 8 bytes at `addr`, read as a little-endian u64 (the
    /// host order of x86 and arm, where rxe accesses a native `u64`), returning the
    /// original value.
    pub(crate) fn atomic(
        &self,
        rkey: u32,
        qpn: u32,
        pd: PdId,
        addr: u64,
        op: AtomicOp,
    ) -> Result<u64, MrError> {
        if !addr.is_multiple_of(8) {
            return Err(MrError::Misaligned(addr));
        }
        // An atomic write stores, as an RDMA WRITE does, and needs the same right.
        let right = match op {
            AtomicOp::Store(_) => Access::REMOTE_WRITE,
            AtomicOp::CmpSwp { .. } | AtomicOp::FetchAdd(_) => Access::REMOTE_ATOMIC,
        };
        let remote = KeyKind::Remote { qpn };
        let c = self.check(rkey, remote, pd, addr, 8, right)?;
        self.memory_of(c)?
            .atomic_at(c.offset, op)
            .ok_or(MrError::OutOfBounds { addr, len: 8 })
    }

    /// Gathers `out.len()` bytes starting `offset` bytes into the concatenation of
    /// `sges` (local keys, no right needed beyond a valid key).
    pub(crate) fn gather(
        &self,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), MrError> {
        walk_sges(sges, offset, out.len(), |lkey, addr, range| {
            self.read(
                lkey,
                KeyKind::Local,
                pd,
                addr,
                Access::empty(),
                &mut out[range],
            )
        })
    }

    /// [`MrTable::gather`] that folds the bytes into a CRC as it copies them: returns
    /// what [`Fold::copy`] gives for `out`, started from `0xffff_ffff`.
    pub(crate) fn gather_folding(
        &self,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        out: &mut [u8],
        fold: &Fold,
    ) -> Result<u32, MrError> {
        let mut crc = !0;
        walk_sges(sges, offset, out.len(), |lkey, addr, range| {
            crc = self.read_folding(
                lkey,
                KeyKind::Local,
                pd,
                addr,
                Access::empty(),
                &mut out[range],
                crc,
                fold,
            )?;
            Ok(())
        })?;
        Ok(crc)
    }

    /// Scatters `data` starting `offset` bytes into the concatenation of `sges`, which
    /// need LOCAL_WRITE. The caller checked the total length.
    pub(crate) fn scatter(
        &self,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
    ) -> Result<(), MrError> {
        walk_sges(sges, offset, data.len(), |lkey, addr, range| {
            self.write(
                lkey,
                KeyKind::Local,
                pd,
                addr,
                Access::LOCAL_WRITE,
                &data[range],
            )
        })
    }

    /// Checks every SGE of a list once (key, PD, bounds, `need`).
    pub(crate) fn check_sges(&self, pd: PdId, sges: &[Sge], need: Access) -> Result<(), MrError> {
        for s in sges {
            if s.length > 0 {
                self.check(
                    s.lkey,
                    KeyKind::Local,
                    pd,
                    s.addr,
                    u64::from(s.length),
                    need,
                )?;
            }
        }
        Ok(())
    }
}

/// Total bytes of a gather/scatter list, `None` on overflow of u32 (the IB message limit).
pub(crate) fn sge_total(sges: &[Sge]) -> Option<u32> {
    sges.iter()
        .try_fold(0u32, |acc, s| acc.checked_add(s.length))
}

/// Walks `len` bytes starting `offset` bytes into the concatenation of `sges`: calls `f`
/// with each piece's key, address and range within the `len` bytes, in order. Fails when
/// the SGEs hold fewer than `offset + len` bytes or an address overflows.
fn walk_sges(
    sges: &[Sge],
    mut offset: u64,
    len: usize,
    mut f: impl FnMut(u32, u64, core::ops::Range<usize>) -> Result<(), MrError>,
) -> Result<(), MrError> {
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let l = u64::from(sge.length);
        if offset >= l {
            offset -= l;
            continue;
        }
        let n = ((l - offset) as usize).min(len - done);
        let addr = sge.addr.checked_add(offset).ok_or(MrError::OutOfBounds {
            addr: sge.addr,
            len: l,
        })?;
        f(sge.lkey, addr, done..done + n)?;
        done += n;
        offset = 0;
    }
    if done != len {
        return Err(MrError::OutOfBounds {
            addr: 0,
            len: len as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::OwnedMemory;
    use crate::random::Random;

    fn owned(v: Vec<u8>) -> Arc<dyn RegionMemory> {
        Arc::new(OwnedMemory::new(v))
    }

    fn bytes(t: &MrTable, key: u32) -> Vec<u8> {
        let m = t.memory(key).unwrap();
        let mut v = vec![0; m.len()];
        assert!(m.read_at(0, &mut v));
        v
    }

    fn table() -> (MrTable, PdId, MrInfo) {
        let mut t = MrTable::default();
        let pd = t.alloc_pd();
        let info = t
            .register(
                pd,
                owned(vec![0u8; 64]),
                Some(0x1000),
                Access::LOCAL_WRITE | Access::REMOTE_READ,
                &mut Random::seeded(1),
            )
            .unwrap();
        (t, pd, info)
    }

    #[test]
    fn a_deregistered_key_stays_refused_when_its_slot_holds_a_new_region() {
        // The last key looked up is a hint for the next lookup; after deregistration,
        // with the slot handed to another region, the old key must not reach the new
        // region's memory.
        let (mut t, pd, old) = table();
        let local = KeyKind::Local;
        let c = t
            .check(old.lkey, local, pd, 0x1000, 8, Access::empty())
            .unwrap();
        assert!(t.deregister(old.lkey).is_some());
        let new = t
            .register(
                pd,
                owned(vec![7u8; 64]),
                Some(0x1000),
                Access::LOCAL_WRITE,
                &mut Random::seeded(2),
            )
            .unwrap();
        assert_ne!(new.lkey, old.lkey);
        // The hint still names the old key and the (reused) slot.
        assert_eq!(
            t.check(old.lkey, local, pd, 0x1000, 8, Access::empty())
                .err(),
            Some(MrError::InvalidKey(old.lkey))
        );
        let reused = t
            .check(new.lkey, local, pd, 0x1000, 8, Access::empty())
            .unwrap();
        assert_eq!(
            reused.slot, c.slot,
            "the slot is reused (what this test is about)"
        );
        let mut out = [0u8; 8];
        assert!(t
            .read(old.lkey, local, pd, 0x1000, Access::empty(), &mut out)
            .is_err());
        assert!(t
            .read(new.lkey, local, pd, 0x1000, Access::empty(), &mut out)
            .is_ok());
        assert_eq!(out, [7; 8]);
    }

    #[test]
    fn checks_key_pd_bounds_access_and_overflow() {
        let (mut t, pd, mr) = table();
        let other = t.alloc_pd();
        let k = mr.lkey;
        assert!(t
            .check(k, KeyKind::Local, pd, 0x1000, 64, Access::LOCAL_WRITE)
            .is_ok());
        assert_eq!(
            t.check(k ^ 1, KeyKind::Local, pd, 0x1000, 1, Access::empty())
                .unwrap_err(),
            MrError::InvalidKey(k ^ 1)
        );
        assert_eq!(
            t.check(k, KeyKind::Local, other, 0x1000, 1, Access::empty())
                .unwrap_err(),
            MrError::PdMismatch
        );
        assert!(matches!(
            t.check(k, KeyKind::Local, pd, 0x1001, 64, Access::empty()),
            Err(MrError::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.check(k, KeyKind::Local, pd, 0x0fff, 2, Access::empty()),
            Err(MrError::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.check(
                k,
                KeyKind::Remote { qpn: 1 },
                pd,
                u64::MAX,
                2,
                Access::REMOTE_READ
            ),
            Err(MrError::OutOfBounds { .. })
        ));
        assert_eq!(
            t.check(
                k,
                KeyKind::Remote { qpn: 1 },
                pd,
                0x1000,
                8,
                Access::REMOTE_WRITE
            )
            .unwrap_err(),
            MrError::AccessDenied(Access::REMOTE_WRITE)
        );
        assert_eq!(
            t.atomic(k, 1, pd, 0x1000, AtomicOp::FetchAdd(1))
                .unwrap_err(),
            MrError::AccessDenied(Access::REMOTE_ATOMIC)
        );
        // Deregistration makes the key stale; a new region in the slot gets a new key.
        t.deregister(k).unwrap();
        assert!(t.memory(k).is_none());
        let again = t
            .register(
                pd,
                owned(vec![0; 8]),
                None,
                Access::empty(),
                &mut Random::seeded(2),
            )
            .unwrap();
        assert_ne!(again.lkey, k);
    }

    #[test]
    fn atomics_are_aligned_and_return_the_original() {
        let mut t = MrTable::default();
        let pd = t.alloc_pd();
        let a = Access::LOCAL_WRITE | Access::REMOTE_ATOMIC;
        let mr = t
            .register(
                pd,
                owned(vec![0; 16]),
                Some(0x2000),
                a,
                &mut Random::seeded(1),
            )
            .unwrap();
        assert_eq!(
            t.atomic(mr.rkey, 1, pd, 0x2004, AtomicOp::FetchAdd(1)),
            Err(MrError::Misaligned(0x2004))
        );
        assert_eq!(
            t.atomic(mr.rkey, 1, pd, 0x2008, AtomicOp::FetchAdd(5)),
            Ok(0)
        );
        assert_eq!(
            t.atomic(
                mr.rkey,
                1,
                pd,
                0x2008,
                AtomicOp::CmpSwp {
                    compare: 5,
                    swap: 9
                }
            ),
            Ok(5)
        );
        assert_eq!(&bytes(&t, mr.lkey)[8..], &9u64.to_le_bytes());
        // A peer cannot invalidate an ordinary region: it keeps working.
        assert_eq!(
            t.invalidate(pd, 1, mr.rkey),
            Err(MrError::NotInvalidatable(mr.rkey))
        );
        assert_eq!(
            t.atomic(mr.rkey, 1, pd, 0x2008, AtomicOp::FetchAdd(1)),
            Ok(9)
        );
    }

    #[test]
    fn gather_and_scatter_walk_the_sge_list() {
        let (t, pd, mr) = table();
        let init: Vec<u8> = (0..64).collect();
        assert!(t.memory(mr.lkey).unwrap().write_at(0, &init));
        let sges = [
            Sge {
                addr: 0x1000,
                length: 4,
                lkey: mr.lkey,
            },
            Sge {
                addr: 0x1010,
                length: 4,
                lkey: mr.lkey,
            },
        ];
        let mut out = [0u8; 5];
        t.gather(pd, &sges, 2, &mut out).unwrap();
        assert_eq!(out, [2, 3, 16, 17, 18]);
        assert!(
            t.gather(pd, &sges, 4, &mut out).is_err(),
            "runs past the list"
        );
        t.scatter(pd, &sges, 3, &[0xaa, 0xbb]).unwrap();
        assert_eq!(bytes(&t, mr.lkey)[3], 0xaa);
        assert_eq!(bytes(&t, mr.lkey)[16], 0xbb);
        assert_eq!(sge_total(&sges), Some(8));
    }
}
