//! The table of QP number blocks one network namespace shares: who owns which block, and
//! which blocks rest in quarantine.
//!
//! A sealed memfd of one header and one 32-byte slot per block (block `b` holds QP
//! numbers `b << 8 ..= b << 8 | 0xff`). It is only read and written with positional I/O,
//! by processes holding the namespace's registry lock (see `member`), so no slot is ever
//! seen half-written and nothing is mapped that another process could shrink.
//!
//! A slot belongs to a *member* (one process's membership, named by a random 64-bit id
//! that is also the name of its abstract socket). Whether a member still lives is not
//! stored here: the caller asks the kernel (its socket exists or not), so a process that
//! was killed cannot leave a block owned.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

use rustix::fs::{fcntl_add_seals, fcntl_get_seals, memfd_create, MemfdFlags, SealFlags};

use crate::link::bpf::QPN_BLOCK_BITS;

/// Blocks in the 24-bit QP number space.
const QPN_BLOCKS: u32 = 1 << (24 - QPN_BLOCK_BITS);

const MAGIC: &[u8; 8] = b"FERROCEQ";
const HEADER_LEN: u64 = 64;
const SLOT_LEN: usize = 32;
/// Size of the registry.
pub(crate) const TABLE_LEN: u64 = HEADER_LEN + SLOT_LEN as u64 * QPN_BLOCKS as u64;
const SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// What a slot says about its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum State {
    /// Never used: free.
    #[default]
    Free,
    /// Owned by `member` (if that member still lives).
    Owned,
    /// Released (or its owner found dead) at `since_ms`: frames for its QPs may still be
    /// on their way, so it is not handed out again before the quarantine has passed.
    Quarantined,
}

/// One block's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Slot {
    pub member: u64,
    pub pid: u32,
    pub ifindex: u32,
    /// QPs the owner has on the interface (kept in the owner's first block).
    pub qps: u32,
    pub state: State,
    /// CLOCK_BOOTTIME milliseconds of the last change of state.
    pub since_ms: u64,
}

impl Slot {
    fn decode(b: &[u8]) -> Slot {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Slot {
            member: u64_at(0),
            pid: u32_at(8),
            ifindex: u32_at(12),
            qps: u32_at(16),
            state: match u32_at(20) {
                1 => State::Owned,
                2 => State::Quarantined,
                _ => State::Free,
            },
            since_ms: u64_at(24),
        }
    }

    fn encode(&self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        b[0..8].copy_from_slice(&self.member.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.ifindex.to_le_bytes());
        b[16..20].copy_from_slice(&self.qps.to_le_bytes());
        let state: u32 = match self.state {
            State::Free => 0,
            State::Owned => 1,
            State::Quarantined => 2,
        };
        b[20..24].copy_from_slice(&state.to_le_bytes());
        b[24..32].copy_from_slice(&self.since_ms.to_le_bytes());
        b
    }
}

/// Who is claiming.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claimant {
    pub member: u64,
    pub pid: u32,
    pub ifindex: u32,
}

/// The shared table.
#[derive(Debug)]
pub(crate) struct Registry {
    file: File,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("QPN registry: {what}"))
}

impl Registry {
    /// A new, empty table.
    pub(crate) fn create() -> io::Result<Registry> {
        let fd = memfd_create(
            "ferroce-qpn-registry",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        let file = File::from(fd);
        file.set_len(TABLE_LEN)?;
        file.write_all_at(MAGIC, 0)?;
        fcntl_add_seals(&file, SEALS)?;
        Ok(Registry { file })
    }

    /// The table another member handed over: checked to be a sealed registry of the right
    /// size before it is trusted with anything.
    pub(crate) fn adopt(fd: OwnedFd) -> io::Result<Registry> {
        let file = File::from(fd);
        if !fcntl_get_seals(&file)?.contains(SEALS) {
            return Err(invalid("not sealed"));
        }
        if file.metadata()?.len() != TABLE_LEN {
            return Err(invalid("wrong size"));
        }
        let mut magic = [0u8; 8];
        file.read_exact_at(&mut magic, 0)?;
        if &magic != MAGIC {
            return Err(invalid("wrong magic"));
        }
        Ok(Registry { file })
    }

    /// The descriptor, to hand to a new member.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    fn offset(block: u16) -> u64 {
        HEADER_LEN + u64::from(block) * SLOT_LEN as u64
    }

