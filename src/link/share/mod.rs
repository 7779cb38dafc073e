//! Sharing one interface among processes: which QP numbers are whose.
//!
//! Each process that opens an interface claims *blocks* of QP numbers from a registry its
//! network namespace shares (see `member` and `registry`) and puts them in its socket
//! filter, so the kernel hands each RoCE frame to the one process owning its destination
//! QP. No daemon, no file: the registry lives in kernel objects that disappear with the
//! last process. A block given back, or left by a process that died, rests in quarantine
//! before anyone gets it again, so no process receives frames meant for an earlier owner.
//!
//! What the registry does *not* protect: a local user able to bind abstract Unix sockets
//! in the namespace can hold its lock and deny service; what it holds is QPN blocks and
//! process ids, never application memory, and frames still go through each process's
//! transport checks.

mod member;
mod registry;

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use member::Member;

pub use super::bpf::MAX_BLOCKS;

/// How many processes and QPs use an interface (from the registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkUsers {
    /// Processes with QP number blocks on the interface.
    pub processes: usize,
    /// Their QPs.
    pub qps: u64,
}

/// One link's share of its interface: the blocks this process owns on it.
#[derive(Debug)]
pub struct Share {
    member: Arc<Member>,
    ifindex: u32,
    blocks: Mutex<Vec<u16>>,
}

impl Share {
    /// Joins the namespace's registry (once per process) for interface `ifindex`.
    pub fn join(ifindex: u32) -> io::Result<Share> {
        Ok(Share {
            member: Member::get()?,
            ifindex,
            blocks: Mutex::new(Vec::new()),
        })
    }

    /// Claims one more block; `Ok(None)` when the namespace has none left or this link
    /// holds [`MAX_BLOCKS`].
    pub fn claim(&self) -> io::Result<Option<u16>> {
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        if blocks.len() >= MAX_BLOCKS {
            return Ok(None);
        }
        let b = self.member.claim(self.ifindex)?;
        if let Some(b) = b {
            blocks.push(b);
            tracing::debug!(
                block = b,
                ifindex = self.ifindex,
                "claimed a QP number block"
            );
        }
        Ok(b)
    }

    /// The blocks held.
    pub fn blocks(&self) -> Vec<u16> {
        self.blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Publishes this process's QP count on the interface (for [`Share::users`]).
    pub fn report_qps(&self, qps: usize) {
        let first = self
            .blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first()
            .copied();
        if let Some(b) = first {
            if let Err(e) = self.member.set_qps(b, qps.min(u32::MAX as usize) as u32) {
                tracing::debug!(error = %e, "could not record the QP count");
            }
        }
    }

    /// Processes and QPs on this interface, this one included.
    pub fn users(&self) -> io::Result<LinkUsers> {
        let (processes, qps) = self.member.census(self.ifindex)?;
        Ok(LinkUsers { processes, qps })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        for b in self
            .blocks
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            if let Err(e) = self.member.release(b) {
                tracing::debug!(block = b, error = %e, "could not release a QP number block");
            }
        }
    }
}

/// Processes and QPs on interface `ifindex`, for a tool that does not open it.
pub fn users(ifindex: u32) -> io::Result<LinkUsers> {
    let (processes, qps) = Member::get()?.census(ifindex)?;
    Ok(LinkUsers { processes, qps })
}
