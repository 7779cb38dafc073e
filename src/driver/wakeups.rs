//! What wakes the driver thread: an eventfd API calls write, a timerfd armed for the
//! transport's next timer, and the bookkeeping of poll mode (API threads that receive
//! themselves while the driver naps).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

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

/// What the driver thread is doing, as posters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DriverState {
    /// Running its rounds or busy-polling.
    Spinning = 0,
    /// Sleeping at most `APP_POLL_RECHECK` while API threads poll the link.
    Napping = 1,
    /// Sleeping until the link, a wake-up or its timer wakes it.
    Asleep = 2,
    /// Gone: it sends nothing more.
    Stopped = 3,
}

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
    /// What the driver thread is doing (a [`DriverState`]). Changed with the endpoint
    /// locked.
    driver_state: AtomicU8,
    /// The last post was one of a stream of large posts, whose frames the driver sends
    /// (see [`Shared::kick_post`]).
    pub(super) large_stream: AtomicBool,
    /// Posts whose frames were left to the driver (`posts_left_to_driver`).
    pub(super) left_to_driver: AtomicU64,
    /// Counts API threads' polls of the link (0 after `stop_polling`). While it moves, the
    /// driver leaves the link to them and naps. (A counter, not a time: reading the clock
    /// on every poll costs a system call where the clock source is not the TSC.)
    pub(super) app_polls: AtomicU64,
    /// A poll's linger ended without the peer's request (see `linger`): the driver's next
    /// nap is its shortest ([`Wakeups::shorten_nap`]).
    nap_short: AtomicBool,
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
    /// A wake-up was written that the driver has not yet taken: it is set by the writer
    /// and cleared by the driver after its sleep ends and it has drained the waker, before
    /// its next round. Wake-ups meanwhile would only add to the same count: the round sees
    /// their work. Natively a poster streaming 64 KiB WRITEs at depth 128 woke the driver
    /// 28,405 times in 4 s for 405 sleeps: the woken driver waits for a CPU while the
    /// poster fills its queue, each post a system call.
    wake_pending: AtomicBool,
    /// Wake-ups that found one pending (`driver_wakeups_merged`).
    pub(super) merged: AtomicU64,
    /// Times the driver thread slept or napped in `poll` (`driver_sleeps`): against
    /// `driver_wakeups`, how many wake-ups found it asleep.
    pub(super) sleeps: AtomicU64,
    /// Of those, naps: sleeps that left the link to polling API threads
    /// (`driver_naps`). A program that waits on a completion channel never causes one.
    pub(super) naps: AtomicU64,
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
            driver_state: AtomicU8::new(DriverState::Spinning as u8),
            large_stream: AtomicBool::new(false),
            left_to_driver: AtomicU64::new(0),
            app_polls: AtomicU64::new(0),
            nap_short: AtomicBool::new(false),
            answers_pending: AtomicBool::new(false),
            answers_age: AtomicU64::new(0),
            deferred_bytes: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            wake_pending: AtomicBool::new(false),
            merged: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
            naps: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        })
    }

    /// Records what the driver thread does from now on; called with the endpoint locked.
    pub(super) fn set_driver(&self, state: DriverState) {
        self.driver_state.store(state as u8, Ordering::Relaxed);
    }

    /// The driver sleeps until the link, a wake-up or its timer wakes it (not a nap of at
    /// most `APP_POLL_RECHECK`).
    pub(super) fn driver_asleep(&self) -> bool {
        self.driver_state.load(Ordering::Relaxed) == DriverState::Asleep as u8
    }

    /// The driver looks at the transport again within microseconds, unasked.
    pub(super) fn driver_spinning(&self) -> bool {
        self.driver_state.load(Ordering::Relaxed) == DriverState::Spinning as u8
    }

    /// A poll lingered for the peer's request and gave up: its thread now waits on its
    /// memory, and the request is the driver's to store when it comes. A napping driver is
    /// woken to nap again at its shortest, instead of finishing a nap of up to a
    /// millisecond that the request would wait out; later naps lengthen again as usual.
    ///
    /// Why: after a ping-pong over UC WRITEs (`ib_write_lat -c UC`) has learnt to linger,
    /// the driver's naps end with nothing to do and grow to a millisecond; a peer that is
    /// late once (off its CPU for more than a linger) then cost a whole nap, and a few
    /// more while lingering was earned back. Between two namespaces on a 2-CPU host, three
    /// runs of 5,000 round trips each way: 99th percentile 87-1,968 µs before, 27-35 µs
    /// after (README, "Latency: UC WRITEs"). A pattern whose lingers keep timing out is
    /// lingered for ever more rarely (see `linger`), so these wake-ups stay rare.
    pub(super) fn shorten_nap(&self) {
        self.nap_short.store(true, Ordering::Relaxed);
        if self.driver_state.load(Ordering::Relaxed) == DriverState::Napping as u8 {
            self.wake();
        }
    }

    /// Whether the driver's next nap is to be its shortest (once per [`Wakeups::shorten_nap`]).
    /// Read first: the driver asks every round, and a swap would write the line the
    /// posters' flags share each time.
    pub(super) fn take_short_nap(&self) -> bool {
        self.nap_short.load(Ordering::Relaxed) && self.nap_short.swap(false, Ordering::Relaxed)
    }

    /// An API thread polled (its CQ or the link): see `app_polls`.
    pub(super) fn polled(&self) {
        self.app_polls.fetch_add(1, Ordering::Relaxed);
    }

    /// Wakes the driver thread.
    pub(super) fn wake(&self) {
        if self.wake_pending.swap(true, Ordering::SeqCst) {
            self.merged.fetch_add(1, Ordering::Relaxed);
            return;
        }
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

    /// Resets what woke the driver (bit 0: waker, bit 1: timer); called after every sleep,
    /// before a round. Wake-ups from now on are written again: one pending until here was
    /// drained or is still to be read (the next sleep then ends at once), and those merged
    /// into it before here are seen by the round that follows.
    pub(super) fn drain(&self, ready: u32) {
        if ready & 0b01 != 0 {
            self.waker.drain();
        }
        if ready & 0b10 != 0 {
            self.timer.drain();
        }
        self.wake_pending.store(false, Ordering::SeqCst);
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

    /// Wake-ups that found one already on its way (`driver_wakeups_merged`).
    pub fn driver_wakeups_merged(&self) -> u64 {
        self.wake.merged.load(Ordering::Relaxed)
    }

    /// Times the driver thread slept or napped (`driver_sleeps`).
    pub fn driver_sleeps(&self) -> u64 {
        self.wake.sleeps.load(Ordering::Relaxed)
    }

    /// Times the driver thread napped, leaving the link to polling threads (`driver_naps`).
    pub fn driver_naps(&self) -> u64 {
        self.wake.naps.load(Ordering::Relaxed)
    }

    /// Posts whose frames the driver sent instead of the posting thread
    /// (`posts_left_to_driver`, see [`Shared::kick_post`]).
    pub fn posts_left_to_driver(&self) -> u64 {
        self.wake.left_to_driver.load(Ordering::Relaxed)
    }

    /// After an API call changed the endpoint (posted work, modified a QP): sends what it
    /// made ready right here, on the caller's thread, sparing a wake-up of the driver. A
    /// timer that now falls before the sleeping driver's is moved on its timerfd, which
    /// wakes the driver only when it is due; leftover work wakes it at once.
    pub fn kick(&self, mut ep: super::EndpointGuard<'_>) {
        // What the call completed itself (a flush, a local error) is delivered with what
        // its sends complete, after the first transmission (`transmit_at`).
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

    /// After a post of a send work request of `bytes`: sends its frames as [`Shared::kick`]
    /// does, or leaves them for later (see [`post_sending`]):
    ///
    /// - A post `behind_others` still outstanding on its QP, by a thread in poll mode,
    ///   leaves its frames for that thread's next poll, its post that brings the bytes left
    ///   to `DEFER_BYTES`, or the napping driver (within a millisecond), whichever comes
    ///   first. Why: perftest's bandwidth tests post a hundred WRs in a row (one completion
    ///   per hundred); sent one by one, each post cost a system call of its own (`ib_write_bw
    ///   -s 4096` at MTU 1500: 0.8 `sendmmsg` per message, 0.65x of `ferroce perf`). The
    ///   link is busy with the WRs before anyway; a post with nothing ahead of it (a
    ///   ping-pong) still goes at once.
    /// - A post behind others that fills a transmit batch by itself (a stream of large
    ///   messages), and one behind others while the driver spins, leave their frames to the
    ///   driver thread, which then sends the whole stream (woken if it naps or sleeps). Why:
    ///   frames of one QP sent by two threads enter the kernel on two CPUs, and the poster
    ///   spends in `sendmmsg` the time it could post and poll in. 64 KiB WRITEs between two
    ///   namespaces (alternating runs, MTU 1500): 21.2 Gb/s with the poster sending, 24.2
    ///   with the driver; in the rxe VM (MTU 9000) 0.74-0.79 against 0.81-0.88 Gb/s.
    pub fn kick_post(&self, mut ep: super::EndpointGuard<'_>, behind_others: bool, bytes: u64) {
        let w = &self.wake;
        let sending = post_sending(
            behind_others,
            w.app_polls.load(Ordering::Relaxed) != 0,
            !w.driver_asleep(),
            w.driver_spinning(),
            w.deferred_bytes.load(Ordering::Relaxed),
            bytes,
        );
        w.large_stream
            .store(behind_others && bytes >= DEFER_BYTES, Ordering::Relaxed);
        match sending {
            PostSending::Now => return self.kick(ep),
            PostSending::Later(deferred) => w.deferred_bytes.store(deferred, Ordering::Relaxed),
            PostSending::Driver { .. } => {
                w.left_to_driver.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The post may have completed work itself (a local error).
        self.deliver_cq_events(&mut ep);
        w.arm_if_sooner(&ep);
        drop(ep);
        if sending == (PostSending::Driver { wake: true }) {
            w.wake();
        }
    }

    /// Whether poll mode's transmission of answers and deferred posts is better left to
    /// the driver: it spins, and the posts are a stream of large ones it sends anyway.
    pub(super) fn tx_left_to_driver(&self) -> bool {
        self.wake.large_stream.load(Ordering::Relaxed) && self.wake.driver_spinning()
    }

    /// Whether frames were left for later (answers of poll mode, deferred posts).
    pub(super) fn tx_pending(&self) -> bool {
        self.wake.answers_pending.load(Ordering::Relaxed)
            || self.wake.deferred_bytes.load(Ordering::Relaxed) != 0
    }

    /// An API thread that polled the link goes to sleep: the driver watches the link
    /// again from now on.
    pub fn stop_polling(&self) {
        // Read first: a thread that waits on a channel calls this at every empty poll.
        if self.wake.app_polls.load(Ordering::Relaxed) != 0
            && self.wake.app_polls.swap(0, Ordering::Relaxed) != 0
        {
            self.wake.wake();
        }
    }
}

/// How a posted work request's frames leave (see [`Shared::kick_post`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PostSending {
    /// Sent now, by the posting thread.
    Now,
    /// Left for a later transmission, with this many bytes now waiting.
    Later(u64),
    /// Left to the driver thread, woken first if it does not spin.
    Driver { wake: bool },
}

/// How a post's frames leave. `polling`: the thread is in poll mode; `driver_naps`: the
/// driver looks again within a millisecond (one asleep until the link wakes it might sleep
/// on); `spinning`: it looks again within microseconds; `deferred`: bytes already waiting.
fn post_sending(
    behind_others: bool,
    polling: bool,
    driver_naps: bool,
    spinning: bool,
    deferred: u64,
    bytes: u64,
) -> PostSending {
    if behind_others && bytes >= DEFER_BYTES {
        return PostSending::Driver { wake: !spinning };
    }
    // Counted at least 1: a deferred empty post is still pending.
    let total = deferred + bytes.max(1);
    if behind_others && polling && driver_naps && total < DEFER_BYTES {
        PostSending::Later(total)
    } else if behind_others && spinning {
        PostSending::Driver { wake: false }
    } else {
        PostSending::Now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linger_that_gave_up_shortens_the_next_nap_and_wakes_only_a_napping_driver() {
        let w = Wakeups::new().unwrap();
        assert!(!w.take_short_nap(), "no linger gave up yet");
        // Asleep on the link (or spinning): the request wakes it, or it looks soon.
        for state in [DriverState::Asleep, DriverState::Spinning] {
            w.set_driver(state);
            w.shorten_nap();
            assert_eq!(w.wakeups.load(Ordering::Relaxed), 0, "{state:?} woken");
            assert!(w.take_short_nap());
            assert!(!w.take_short_nap(), "once per linger given up");
        }
        // Napping: woken, to nap again at its shortest.
        w.set_driver(DriverState::Napping);
        w.shorten_nap();
        assert_eq!(w.wakeups.load(Ordering::Relaxed), 1);
        assert!(w.take_short_nap());
        assert!(!w.take_short_nap());
    }

    #[test]
    fn a_burst_of_small_posts_waits_for_one_transmission() {
        use PostSending::*;
        const KIB4: u64 = 4096;
        let defer = |behind, polling, naps, deferred, bytes| {
            post_sending(behind, polling, naps, false, deferred, bytes)
        };
        // A ping-pong's post (nothing ahead of it) goes at once.
        assert_eq!(defer(false, true, true, 0, KIB4), Now);
        // Behind others: 4 KiB WRITEs wait until the 16th would reach a transmit batch.
        let mut deferred = 0;
        let mut waited = 0;
        while let Later(d) = defer(true, true, true, deferred, KIB4) {
            deferred = d;
            waited += 1;
        }
        assert_eq!((waited, deferred), (15, 15 * KIB4));
        assert_eq!(defer(true, true, true, deferred, KIB4), Now);
        // An empty post at the limit goes at once; an empty one below it waits.
        assert_eq!(defer(true, true, true, DEFER_BYTES - 1, 0), Now);
        assert_eq!(defer(true, true, true, 0, 0), Later(1));
        // Nobody to flush it soon: a thread not polling, a driver asleep on the link.
        assert_eq!(defer(true, false, true, 0, KIB4), Now);
        assert_eq!(defer(true, true, false, 0, KIB4), Now);
    }

    #[test]
    fn a_stream_of_large_posts_is_sent_by_the_driver() {
        use PostSending::*;
        const KIB64: u64 = 64 * 1024;
        // Behind others and filling a batch alone: the driver sends it, woken unless it
        // spins, whether the poster polls or not.
        for polling in [false, true] {
            for naps in [false, true] {
                assert_eq!(
                    post_sending(true, polling, naps, false, 0, KIB64),
                    Driver { wake: true }
                );
                assert_eq!(
                    post_sending(true, polling, naps, true, 0, KIB64),
                    Driver { wake: false }
                );
            }
        }
        // The first of a stream, or a ping-pong's, goes at once, spinning driver or not.
        assert_eq!(post_sending(false, true, true, false, 0, KIB64), Now);
        assert_eq!(post_sending(false, true, true, true, 0, 4096), Now);
        // Small posts behind others whose batch is full go to a spinning driver, or now.
        assert_eq!(
            post_sending(true, true, true, true, 15 * 4096, 4096),
            Driver { wake: false }
        );
        assert_eq!(post_sending(true, false, true, false, 0, 4096), Now);
    }
}