    /// One slot.
    pub(crate) fn read(&self, block: u16) -> io::Result<Slot> {
        let mut b = [0u8; SLOT_LEN];
        self.file.read_exact_at(&mut b, Self::offset(block))?;
        Ok(Slot::decode(&b))
    }

    fn write(&self, block: u16, slot: &Slot) -> io::Result<()> {
        self.file.write_all_at(&slot.encode(), Self::offset(block))
    }

    /// Every slot, by block.
    pub(crate) fn all(&self) -> io::Result<Vec<Slot>> {
        let mut b = vec![0u8; SLOT_LEN * QPN_BLOCKS as usize];
        self.file.read_exact_at(&mut b, HEADER_LEN)?;
        Ok(b.chunks_exact(SLOT_LEN).map(Slot::decode).collect())
    }

    /// Claims a block for `who`: the first usable one from `start` on (block 0, with QP0
    /// and QP1, never). Blocks whose owner no longer lives (`live` says) go into
    /// quarantine as of `now_ms`; quarantined blocks stay taken for `quarantine_ms`.
    /// `None` when every block is taken. Call with the registry lock held.
    pub(crate) fn claim(
        &self,
        who: Claimant,
        start: u16,
        now_ms: u64,
        quarantine_ms: u64,
        live: &dyn Fn(u64) -> bool,
    ) -> io::Result<Option<u16>> {
        let mut slots = self.all()?;
        for (b, s) in slots.iter_mut().enumerate() {
            if s.state == State::Owned && !live(s.member) {
                tracing::debug!(
                    block = b,
                    pid = s.pid,
                    "QPN block of a dead process quarantined"
                );
                s.state = State::Quarantined;
                s.since_ms = now_ms;
                s.qps = 0;
                self.write(b as u16, s)?;
            }
        }
        let n = slots.len();
        for i in 0..n {
            let b = (usize::from(start) + i) % n;
            let s = &slots[b];
            let usable = b != 0
                && match s.state {
                    State::Free => true,
                    State::Owned => false,
                    State::Quarantined => now_ms.saturating_sub(s.since_ms) >= quarantine_ms,
                };
            if usable {
                let mine = Slot {
                    member: who.member,
                    pid: who.pid,
                    ifindex: who.ifindex,
                    qps: 0,
                    state: State::Owned,
                    since_ms: now_ms,
                };
                self.write(b as u16, &mine)?;
                return Ok(Some(b as u16));
            }
        }
        Ok(None)
    }

    /// Gives `block` back (into quarantine), if `member` owns it.
    pub(crate) fn release(&self, block: u16, member: u64, now_ms: u64) -> io::Result<()> {
        let s = self.read(block)?;
        if s.state == State::Owned && s.member == member {
            self.write(
                block,
                &Slot {
                    state: State::Quarantined,
                    since_ms: now_ms,
                    qps: 0,
                    ..s
                },
            )?;
        }
        Ok(())
    }

    /// Records how many QPs the owner of `block` has, if `member` owns it.
    pub(crate) fn set_qps(&self, block: u16, member: u64, qps: u32) -> io::Result<()> {
        let s = self.read(block)?;
        if s.state == State::Owned && s.member == member && s.qps != qps {
            self.write(block, &Slot { qps, ..s })?;
        }
        Ok(())
    }

