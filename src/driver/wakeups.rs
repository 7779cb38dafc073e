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

/// Bytes of posts in a row whose frames [`Shared::kick_post`] leaves for later: 64
/// packets at MTU 1024, e.g. 15 WRITEs of 4 KiB. A larger post goes at once.
const DEFER_BYTES: u64 = 64 * 1024;

/// Transmit batches a poster sends before it leaves the rest to the driver: a send
/// window of frames (`SEND_WINDOW`, 512) at MTU 1024 and a round that finds nothing.
const KICK_ROUNDS: usize = 5;

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
    /// Polls of the link that began with answers pending, since they were last sent (see
    /// [`Shared::poll_rx`]).
    pub(super) answers_age: AtomicU64,
    /// Bytes of the posts whose frames were left for the poster's next poll (see
    /// [`Shared::kick_post`]); reset by every transmission, with the endpoint locked.
    pub(super) deferred_bytes: AtomicU64,
    /// Times API calls woke the driver (`driver_wakeups`): each costs a system call, and
    /// the driver's wake-up then competes with the caller for the endpoint lock.
    pub(super) wakeups: AtomicU64,
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
            answers_age: AtomicU64::new(0),
            deferred_bytes: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        })
    }

    /// Wakes the driver thread.
    pub(super) fn wake(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
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

    /// Times the driver was woken by an API call or by work left over (`driver_wakeups`).
    pub fn driver_wakeups(&self) -> u64 {
        self.wake.wakeups.load(Ordering::Relaxed)
    }

    /// After an API call changed the endpoint (posted work, modified a QP): sends what it
    /// made ready right here, on the caller's thread, sparing a wake-up of the driver. A
    /// timer that now falls before the sleeping driver's is moved on its timerfd, which
    /// wakes the driver only when it is due; leftover work wakes it at once.
    pub fn kick(&self, mut ep: super::EndpointGuard<'_>) {
        // The call may have completed work itself (a flush, a local error).
        self.deliver_cq_events(&mut ep);
        let mut sent = self.transmit(&mut ep, TX_BATCH);
        // A full batch may leave more behind (a 64 KiB WRITE at MTU 1024 is exactly one
        // batch): the poster sends it too rather than wake the driver for it, whose
        // wake-up and lock handover cost more than a transmit that finds nothing.
        for _ in 1..KICK_ROUNDS {
            if sent.filled < TX_BATCH || sent.ring_full {
                break;
            }
            sent = self.transmit(&mut ep, TX_BATCH);
        }
        self.wake.arm_if_sooner(&ep);
        drop(ep);
        if sent.filled == TX_BATCH || sent.ring_full {
            self.wake.wake();
        }
    }

    /// After a receive was posted: delivers what the post completed by itself (a flush on a
    /// QP in error, an SRQ's limit event), and sends nothing. A receive WQE makes no frame
    /// (a peer that got an RNR NAK retries on its own timer), and the answers poll mode
    /// left for later (ACKs) must not go here: a ping-pong posts its next receive between
    /// seeing a message and sending the reply, and an ACK sent alone there was a system
    /// call of its own on the critical path (`ib_send_lat` over RC: 6.5 µs typical against
    /// 3.1 µs over UD, which has no ACKs). The ACK now leaves with the reply, or at the
    /// poller's second poll from the one that took its frame in (see
    /// [`Shared::poll_rx`]), or with the napping driver within a millisecond.
    pub fn kick_recv(&self, mut ep: super::EndpointGuard<'_>) {
        self.deliver_cq_events(&mut ep);
        self.wake.arm_if_sooner(&ep);
    }

    /// After a post of a send work request of `bytes`: as [`Shared::kick`], except that a
    /// post `behind_others` still outstanding on its QP, by a thread in poll mode, leaves
    /// its frames for that thread's next poll, its post that brings the bytes left to
    /// `DEFER_BYTES`, or the napping driver (within a millisecond), whichever comes first.
    ///
    /// Why: perftest's bandwidth tests post a hundred WRs in a row (one completion per
    /// hundred); sent one by one, each post cost a system call of its own
    /// (`ib_write_bw -s 4096` at MTU 1500: 0.8 `sendmmsg` per message, 0.65x of `ferroce
    /// perf`). The link is busy with the WRs before anyway; a post with nothing ahead of
    /// it (a ping-pong) still goes at once.
    pub fn kick_post(&self, mut ep: super::EndpointGuard<'_>, behind_others: bool, bytes: u64) {
        let w = &self.wake;
        let Some(deferred) = defer_post(
            behind_others,
            w.app_polls.load(Ordering::Relaxed) != 0,
            !w.driver_asleep.load(Ordering::Relaxed),
            w.deferred_bytes.load(Ordering::Relaxed),
            bytes,
        ) else {
            return self.kick(ep);
        };
        w.deferred_bytes.store(deferred, Ordering::Relaxed);
        // The post may have completed work itself (a local error).
        self.deliver_cq_events(&mut ep);
        self.wake.arm_if_sooner(&ep);
    }

    /// Whether frames were left for later (answers of poll mode, deferred posts).
    pub(super) fn tx_pending(&self) -> bool {
        self.wake.answers_pending.load(Ordering::Relaxed)
            || self.wake.deferred_bytes.load(Ordering::Relaxed) != 0
    }

    /// An API thread that polled the link goes to sleep: the driver watches the link
    /// again from now on.
    pub fn stop_polling(&self) {
        if self.wake.app_polls.swap(0, Ordering::Relaxed) != 0 {
            self.wake.wake();
        }
    }
}

/// Whether a post's frames may wait (see [`Shared::kick_post`]): the bytes deferred with
/// it, or `None` to transmit now. `polling`: the thread is in poll mode; `driver_naps`:
/// the driver looks again within a millisecond (one asleep until the link wakes it might
/// sleep on); `deferred`: bytes already waiting.
fn defer_post(
    behind_others: bool,
    polling: bool,
    driver_naps: bool,
    deferred: u64,
    bytes: u64,
) -> Option<u64> {
    // Counted at least 1: a deferred empty post is still pending.
    let total = deferred + bytes.max(1);
    (behind_others && polling && driver_naps && total < DEFER_BYTES).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_small_posts_waits_for_one_transmission() {
        const KIB4: u64 = 4096;
        // A ping-pong's post (nothing ahead of it) goes at once.
        assert_eq!(defer_post(false, true, true, 0, KIB4), None);
        // Behind others: 4 KiB WRITEs wait until the 16th would reach a transmit batch.
        let mut deferred = 0;
        let mut waited = 0;
        while let Some(d) = defer_post(true, true, true, deferred, KIB4) {
            deferred = d;
            waited += 1;
        }
        assert_eq!((waited, deferred), (15, 15 * KIB4));
        // A post that fills a batch alone goes at once, as does an empty one at the limit.
        assert_eq!(defer_post(true, true, true, 0, DEFER_BYTES), None);
        assert_eq!(defer_post(true, true, true, DEFER_BYTES - 1, 0), None);
        assert_eq!(defer_post(true, true, true, 0, 0), Some(1));
        // Nobody to flush it soon: a thread not polling, a driver asleep on the link.
        assert_eq!(defer_post(true, false, true, 0, KIB4), None);
        assert_eq!(defer_post(true, true, false, 0, KIB4), None);
    }
}
