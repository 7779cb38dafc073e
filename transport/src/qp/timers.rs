//! A QP's timers: one table of deadlines, one entry per kind.
//!
//! Every timer of a QP lives here, so `poll_timeout` is the earliest entry of each
//! table and `handle_timeout` is the only place an expired one acts (`poll_transmit`
//! never fires a timer). Roles arm and stop entries; the actions are the roles'
//! methods, dispatched from `Qp::handle_timeout`.

use crate::qp::{Ctx, Qp};
use crate::time::Instant;

/// The kinds of timer a QP runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The completer's local ACK timeout: nothing acknowledged for a while, so go back
    /// to the oldest unacknowledged PSN and resend (within the retry budget).
    AckTimeout,
    /// The requester waits out an RNR NAK's delay before resending.
    RnrWait,
    /// The DCQCN pacer holds paced packets back until then. Nothing happens when it
    /// expires: `poll_transmit` may send again, and re-arms or stops it.
    Pacer,
}

impl Timer {
    /// Every kind, in the order `handle_timeout` looks at them (the end of an RNR wait
    /// re-arms the ACK timeout, which is then checked afresh).
    const ALL: [Timer; 3] = [Timer::RnrWait, Timer::AckTimeout, Timer::Pacer];

    fn index(self) -> usize {
        match self {
            Timer::AckTimeout => 0,
            Timer::RnrWait => 1,
            Timer::Pacer => 2,
        }
    }
}

/// Deadlines of one QP, `None` where a timer is stopped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timers {
    deadlines: [Option<Instant>; 3],
}

impl Timers {
    /// Arms `timer` for `at`, or stops it for `None`.
    pub(super) fn set(&mut self, timer: Timer, at: Option<Instant>) {
        self.deadlines[timer.index()] = at;
    }

    /// Stops `timer`.
    pub(super) fn stop(&mut self, timer: Timer) {
        self.set(timer, None);
    }

    /// Whether `timer` is armed.
    pub(super) fn is_armed(&self, timer: Timer) -> bool {
        self.deadlines[timer.index()].is_some()
    }

    /// Whether `timer` is armed for `now` or earlier.
    fn expired(&self, timer: Timer, now: Instant) -> bool {
        self.deadlines[timer.index()].is_some_and(|t| now >= t)
    }

    /// The earliest deadline of any timer.
    pub(super) fn earliest(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }
}

impl Qp {
    /// The earliest instant at which this QP has timer work (or its pacer lets it send).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.timers.earliest()
    }

    /// Runs every timer of this QP that expired at `ctx.now`.
    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        for timer in Timer::ALL {
            if !self.timers.expired(timer, ctx.now) {
                continue;
            }
            match timer {
                Timer::RnrWait => self.rnr_wait_over(ctx),
                Timer::AckTimeout => self.ack_timeout_expired(ctx),
                Timer::Pacer => {}
            }
        }
    }
}
