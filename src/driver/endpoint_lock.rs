//! The endpoint's lock, and a count of its changes that lets an empty CQ be polled without
//! taking it.
//!
//! Programs poll their CQs in tight loops (perftest's bandwidth tests call `ibv_poll_cq`
//! back to back), and each poll locked the endpoint: the driver thread, wanting the same
//! lock for the frames that would fill that CQ, slept on it and was woken through a futex
//! at every unlock. Every lock taken through [`Shared::endpoint`] counts as a change when it
//! is released (whatever the holder did); [`Shared::poll_cq`] remembers the count at which
//! a CQ was last found empty and does not lock again until the count moves.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ferroce_transport::{CqId, Endpoint, WorkCompletion};

use super::Shared;

/// The locked endpoint; releasing it counts a change.
pub struct EndpointGuard<'a> {
    /// Always `Some` but inside [`EndpointGuard::unlocked`].
    guard: Option<MutexGuard<'a, Endpoint>>,
    lock: &'a Mutex<Endpoint>,
    changes: &'a AtomicU64,
}

impl EndpointGuard<'_> {
    /// Runs `f` with the endpoint unlocked and locks it again: for work that needs nothing
    /// of the endpoint's, such as a system call sending frames already built. The
    /// endpoint may have changed when `f` returns.
    pub fn unlocked<R>(&mut self, f: impl FnOnce() -> R) -> R {
        // Counted before the release, as in `drop`.
        self.changes.fetch_add(1, Ordering::Release);
        drop(self.guard.take());
        let r = f();
        self.guard = Some(relock(self.lock));
        r
    }
}

impl Deref for EndpointGuard<'_> {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        self.guard
            .as_deref()
            .expect("endpoint locked outside `unlocked`")
    }
}

impl DerefMut for EndpointGuard<'_> {
    fn deref_mut(&mut self) -> &mut Endpoint {
        self.guard
            .as_deref_mut()
            .expect("endpoint locked outside `unlocked`")
    }
}

impl Drop for EndpointGuard<'_> {
    fn drop(&mut self) {
        // Counted before the lock is released (the guard field drops after this): a poller
        // that reads the count and then finds the CQ empty under the lock has seen every
        // change up to that count.
        self.changes.fetch_add(1, Ordering::Release);
    }
}

/// A panic while the endpoint was locked leaves it poisoned; the transport keeps its
/// invariants per call, so the lock is taken back rather than taking every later API call
/// down with it.
fn relock(m: &Mutex<Endpoint>) -> MutexGuard<'_, Endpoint> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a CQ's poller remembers the change count at which it found the CQ empty.
#[derive(Debug)]
pub struct PollMark(AtomicU64);

impl Default for PollMark {
    fn default() -> Self {
        PollMark(AtomicU64::new(u64::MAX))
    }
}

impl Shared {
    /// Locks the endpoint for an API call or the driver.
    pub fn endpoint(&self) -> EndpointGuard<'_> {
        EndpointGuard {
            guard: Some(self.lock_uncounted()),
            lock: &self.endpoint,
            changes: &self.endpoint_changes,
        }
    }

    /// The lock itself, released without counting a change: only for taking completions.
    fn lock_uncounted(&self) -> MutexGuard<'_, Endpoint> {
        relock(&self.endpoint)
    }

    /// Moves up to `max` completions of CQ `cq` into `out`. When nothing has locked the
    /// endpoint since this CQ was last found empty (per `mark`), nothing can have
    /// arrived, and the lock is not taken. Taking completions is not a change.
    pub fn poll_cq(
        &self,
        cq: CqId,
        mark: &PollMark,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> usize {
        let seen = self.endpoint_changes.load(Ordering::Acquire);
        if mark.0.load(Ordering::Relaxed) == seen {
            return 0;
        }
        let n = self.lock_uncounted().poll_cq(cq, out, max);
        if n == 0 {
            mark.0.store(seen, Ordering::Relaxed);
        }
        n
    }
}
