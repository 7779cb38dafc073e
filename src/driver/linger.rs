//! Lingering: a poll that found a completion keeps taking in the link for a few
//! microseconds more, when experience says the peer's next frame is about to arrive.
//!
//! Why: perftest's WRITE latency test (and any program that waits for RDMA WRITEs by
//! watching its own memory) polls its CQ for the completion of its own WRITE, then spins
//! on its buffer without calling the library. The peer's WRITE, which follows the ACK by
//! a few microseconds, can then be stored only by the driver thread, which on a host with
//! fewer CPUs than spinning threads waits 50-100 µs for a CPU. A poll that lingers until
//! that WRITE is in returns a little later but leaves nothing for the driver; and since
//! poll mode sends its ACK with the program's next post, the peer's poll finds ACK and
//! WRITE together: the ping-pong runs on the programs' own threads.
//!
//! A poll lingers only when the peer's request has not come in yet: no RDMA WRITE (or
//! READ) request was executed since the program's last post. In the steady state the ACK
//! and the peer's WRITE come in together and nothing is waited for; a program that
//! receives no WRITEs (SENDs are completions of their own) never lingers.
//!
//! Lingering that does not pay (the WRITE comes too late) wastes CPU time, so it is
//! earned: each time the driver thread executes a WRITE while API threads are in poll mode
//! (they left it behind) raises a score, as does each linger that took one in; each linger
//! that ends with nothing lowers it and doubles the score needed to linger again (a peer
//! that always answers a little too late is lingered for ever more rarely), until one pays.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Shared;

/// How long a poll lingers after a completion, at least and at most. It starts at the
/// least, a few times a native round trip's software part, far less than the driver's
/// wake-up on a busy host, and follows how long the answers take (see
/// [`Linger::length`]): a UC WRITE completes as it leaves, so a poll after one waits out
/// the whole round trip, not just the gap behind an ACK as over RC, and at 32 KiB (veth
/// MTU 1500), or in a debug build, that is longer than the least.
const LINGER_MIN: Duration = Duration::from_micros(50);
const LINGER_MAX: Duration = Duration::from_micros(500);
/// Score from which polls linger (with no linger wasted since the last that paid).
const ON: u32 = 2;
/// The score's ceiling: how many wasted lingers in a row a pattern that paid survives.
const MAX: u32 = 64;
/// Wasted lingers in a row after which the score needed stops doubling
/// (`ON << MAX_STRIKES` = `MAX`).
const MAX_STRIKES: u32 = 5;

/// The evidence for lingering, and its counters.
#[derive(Debug, Default)]
pub(super) struct Linger {
    score: AtomicU32,
    /// Lingers wasted since the last that paid: the score needed is `ON << strikes`.
    strikes: AtomicU32,
    /// Lingers that took in the peer's request (`poll_linger_hits`).
    hits: AtomicU64,
    /// Lingers that ended with nothing (`poll_linger_timeouts`).
    timeouts: AtomicU64,
    /// Receive rounds of the driver that executed requests while API threads were in
    /// poll mode (`poll_linger_misses`).
    misses: AtomicU64,
    /// RDMA WRITE and READ requests executed so far (the transport's `rdma_recvs`, as of
    /// the last frames received, by any thread).
    requests: AtomicU64,
    /// `requests` when the program last posted a send work request.
    requests_at_post: AtomicU64,
    /// How long the next linger lasts at most, in nanoseconds (0: [`LINGER_MIN`]).
    length_ns: AtomicU64,
}

impl Linger {
    /// The driver executed requests while API threads were in poll mode.
    pub(super) fn missed(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.raise();
    }

    /// The transport's `rdma_recvs` after frames came in (called with the endpoint locked).
    pub(super) fn set_requests(&self, total: u64) {
        self.requests.store(total, Ordering::Relaxed);
    }

    /// RDMA WRITE and READ requests executed so far.
    pub(super) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The program posted a send work request: its answer is to come.
    fn posted(&self) {
        self.requests_at_post
            .store(self.requests(), Ordering::Relaxed);
    }

    /// Whether a poll that found a completion should linger.
    pub(super) fn wanted(&self) -> bool {
        let needed = ON << self.strikes.load(Ordering::Relaxed);
        self.score.load(Ordering::Relaxed) >= needed
    }

    fn raise(&self) {
        let _ = self
            .score
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some((s + 1).min(MAX))
            });
    }

    /// How long the next linger lasts at most: twice the longest wait of the lingers that
    /// paid lately (shrinking by a quarter per hit towards twice the last one), doubled by
    /// each that did not, within [`LINGER_MIN`, `LINGER_MAX`].
    fn length(&self) -> Duration {
        Duration::from_nanos(self.length_ns.load(Ordering::Relaxed)).max(LINGER_MIN)
    }

    fn set_length(&self, d: Duration) {
        let d = d.clamp(LINGER_MIN, LINGER_MAX);
        self.length_ns.store(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A linger took the peer's request in after `waited`.
    fn hit_after(&self, waited: Duration) {
        self.set_length((waited * 2).max(self.length() * 3 / 4));
        self.hit();
    }

    fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.strikes.store(0, Ordering::Relaxed);
        self.raise();
    }

    fn timed_out(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
        self.set_length(self.length() * 2);
        let strikes = (self.strikes.load(Ordering::Relaxed) + 1).min(MAX_STRIKES);
        self.strikes.store(strikes, Ordering::Relaxed);
        tracing::trace!(strikes, "a poll lingered for nothing");
        let _ = self
            .score
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some(s.saturating_sub(ON << strikes))
            });
    }

    /// `poll_linger_hits`, `poll_linger_timeouts`, `poll_linger_misses`.
    pub(super) fn counters(&self) -> [(&'static str, u64); 3] {
        [
            ("poll_linger_hits", self.hits.load(Ordering::Relaxed)),
            (
                "poll_linger_timeouts",
                self.timeouts.load(Ordering::Relaxed),
            ),
            ("poll_linger_misses", self.misses.load(Ordering::Relaxed)),
        ]
    }
}

