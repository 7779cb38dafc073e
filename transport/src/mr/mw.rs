//! Memory windows: a narrower, revocable R_Key over part of a region (IB spec 10.6.7).
//!
//! An application hands a peer a window's key instead of the region's, and can take it
//! back without deregistering the region. Two kinds, as in rxe:
//! - type 1: bound and unbound by `ibv_bind_mw` (a bind of length zero unbinds);
//!   usable by any QP of its protection domain;
//! - type 2 (2B): bound by a BIND_MW work request to the QP it is posted on, and only
//!   that QP may use it; unbound by a LOCAL_INV work request or by the peer's SEND with
//!   invalidate, and may not be bound again until then.
//!
//! A window's R_Key is its index in the upper 24 bits (random, so a peer cannot guess
//! one) and a key byte the binder chooses at each bind, so a key handed out for an
//! earlier binding stops working. Region keys never share their upper 24 bits with a
//! live window, so every key names at most one object.

use crate::mr::{Access, Checked, KeyKind, MrError, MrTable, DRAWS};
use crate::random::Random;
use crate::sge::PdId;

/// A memory window of an endpoint: the window's index, the upper 24 bits of its R_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MwId(pub u32);

/// The two kinds of memory window (ibv_mw_type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by `ibv_bind_mw`, used by any QP of the PD.
    Type1,
    /// Bound by a BIND_MW work request to one QP (type 2B).
    Type2,
}

/// A BIND_MW work request: which window, over which bytes of which region, granting
/// which remote rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBind {
    /// The window.
    pub mw: MwId,
    /// The window's R_Key after the bind: only its low 8 bits (the key byte) are taken,
    /// the rest is the window's index.
    pub rkey: u32,
    /// Local key of the region the window opens onto (ignored when `len` is 0).
    pub mr_lkey: u32,
    /// First byte, as an address of the region.
    pub addr: u64,
    /// Length; 0 unbinds a type 1 window.
    pub len: u64,
    /// Remote rights (REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC); LOCAL_WRITE is
    /// accepted and means nothing for a window.
    pub access: Access,
}

/// The R_Key a window gets at its next bind: the same index, the key byte plus one
/// (libibverbs' `ibv_inc_rkey`).
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// What a window currently opens.
#[derive(Debug, Clone, Copy)]
struct Binding {
    mr: u32,
    addr: u64,
    len: u64,
    access: Access,
    /// The QP a type 2 window is bound to.
    qpn: Option<u32>,
}

#[derive(Debug)]
pub(super) struct Window {
    kind: MwType,
    pub(super) pd: PdId,
    rkey: u32,
    /// `None`: a type 1 window bound to nothing, or a free type 2 window.
    bound: Option<Binding>,
}

impl MrTable {
    /// Allocates a window in `pd`: its id and first R_Key (random index, random key
    /// byte), or `None` when no fresh index was found.
    pub(crate) fn alloc_mw(
        &mut self,
        pd: PdId,
        kind: MwType,
        rng: &mut Random,
    ) -> Option<(MwId, u32)> {
        let index = (0..DRAWS).map(|_| rng.u32() >> 8).find(|i| {
            *i != 0 && !self.windows.contains_key(i) && !self.keys.keys().any(|k| k >> 8 == *i)
        })?;
        let rkey = index << 8 | (rng.u32() & 0xff);
        self.windows.insert(
            index,
            Window {
                kind,
                pd,
                rkey,
                bound: None,
            },
        );
        Some((MwId(index), rkey))
    }

    /// Frees a window, bound or not; its key stops working at once.
    pub(crate) fn dealloc_mw(&mut self, mw: MwId) -> bool {
        self.windows.remove(&mw.0).is_some()
    }

    /// The protection domain and current R_Key of a live window.
    pub(crate) fn mw_info(&self, mw: MwId) -> Option<(PdId, MwType, u32)> {
        self.windows.get(&mw.0).map(|w| (w.pd, w.kind, w.rkey))
    }

    /// Whether a bound window opens onto region `lkey` (which then cannot be
    /// deregistered: rxe refuses too).
    pub(crate) fn has_windows(&self, lkey: u32) -> bool {
        self.windows
            .values()
            .any(|w| w.bound.is_some_and(|b| b.mr == lkey))
    }

