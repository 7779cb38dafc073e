//! The driver thread's loop: receive, fire timers, transmit, then busy-poll briefly or
//! sleep in poll() on the link, the waker and the timer.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::link::eventfd::poll_readable;

use super::wakeups::DriverState;
use super::{Shared, RX_BATCH, TX_BATCH};

/// How long the driver keeps looking for work after the last activity before it sleeps.
const BUSY_POLL: Duration = Duration::from_micros(50);
/// How often the driver looks at the link while API threads poll it (in case they stop
/// without saying so), at most and at least: see [`next_nap`].
const APP_POLL_RECHECK: Duration = Duration::from_millis(1);
const APP_POLL_RECHECK_MIN: Duration = Duration::from_micros(20);
/// The time slice the driver asks for (see [`crate::link::sched`]): a frame's arrival then
/// gets the driver a CPU within about this long, even where the application's threads
/// spin on every CPU (perftest's WRITE latency test waits on its buffer, not on a CQ,
/// and only the driver can store what it waits for).
const DRIVER_SLICE: Duration = Duration::from_micros(100);

pub(super) fn run(s: &Shared) {
    rounds(s);
    // A driver that stopped (or gave up) sends nothing more: posters send for themselves.
    let _held = s.endpoint();
    s.wake.set_driver(DriverState::Stopped);
}

fn rounds(s: &Shared) {
    let span = tracing::info_span!("driver");
    let _enter = span.enter();
    match crate::link::sched::request_slice(DRIVER_SLICE) {
        Ok(set) => tracing::debug!(set, slice = ?DRIVER_SLICE, "driver time slice"),
        Err(e) => tracing::debug!(error = %e, "no shorter time slice for the driver"),
    }
    let [waker, timer] = s.wake.fds();
    // poll() skips a negative descriptor: a link whose state never changes.
    let state = s.io.link.state_fd().unwrap_or(-1);
    let fds = [s.io.link.fd(), waker, timer, state];
    // The clock is read once a round (`now` below), and that reading serves the timers,
    // the frames built and the busy-poll alike: on a virtual machine without a fast
    // clock (qemu's TCG: the HPET) each read is a system call and an emulated device
    // access, and an idle round made three. The busy-poll counts from the start of the
    // first round after the last one that did something (a round's sends can be long).
    let mut last_activity = None;
    let mut seen_polls = 0;
    let mut nap = APP_POLL_RECHECK;
    let mut napped = false;
    // The last poll said the link was ready (see the receive below).
    let mut link_ready = false;
    while !s.wake.stopping() {
        let mut progressed = false;
        let mut received = 0;
        let requests = s.linger.requests();

        // Receive: each batch is handed to the transport under one lock, and whatever it
        // answers (ACKs, read responses) goes out before the next batch.
        {
            let mut rx = s.io.rx.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                let n = s.receive(&mut rx, false);
                received += n;
                progressed |= n > 0;
                if n < RX_BATCH {
                    break;
                }
            }
        }

        if std::mem::take(&mut link_ready) && received == 0 {
            // Ready with nothing to receive: an error is pending on the socket (ENETDOWN
            // when the interface went down or away), and until it is read every poll
            // returns at once: the driver would spin on a CPU from then on, even once the
            // link is back.
            s.io.clear_link_error();
        }
        let requests_left = s.linger.requests() != requests;
        if requests_left && s.wake.app_polls.load(Ordering::Relaxed) != 0 {
            // Requests that threads in poll mode left to this thread: had they lingered
            // after their last completion, they might have taken them (see `linger`).
            s.linger.missed();
        }
        if std::mem::take(&mut napped) {
            nap = next_nap(nap, received > 0, requests_left);
        }
        if s.wake.take_short_nap() {
            nap = APP_POLL_RECHECK_MIN;
        }

        // Timers and transmit.
        let mut ep = s.endpoint();
        let now = s.now();
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
            s.deliver_cq_events(&mut ep);
            progressed = true;
        }
        let sent = s.transmit_at(&mut ep, TX_BATCH, now);
        // Looped-back datagrams left over by a bounded transmit: another round soon.
        progressed |= s.loopback_pending();
        // (A full transmit ring empties by itself; the busy-poll below looks again soon.)
        progressed |= sent.filled > 0;
        if progressed {
            // Cheap when nobody waits; precise tracking would cost more than it saves.
            s.completions.signal();
            last_activity = None;
            continue;
        }
        // API threads polling the link (poll mode) since the last look?
        let polls = s.wake.app_polls.load(Ordering::Relaxed);
        let app = polls != 0 && polls != seen_polls;
        seen_polls = polls;
        let since = *last_activity.get_or_insert(now);
        let idle = now.as_nanos().saturating_sub(since.as_nanos());
        if !app && idle < BUSY_POLL.as_nanos() as u64 {
            // Traffic tends to come in bursts and answers follow within microseconds:
            // look again before paying for a sleep and a wake-up.
            drop(ep);
            std::thread::yield_now();
            continue;
        }
        let next = ep.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        let nap_end = now.as_nanos().saturating_add(nap.as_nanos() as u64);
        if app && next >= nap_end {
            // The nap ends before the timer is due: no need to arm it (a system call).
            s.wake.planned_wakeup.store(nap_end, Ordering::SeqCst);
        } else {
            s.wake.arm(next);
        }
        // Nothing is pending: `transmit` above ran under this same lock.
        s.wake.set_driver(if app {
            DriverState::Napping
        } else {
            DriverState::Asleep
        });
        drop(ep);
        s.wake.sleeps.fetch_add(1, Ordering::Relaxed);
        // While API threads poll the link, the driver sleeps on its timer and wake-ups only
        // (a frame would otherwise wake two threads), looking again now and then.
        let ready = if app {
            napped = true;
            s.wake.naps.fetch_add(1, Ordering::Relaxed);
            poll_readable(&fds[1..], Some(nap))
        } else {
            poll_readable(&fds, None).map(|r| {
                link_ready = r & 1 != 0;
                r >> 1
            })
        };
        let ready = match ready {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "poll failed; driver stops");
                return;
            }
        };
        s.wake.drain(ready);
        // Bit 2: the link's state descriptor (bits 0 and 1 are the waker and the timer).
        if ready & 0b100 != 0 {
            s.check_port();
        }
        let _held = s.endpoint();
        s.wake.planned_wakeup.store(0, Ordering::SeqCst);
        s.wake.set_driver(DriverState::Spinning);
    }
}