    /// Live owners and their QPs on interface `ifindex`: (processes, QPs).
    pub(crate) fn census(
        &self,
        ifindex: u32,
        live: &dyn Fn(u64) -> bool,
    ) -> io::Result<(usize, u64)> {
        let mut members = std::collections::BTreeSet::new();
        let mut qps = 0u64;
        for s in self.all()? {
            if s.state == State::Owned && s.ifindex == ifindex && live(s.member) {
                members.insert(s.member);
                qps += u64::from(s.qps);
            }
        }
        Ok((members.len(), qps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(member: u64) -> Claimant {
        Claimant {
            member,
            pid: member as u32,
            ifindex: 7,
        }
    }

    #[test]
    fn claims_are_distinct_and_skip_block_zero() {
        let r = Registry::create().unwrap();
        let live = |_: u64| true;
        let a = r.claim(who(1), 0, 0, 1000, &live).unwrap().unwrap();
        let b = r.claim(who(2), 0, 0, 1000, &live).unwrap().unwrap();
        assert_eq!((a, b), (1, 2));
        let c = r.claim(who(3), a, 0, 1000, &live).unwrap().unwrap();
        assert_eq!(c, 3, "owned blocks are passed over");
        assert_eq!(r.read(a).unwrap().member, 1);
    }

    #[test]
    fn a_dead_owners_block_rests_in_quarantine() {
        let r = Registry::create().unwrap();
        let b = r
            .claim(who(1), 500, 10, 60_000, &|_| true)
            .unwrap()
            .unwrap();
        assert_eq!(b, 500);
        // Member 1 dies (its socket is gone): its block is not handed out...
        let dead1 = |m: u64| m != 1;
        let next = r.claim(who(2), 500, 20, 60_000, &dead1).unwrap().unwrap();
        assert_eq!(next, 501, "a dead process's block was handed out at once");
        assert_eq!(r.read(500).unwrap().state, State::Quarantined);
        assert_eq!(
            r.read(500).unwrap().since_ms,
            20,
            "quarantine counts from discovery"
        );
        // ...until the quarantine has passed.
        let later = r
            .claim(who(3), 500, 20 + 59_999, 60_000, &dead1)
            .unwrap()
            .unwrap();
        assert_eq!(later, 502);
        let after = r
            .claim(who(4), 500, 20 + 60_000, 60_000, &dead1)
            .unwrap()
            .unwrap();
        assert_eq!(after, 500);
    }

    #[test]
    fn release_quarantines_and_only_the_owner_may() {
        let r = Registry::create().unwrap();
        let b = r.claim(who(1), 9, 0, 100, &|_| true).unwrap().unwrap();
        r.release(b, 2, 5).unwrap();
        assert_eq!(
            r.read(b).unwrap().state,
            State::Owned,
            "not member 2's block"
        );
        r.set_qps(b, 1, 3).unwrap();
        assert_eq!(r.census(7, &|_| true).unwrap(), (1, 3));
        assert_eq!(r.census(8, &|_| true).unwrap(), (0, 0), "other interface");
        r.release(b, 1, 5).unwrap();
        assert_eq!(r.read(b).unwrap().state, State::Quarantined);
        assert_eq!(r.census(7, &|_| true).unwrap(), (0, 0));
        assert_eq!(r.claim(who(2), 9, 104, 100, &|_| true).unwrap(), Some(10));
        assert_eq!(r.claim(who(2), 9, 105, 100, &|_| true).unwrap(), Some(9));
    }

    #[test]
    fn adopting_checks_the_descriptor() {
        let r = Registry::create().unwrap();
        let dup = r.file().try_clone().unwrap();
        let again = Registry::adopt(OwnedFd::from(dup)).unwrap();
        let b = r.claim(who(1), 40, 0, 0, &|_| true).unwrap().unwrap();
        assert_eq!(again.read(b).unwrap().member, 1, "one table, two handles");
        let plain = memfd_create("x", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        assert!(
            Registry::adopt(plain).is_err(),
            "an unsealed file is refused"
        );
    }
}