    /// Executes a bind posted on QP `qpn` of protection domain `pd`, with the checks of
    /// the IB spec (C10-72 to C10-75, o10-36.2.2, o10-37.2.30/40) as rxe makes them;
    /// returns the window's new R_Key.
    pub(crate) fn bind_mw(&mut self, pd: PdId, qpn: u32, b: &MwBind) -> Result<u32, MrError> {
        let w = self
            .windows
            .get(&b.mw.0)
            .ok_or(MrError::InvalidKey(b.mw.0 << 8))?;
        if w.pd != pd {
            return Err(MrError::PdMismatch);
        }
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        if !b.access.difference(remote | Access::LOCAL_WRITE).is_empty() {
            return Err(MrError::BindRefused("unsupported access flags"));
        }
        if w.kind == MwType::Type2 {
            if w.bound.is_some() {
                return Err(MrError::BindRefused(
                    "type 2 window is bound: invalidate first",
                ));
            }
            if b.len == 0 {
                return Err(MrError::BindRefused("type 2 window bound with length 0"));
            }
        }
        let binding = if b.len == 0 {
            None
        } else {
            let mr = self.get(b.mr_lkey).ok_or(MrError::InvalidKey(b.mr_lkey))?;
            if mr.pd != pd {
                return Err(MrError::PdMismatch);
            }
            if !mr.access.contains(Access::MW_BIND) {
                return Err(MrError::BindRefused("region registered without MW_BIND"));
            }
            if b.access
                .intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                && !mr.access.contains(Access::LOCAL_WRITE)
            {
                return Err(MrError::BindRefused(
                    "writable window over a region without LOCAL_WRITE",
                ));
            }
            let end = b.addr.checked_add(b.len);
            if b.addr < mr.iova || end.is_none_or(|e| e > mr.iova + mr.len) {
                return Err(MrError::OutOfBounds {
                    addr: b.addr,
                    len: b.len,
                });
            }
            Some(Binding {
                mr: b.mr_lkey,
                addr: b.addr,
                len: b.len,
                access: b.access.intersection(remote),
                qpn: (w.kind == MwType::Type2).then_some(qpn),
            })
        };
        let w = self
            .windows
            .get_mut(&b.mw.0)
            .ok_or(MrError::InvalidKey(b.mw.0 << 8))?;
        w.rkey = (w.rkey & !0xff) | (b.rkey & 0xff);
        w.bound = binding;
        Ok(w.rkey)
    }

    /// Unbinds the type 2 window `rkey` names: by a LOCAL_INV work request (`qpn`
    /// `None`: any QP of the PD) or a peer's SEND with invalidate on QP `qpn` (only the
    /// QP the window is bound to).
    pub(crate) fn invalidate_window(
        &mut self,
        pd: PdId,
        qpn: Option<u32>,
        rkey: u32,
    ) -> Result<(), MrError> {
        if self.keys.contains_key(&rkey) {
            return Err(MrError::NotInvalidatable(rkey));
        }
        let w = self
            .windows
            .get_mut(&(rkey >> 8))
            .filter(|w| w.rkey == rkey)
            .ok_or(MrError::InvalidKey(rkey))?;
        if w.pd != pd {
            return Err(MrError::PdMismatch);
        }
        if w.kind == MwType::Type1 {
            return Err(MrError::NotInvalidatable(rkey));
        }
        let b = w.bound.ok_or(MrError::Invalidated(rkey))?;
        if qpn.is_some() && b.qpn != qpn {
            return Err(MrError::WrongQp(rkey));
        }
        w.bound = None;
        Ok(())
    }