/// The driver's next nap while API threads poll the link, after one that ended with
/// `frames_left` in the link, `requests_left` among them (RDMA WRITE or READ requests,
/// executed by the driver).
///
/// - Requests left: halve (down to [`APP_POLL_RECHECK_MIN`]). The threads were not
///   receiving what a program waits for: perftest's WRITE latency test, and any program
///   that waits for a WRITE by watching its memory, polls its CQ for its own WRITE's
///   completion and then spins on its buffer; the peer's WRITE waited out the nap.
/// - Other frames left (ACKs, SENDs): keep the nap. The threads take those themselves at
///   their next poll; they were left only because the poller was off its CPU for a
///   moment. Halving on them too (as before) made perftest's bandwidth client, which
///   polls between posts and is often preempted on a 2-CPU host, wake its driver 8,700
///   times a second, and each wake-up preempted the peer's driver on the other CPU:
///   `ib_write_bw -s 4096` on the library at veth MTU 1500, alternating runs, 12.7-12.8
///   Gb/s before, 14.6-15.2 after (README, "Driver naps").
/// - Link empty: double back (up to [`APP_POLL_RECHECK`]).
fn next_nap(nap: Duration, frames_left: bool, requests_left: bool) -> Duration {
    if requests_left {
        (nap / 2).max(APP_POLL_RECHECK_MIN)
    } else if frames_left {
        nap
    } else {
        (nap * 2).min(APP_POLL_RECHECK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naps_shorten_only_for_requests_left_behind() {
        let ms = APP_POLL_RECHECK;
        // A program spinning on its memory: the peer's WRITEs waited, so the naps halve
        // to the floor and stay there.
        let mut nap = ms;
        for _ in 0..20 {
            nap = next_nap(nap, true, true);
        }
        assert_eq!(nap, APP_POLL_RECHECK_MIN);
        // A poller that left ACKs behind now and then keeps its nap, short or long.
        assert_eq!(
            next_nap(APP_POLL_RECHECK_MIN, true, false),
            APP_POLL_RECHECK_MIN
        );
        assert_eq!(next_nap(ms, true, false), ms);
        assert_eq!(next_nap(ms / 4, true, false), ms / 4);
        // Nothing left: back up to the ceiling, never past it.
        let mut nap = APP_POLL_RECHECK_MIN;
        for _ in 0..20 {
            nap = next_nap(nap, false, false);
        }
        assert_eq!(nap, ms);
        assert_eq!(next_nap(ms / 2, true, true), ms / 4);
    }
}