impl Shared {
    /// Called by a poll that is about to return completions: if lingering has paid lately,
    /// API threads are polling the link and no RDMA WRITE or READ request came in since the
    /// last post, takes in the link on this thread until one does (here or on the driver)
    /// or the linger's length ([`Linger::length`]) passes.
    pub fn linger(&self) {
        let l = &self.linger;
        if !l.wanted() || self.wake.app_polls.load(Ordering::Relaxed) == 0 {
            return;
        }
        let seen = l.requests();
        if seen != l.requests_at_post.load(Ordering::Relaxed) {
            return; // the peer's answer is in already
        }
        let start = Instant::now();
        let length = l.length();
        for spins in 1u32.. {
            let got = self.poll_rx_lingering();
            if l.requests() != seen {
                if got {
                    l.hit_after(start.elapsed());
                } // else the driver took it: neither a hit nor a waste
                return;
            }
            // The clock is a system call on some virtual machines: not on every spin.
            if spins % 8 == 0 && start.elapsed() >= length {
                l.timed_out();
                self.wake.shorten_nap();
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// A send work request was posted (see [`Shared::linger`]).
    pub fn posted_send(&self) {
        self.linger.posted();
    }

    /// `poll_linger_hits`, `poll_linger_timeouts` and `poll_linger_misses`.
    pub fn linger_counters(&self) -> [(&'static str, u64); 3] {
        self.linger.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lingering_is_earned_by_misses_and_kept_by_hits() {
        let l = Linger::default();
        assert!(!l.wanted(), "off until the driver has caught frames");
        l.missed();
        assert!(!l.wanted(), "one miss is not a pattern");
        l.missed();
        assert!(l.wanted());
        for _ in 0..100 {
            l.hit();
        }
        for _ in 0..3 {
            l.timed_out();
            assert!(l.wanted(), "a pattern that paid survives a few timeouts");
        }
        l.hit();
        l.timed_out();
        assert!(l.wanted(), "a hit forgives the timeouts before it");
        assert_eq!(
            l.counters(),
            [
                ("poll_linger_hits", 101),
                ("poll_linger_timeouts", 4),
                ("poll_linger_misses", 2)
            ]
        );
    }

    #[test]
    fn a_linger_lasts_twice_the_answers_lately_within_its_bounds() {
        let l = Linger::default();
        let us = Duration::from_micros;
        assert_eq!(l.length(), LINGER_MIN);
        // Quick answers keep it at the least.
        l.hit_after(us(5));
        assert_eq!(l.length(), LINGER_MIN);
        // A late one doubles it, up to the most.
        l.timed_out();
        assert_eq!(l.length(), LINGER_MIN * 2);
        for _ in 0..10 {
            l.timed_out();
        }
        assert_eq!(l.length(), LINGER_MAX);
        // Answers after 120 µs: it shrinks by a quarter per hit, down to twice that.
        l.hit_after(us(120));
        assert_eq!(l.length(), LINGER_MAX * 3 / 4);
        for _ in 0..20 {
            l.hit_after(us(120));
        }
        assert_eq!(l.length(), us(240));
        // A longer wait raises it at once.
        l.hit_after(us(200));
        assert_eq!(l.length(), us(400));
    }

    #[test]
    fn a_peer_that_always_answers_too_late_is_lingered_for_ever_more_rarely() {
        // Each linger times out, and the driver then catches the frame: a miss.
        let l = Linger::default();
        let mut lingered = Vec::new();
        for i in 0..300 {
            if l.wanted() {
                lingered.push(i);
                l.timed_out();
            }
            l.missed();
        }
        assert!(lingered.len() <= 8, "lingered at {lingered:?}");
        let gaps: Vec<_> = lingered.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "gaps {gaps:?}");
    }

    #[test]
    fn a_linger_that_pays_after_timeouts_turns_it_back_on() {
        let l = Linger::default();
        for _ in 0..2 {
            l.missed();
        }
        for _ in 0..5 {
            l.timed_out();
        }
        assert!(!l.wanted());
        // Misses alone now need ON << MAX_STRIKES = MAX to turn it on again.
        for _ in 0..MAX - 1 {
            l.missed();
        }
        assert!(!l.wanted());
        l.missed();
        assert!(l.wanted());
        l.hit();
        l.timed_out();
        assert!(l.wanted(), "after a hit a timeout costs little again");
    }
}