    /// The remote-key check for a window: bound, this PD, this QP (type 2), the right,
    /// inside the window; then the bytes are the region's.
    pub(super) fn check_window(
        &self,
        key: u32,
        qpn: u32,
        pd: PdId,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Checked, MrError> {
        let w = self
            .windows
            .get(&(key >> 8))
            .filter(|w| w.rkey == key)
            .ok_or(MrError::InvalidKey(key))?;
        let b = w.bound.ok_or(MrError::Invalidated(key))?;
        if w.pd != pd {
            return Err(MrError::PdMismatch);
        }
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(MrError::WrongQp(key));
        }
        if need.is_empty() || !b.access.contains(need) {
            return Err(MrError::AccessDenied(need));
        }
        let oob = MrError::OutOfBounds { addr, len };
        let end = addr.checked_add(len).ok_or(oob)?;
        if addr < b.addr || end > b.addr + b.len {
            return Err(oob);
        }
        // The window grants the right; the region only has to hold the bytes.
        self.check(b.mr, KeyKind::Local, pd, addr, len, Access::empty())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::memory::OwnedMemory;

    const QP: u32 = 0x11;
    const OTHER_QP: u32 = 0x12;

    fn setup(access: Access) -> (MrTable, PdId, u32, Random) {
        let mut t = MrTable::default();
        let pd = t.alloc_pd();
        let mut rng = Random::seeded(7);
        let mr = t
            .register(
                pd,
                Arc::new(OwnedMemory::new(vec![0u8; 256])),
                Some(0x4000),
                access,
                &mut rng,
            )
            .unwrap();
        (t, pd, mr.lkey, rng)
    }

    fn bind(mw: MwId, rkey: u32, mr: u32, addr: u64, len: u64) -> MwBind {
        MwBind {
            mw,
            rkey,
            mr_lkey: mr,
            addr,
            len,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ,
        }
    }

    fn remote(
        t: &MrTable,
        key: u32,
        qpn: u32,
        pd: PdId,
        addr: u64,
        len: u64,
    ) -> Result<(), MrError> {
        t.check(
            key,
            KeyKind::Remote { qpn },
            pd,
            addr,
            len,
            Access::REMOTE_WRITE,
        )
        .map(|_| ())
    }

    #[test]
    fn a_type1_window_opens_only_its_range_and_closes_with_a_zero_length_bind() {
        let (mut t, pd, mr, mut rng) = setup(Access::LOCAL_WRITE | Access::MW_BIND);
        let (mw, key0) = t.alloc_mw(pd, MwType::Type1, &mut rng).unwrap();
        assert_eq!(key0 >> 8, mw.0);
        // Unbound: the key opens nothing; the region itself has no remote rights.
        assert_eq!(
            remote(&t, key0, QP, pd, 0x4000, 8),
            Err(MrError::Invalidated(key0))
        );
        assert!(remote(&t, mr, QP, pd, 0x4000, 8).is_err());
        let key1 = t
            .bind_mw(pd, QP, &bind(mw, key0.wrapping_add(1), mr, 0x4010, 32))
            .unwrap();
        assert_eq!(key1, (key0 & !0xff) | ((key0.wrapping_add(1)) & 0xff));
        assert_eq!(remote(&t, key1, QP, pd, 0x4010, 32), Ok(()));
        assert_eq!(
            remote(&t, key1, OTHER_QP, pd, 0x4010, 32),
            Ok(()),
            "type 1: any QP"
        );
        assert!(matches!(
            remote(&t, key1, QP, pd, 0x400f, 2),
            Err(MrError::OutOfBounds { .. })
        ));
        assert!(matches!(
            remote(&t, key1, QP, pd, 0x4020, 17),
            Err(MrError::OutOfBounds { .. })
        ));
        assert_eq!(
            t.check(
                key1,
                KeyKind::Remote { qpn: QP },
                pd,
                0x4010,
                8,
                Access::REMOTE_ATOMIC
            )
            .map(|_| ()),
            Err(MrError::AccessDenied(Access::REMOTE_ATOMIC))
        );
        // The old key is stale; a window key is never a local key.
        assert_eq!(
            remote(&t, key0, QP, pd, 0x4010, 8),
            Err(MrError::InvalidKey(key0))
        );
        assert!(t
            .check(key1, KeyKind::Local, pd, 0x4010, 8, Access::empty())
            .is_err());
        // Bound windows pin the region; a peer cannot invalidate a type 1 window.
        assert!(t.has_windows(mr));
        assert!(t.deregister(mr).is_none());
        assert_eq!(
            t.invalidate(pd, QP, key1),
            Err(MrError::NotInvalidatable(key1))
        );
        let key2 = t
            .bind_mw(pd, QP, &bind(mw, key1.wrapping_add(1), mr, 0, 0))
            .unwrap();
        assert_eq!(
            remote(&t, key2, QP, pd, 0x4010, 8),
            Err(MrError::Invalidated(key2))
        );
        assert!(!t.has_windows(mr));
        assert!(t.dealloc_mw(mw));
        assert!(t.deregister(mr).is_some());
    }

    #[test]
    fn a_type2_window_answers_its_qp_until_invalidated() {
        let (mut t, pd, mr, mut rng) = setup(Access::LOCAL_WRITE | Access::MW_BIND);
        let (mw, key0) = t.alloc_mw(pd, MwType::Type2, &mut rng).unwrap();
        assert_eq!(
            t.bind_mw(pd, QP, &bind(mw, key0.wrapping_add(1), mr, 0x4000, 0)),
            Err(MrError::BindRefused("type 2 window bound with length 0"))
        );
        let key = t
            .bind_mw(pd, QP, &bind(mw, key0.wrapping_add(1), mr, 0x4000, 256))
            .unwrap();
        assert_eq!(remote(&t, key, QP, pd, 0x4000, 256), Ok(()));
        assert_eq!(
            remote(&t, key, OTHER_QP, pd, 0x4000, 8),
            Err(MrError::WrongQp(key))
        );
        assert!(
            t.bind_mw(pd, QP, &bind(mw, key.wrapping_add(1), mr, 0x4000, 8))
                .is_err(),
            "bound"
        );
        // A peer on another QP may not revoke it; the one it is bound to may.
        assert_eq!(t.invalidate(pd, OTHER_QP, key), Err(MrError::WrongQp(key)));
        assert_eq!(t.invalidate(pd, QP, key), Ok(()));
        assert_eq!(
            remote(&t, key, QP, pd, 0x4000, 8),
            Err(MrError::Invalidated(key))
        );
        assert_eq!(t.invalidate(pd, QP, key), Err(MrError::Invalidated(key)));
        // Bound again, then invalidated locally; then freed.
        let key2 = t
            .bind_mw(pd, QP, &bind(mw, key.wrapping_add(1), mr, 0x4000, 8))
            .unwrap();
        assert_eq!(t.invalidate_window(pd, None, key2), Ok(()));
        assert_eq!(
            t.invalidate_window(pd, None, mr),
            Err(MrError::NotInvalidatable(mr))
        );
        let key3 = t
            .bind_mw(pd, QP, &bind(mw, key2.wrapping_add(1), mr, 0x4000, 8))
            .unwrap();
        assert!(t.dealloc_mw(mw));
        assert_eq!(
            remote(&t, key3, QP, pd, 0x4000, 8),
            Err(MrError::InvalidKey(key3))
        );
        assert!(!t.has_windows(mr));
    }

    #[test]
    fn binds_follow_the_spec_rules() {
        let (mut t, pd, plain, mut rng) = setup(Access::LOCAL_WRITE);
        let other_pd = t.alloc_pd();
        let (mw, k) = t.alloc_mw(pd, MwType::Type1, &mut rng).unwrap();
        assert_eq!(
            t.bind_mw(pd, QP, &bind(mw, k, plain, 0x4000, 8)),
            Err(MrError::BindRefused("region registered without MW_BIND"))
        );
        let ro = t
            .register(
                pd,
                Arc::new(OwnedMemory::new(vec![0u8; 16])),
                None,
                Access::MW_BIND,
                &mut rng,
            )
            .unwrap();
        assert_eq!(
            t.bind_mw(pd, QP, &bind(mw, k, ro.lkey, ro.addr, 8)),
            Err(MrError::BindRefused(
                "writable window over a region without LOCAL_WRITE"
            ))
        );
        let ok = MwBind {
            access: Access::REMOTE_READ,
            ..bind(mw, k, ro.lkey, ro.addr, 8)
        };
        assert!(t.bind_mw(pd, QP, &ok).is_ok());
        assert!(matches!(
            t.bind_mw(pd, QP, &MwBind { len: 17, ..ok }),
            Err(MrError::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.bind_mw(
                pd,
                QP,
                &MwBind {
                    addr: u64::MAX,
                    len: 2,
                    ..ok
                }
            ),
            Err(MrError::OutOfBounds { .. })
        ));
        assert_eq!(t.bind_mw(other_pd, QP, &ok), Err(MrError::PdMismatch));
        assert!(t
            .bind_mw(
                pd,
                QP,
                &MwBind {
                    mw: MwId(mw.0 ^ 1),
                    ..ok
                }
            )
            .is_err());
        // Region keys and window indexes stay apart; the PD is in use while a window is.
        assert!(t.keys.keys().all(|k| !t.windows.contains_key(&(k >> 8))));
        assert!(t.pd_in_use(pd));
    }
}
