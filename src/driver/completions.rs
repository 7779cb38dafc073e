//! Telling API threads that completions may have arrived: a generation counter with a
//! condvar (blocking waits), a tokio `Notify` (async waits), and an eventfd (completion
//! channels of the C ABI, and programs that poll or epoll a descriptor).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::link::eventfd::EventFd;

/// Completion signalling of one device.
pub struct CompletionSignal {
    /// Bumped at every signal; a leaf lock (see the lock order in the module docs).
    generation: Mutex<u64>,
    cond: Condvar,
    /// Threads blocked in `wait`: without any, signalling costs no system call.
    waiters: AtomicUsize,
    /// For async waiters (tokio users).
    pub(crate) notify: tokio::sync::Notify,
    /// Readable after a signal that followed [`CompletionSignal::arm_fd`].
    event: EventFd,
    /// Whether the next signal makes `event` readable: armed on request only, so a
    /// device nobody watches through a descriptor pays no system call per signal.
    armed: AtomicBool,
}

impl std::fmt::Debug for CompletionSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionSignal")
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl CompletionSignal {
    pub(super) fn new() -> io::Result<Self> {
        Ok(CompletionSignal {
            generation: Mutex::new(0),
            cond: Condvar::new(),
            waiters: AtomicUsize::new(0),
            notify: tokio::sync::Notify::new(),
            event: EventFd::new()?,
            armed: AtomicBool::new(false),
        })
    }

    /// Wakes every kind of waiter.
    pub(super) fn signal(&self) {
        *self.lock() += 1;
        // Waiters register under the lock before they sleep, so none is missed.
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.cond.notify_all();
        }
        self.notify.notify_waiters();
        if self.armed.swap(false, Ordering::SeqCst) {
            self.event.wake();
        }
    }

    /// Blocks until a signal moves the generation past `seen`, or `timeout` passes.
    pub(super) fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let (g, _) = self
            .cond
            .wait_timeout_while(g, timeout, |gen| *gen == seen)
            .unwrap_or_else(PoisonError::into_inner);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        *g
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        *self.lock()
    }

    /// A descriptor that polls readable after the next signal once armed
    /// ([`CompletionSignal::arm_fd`]); [`CompletionSignal::drain_fd`] resets it.
    pub fn fd(&self) -> RawFd {
        self.event.as_raw_fd()
    }

    /// Makes the next signal, or one since generation `seen`, make the descriptor
    /// readable (the way `ibv_req_notify_cq` arms a completion channel).
    pub fn arm_fd(&self, seen: u64) {
        self.armed.store(true, Ordering::SeqCst);
        // A signal that came between reading `seen` and arming must not be lost.
        if self.generation() != seen && self.armed.swap(false, Ordering::SeqCst) {
            self.event.wake();
        }
    }

    /// Resets the descriptor so a poll blocks again.
    pub fn drain_fd(&self) {
        self.event.drain();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
