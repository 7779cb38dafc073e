//! What wakes the driver thread: an eventfd API calls write, a timerfd armed for the
//! transport's next timer, and the bookkeeping of poll mode (API threads that receive
//! themselves while the driver naps).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ferroce_transport::Endpoint;

use crate::link::eventfd::EventFd;
use crate::link::timerfd::{monotonic_nanos, TimerFd};

use super::{Shared, TX_BATCH};

/// The driver thread's wake-up sources and sleep state.
pub(super) struct Wakeups {
    /// API calls write it to wake the driver.
    waker: EventFd,
    /// Wakes the driver when the transport's next timer is due.
    timer: TimerFd,
    /// CLOCK_MONOTONIC at the transport's epoch: converts transport time to the timer's.
    epoch_monotonic: u64,
    /// The transport's next timer, as armed on `timer` (transport nanoseconds; 0 while the
    /// driver runs, `u64::MAX` when it waits for I/O only). Changed with the endpoint locked.
    pub(super) planned_wakeup: AtomicU64,
    /// The driver sleeps until the link, a wake-up or its timer wakes it (not a nap of at
    /// most `APP_POLL_RECHECK`). Changed with the endpoint locked.
    pub(super) driver_asleep: AtomicBool,
    /// Counts API threads' polls of the link (0 after `stop_polling`). While it moves, the
    /// driver leaves the link to them and naps. (A counter, not a time: reading the clock
    /// on every poll costs a system call where the clock source is not the TSC.)
    pub(super) app_polls: AtomicU64,
    /// Poll mode received frames whose answers have not been sent yet (set and cleared
    /// with the endpoint locked).
    pub(super) answers_pending: AtomicBool,
    /// The driver thread should exit.
    stop: AtomicBool,
}

impl Wakeups {
    pub(super) fn new() -> io::Result<Self> {
        Ok(Wakeups {
            waker: EventFd::new()?,
            timer: TimerFd::new()?,
            epoch_monotonic: monotonic_nanos(),
            planned_wakeup: AtomicU64::new(0),
            driver_asleep: AtomicBool::new(false),
            app_polls: AtomicU64::new(0),
            answers_pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        })
    }

    /// Wakes the driver thread.
    pub(super) fn wake(&self) {
        self.waker.wake();
    }

    /// Tells the driver thread to exit, and wakes it.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The descriptors the sleeping driver polls besides the link: waker, timer.
    pub(super) fn fds(&self) -> [RawFd; 2] {
        [self.waker.as_raw_fd(), self.timer.as_raw_fd()]
    }

    /// Resets what woke the driver (bit 0: waker, bit 1: timer).
    pub(super) fn drain(&self, ready: u32) {
        if ready & 0b01 != 0 {
            self.waker.drain();
        }
        if ready & 0b10 != 0 {
            self.timer.drain();
        }
    }

    /// Arms the timer for transport time `nanos` (`u64::MAX` disarms); called with the
    /// endpoint locked.
    pub(super) fn arm(&self, nanos: u64) {
        self.planned_wakeup.store(nanos, Ordering::SeqCst);
        self.timer
            .set((nanos != u64::MAX).then(|| self.epoch_monotonic + nanos));
    }

    /// Moves the sleeping driver's timer forward when the transport's next one is sooner.
    pub(super) fn arm_if_sooner(&self, ep: &Endpoint) {
        let timer = ep.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        if timer < self.planned_wakeup.load(Ordering::SeqCst) {
            self.arm(timer);
        }
    }
}

impl Shared {
    /// Wakes the driver thread.
    pub fn wake(&self) {
        self.wake.wake();
    }

    /// After an API call changed the endpoint (posted work, modified a QP): sends what it
    /// made ready right here, on the caller's thread, sparing a wake-up of the driver. A
    /// timer that now falls before the sleeping driver's is moved on its timerfd, which
    /// wakes the driver only when it is due; leftover work wakes it at once.
    pub fn kick(&self, mut ep: super::EndpointGuard<'_>) {
        // The call may have completed work itself (a flush, a local error).
        self.deliver_cq_events(&mut ep);
        let sent = self.transmit(&mut ep, TX_BATCH);
        self.wake.arm_if_sooner(&ep);
        drop(ep);
        if sent.filled == TX_BATCH || sent.ring_full {
            self.wake.wake();
        }
    }

    /// An API thread that polled the link goes to sleep: the driver watches the link
    /// again from now on.
    pub fn stop_polling(&self) {
        if self.wake.app_polls.swap(0, Ordering::Relaxed) != 0 {
            self.wake.wake();
        }
    }
}
