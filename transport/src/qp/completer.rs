//! Completer: matches ACKs, NAKs and read/atomic responses against outstanding WQEs,
//! completes them strictly in posting order, and drives retries (go-back-N on sequence
//! NAKs, implicit NAKs and local ACK timeouts; RNR waits) within the QP's retry budgets.
//!
//! Its state is `Completer` (oldest unacknowledged PSN, retry budgets); its two timers
//! are entries of the QP's timer table, and their expiry handlers live here.

use ferroce_wire::aeth::RNR_TIMER_US;
use ferroce_wire::{NakCode, Operation, Position, Psn, Syndrome};

use crate::qp::timers::Timer;
use crate::qp::{ack_timeout, Ctx, Qp, Rx, MIN_SEND_WINDOW};
use crate::verbs::{QpState, WcStatus, WrOpcode};

use std::time::Duration;

/// The completer's own state: how far acknowledgements reached and what retries are
/// left. Its timers (ACK timeout, RNR wait) are entries of the QP's timer table.
#[derive(Debug, Clone, Default)]
pub(crate) struct Completer {
    /// The oldest PSN not acknowledged yet: WQEs complete up to it, and a go-back-N
    /// retry resends from it.
    oldest_unacked_psn: Psn,
    /// Retries left after timeouts and sequence NAKs (reloaded on progress).
    retry_left: u8,
    /// Retries left after RNR NAKs (reloaded on progress).
    rnr_left: u8,
    /// A retry from `oldest_unacked_psn` is under way: later NAKs and gaps for it are
    /// ignored, so one loss causes one retry.
    started_retry: bool,
    /// Local ACK timeouts since the last progress: what the requester sends now repeats
    /// packets the peer lost without a NAK ([`crate::Transmit::silences`]).
    timeouts_in_a_row: u8,
    /// How far the send window is below the whole one ([`Qp::full_window`]; 0: the
    /// whole window). Each go-back-N retry halves the window, down to
    /// [`MIN_SEND_WINDOW`]; every newly acknowledged packet takes one back. Go-back-N
    /// resends everything sent after a loss, so on a lossy path a full window costs up to
    /// a whole window of packets per lost one: with a fixed window of 512, in
    /// the simulator at 10 Gb/s and 1% loss, 64 KiB WRITEs sent 5.7 times their packets
    /// with the window fixed, 2.6 times with it halved (tests/send_window.rs).
    window_cut: u32,
    /// `oldest_unacked_psn` when the window last grew: progress since is what it regains.
    window_mark: Psn,
}

impl Completer {
    /// The oldest unacknowledged PSN (the requester's send window starts here).
    pub(super) fn oldest_unacked_psn(&self) -> Psn {
        self.oldest_unacked_psn
    }

    /// Everything before `psn` counts as acknowledged (SQ_PSN; UC/UD completing on send).
    pub(super) fn set_oldest_unacked_psn(&mut self, psn: Psn) {
        self.oldest_unacked_psn = psn;
        self.window_mark = psn;
    }

    /// Local ACK timeouts since the last progress.
    pub(super) fn timeouts_in_a_row(&self) -> u8 {
        self.timeouts_in_a_row
    }

    /// After a flush: acknowledged up to `psn`, no retry under way, the whole window.
    pub(super) fn restart_at(&mut self, psn: Psn) {
        self.set_oldest_unacked_psn(psn);
        self.started_retry = false;
        self.timeouts_in_a_row = 0;
        self.window_cut = 0;
    }

    /// Packets the requester may have in flight beyond the oldest unacknowledged one,
    /// of a whole window of `full`.
    pub(super) fn send_window(&self, full: i32) -> i32 {
        (full - self.window_cut as i32).max(MIN_SEND_WINDOW)
    }

    /// A loss: half the window, but never below [`MIN_SEND_WINDOW`].
    fn shrink_window(&mut self, full: i32) {
        let half = (self.send_window(full) / 2).max(MIN_SEND_WINDOW);
        self.window_cut = (full - half).max(0) as u32;
    }

    /// Progress: the window regains one packet per newly acknowledged one.
    fn grow_window(&mut self) {
        let gained = self.oldest_unacked_psn.distance(self.window_mark).max(0) as u32;
        self.window_cut = self.window_cut.saturating_sub(gained);
        self.window_mark = self.oldest_unacked_psn;
    }

    /// The retry budget after timeouts and sequence NAKs (RETRY_CNT).
    pub(super) fn set_retry_left(&mut self, n: u8) {
        self.retry_left = n;
    }

    /// The retry budget after RNR NAKs (RNR_RETRY).
    pub(super) fn set_rnr_left(&mut self, n: u8) {
        self.rnr_left = n;
    }
}

/// What an implicit or explicit ACK up to some PSN found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckOutcome {
    Done,
    /// The ACK passed a READ or atomic whose response never came: resend it.
    NeedRetry,
    /// The QP went to ERR.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RetryReason {
    Timeout,
    Nak,
    Implicit,
}

impl Qp {
    /// True when some sent PSN is not acknowledged yet.
    fn outstanding(&self) -> bool {
        self.comp
            .oldest_unacked_psn
            .before(self.req.first_unsent_psn())
    }

    /// After progress: fresh retry budgets and a restarted (or stopped) ACK timer.
    fn on_progress(&mut self, ctx: &mut Ctx<'_>) {
        self.comp.retry_left = self.attr.retry_cnt;
        self.comp.rnr_left = self.attr.rnr_retry;
        self.comp.started_retry = false;
        self.comp.timeouts_in_a_row = 0;
        self.comp.grow_window();
        let deadline = if self.outstanding() {
            ack_timeout(self.attr.timeout).map(|t| ctx.now + t)
        } else {
            None
        };
        self.timers.set(Timer::AckTimeout, deadline);
        // An ACK past the requester's position (after a rewind) moves it forward.
        if self.req.next_psn().before(self.comp.oldest_unacked_psn) {
            self.rewind_to(self.comp.oldest_unacked_psn);
        }
    }

    /// Completes every WQE acknowledged by an ACK (explicit or implied) for `psn`.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> AckOutcome {
        let mut progress = false;
        let mut outcome = AckOutcome::Done;
        while let Some(w) = self.sq.front() {
            if w.wr.opcode.is_local() && w.assigned && w.local_err.is_none() {
                // Took effect when the requester reached it; it needed no ACK.
                self.complete_front(ctx, WcStatus::Success);
                continue;
            }
            let fully_sent = w.sent_all;
            let started = w.assigned;
            if w.local_err.is_some() {
                self.complete_local_errors(ctx);
                return AckOutcome::Failed;
            }
            if !started || psn.before(w.first_psn) {
                break;
            }
            if psn.distance(w.last_psn()) >= 0 {
                if w.wr.opcode.is_read_or_atomic() {
                    outcome = AckOutcome::NeedRetry;
                    break;
                }
                if !fully_sent {
                    break;
                }
                let next = w.last_psn().add(1);
                self.complete_front(ctx, WcStatus::Success);
                if next.after(self.comp.oldest_unacked_psn) {
                    self.comp.oldest_unacked_psn = next;
                }
                progress = true;
            } else {
                if !w.wr.opcode.is_read_or_atomic()
                    && psn.add(1).after(self.comp.oldest_unacked_psn)
                {
                    self.comp.oldest_unacked_psn = psn.add(1);
                    progress = true;
                }
                break;
            }
        }
        if progress {
            self.on_progress(ctx);
        }
        if self.state() == QpState::Err {
            return AckOutcome::Failed;
        }
        // A locally failed WQE that just became the oldest completes now.
        if self.sq.front().is_some_and(|w| w.local_err.is_some()) {
            self.complete_local_errors(ctx);
            return AckOutcome::Failed;
        }
        outcome
    }

    /// Go-back-N from the oldest unacknowledged PSN, within the retry budget.
    fn start_retry(&mut self, ctx: &mut Ctx<'_>, reason: RetryReason) {
        if !self.outstanding() || self.sq.is_empty() {
            self.timers.stop(Timer::AckTimeout);
            return;
        }
        if reason != RetryReason::Timeout && self.comp.started_retry {
            return;
        }
        // retry_cnt 7 is seven retries, as the IB spec and RoCE NICs have it (only
        // rnr_retry 7 means "forever"); rxe alone retries forever at 7, so a peer that
        // died would hold the QP in retransmission for good.
        if self.comp.retry_left == 0 {
            ctx.counters.retry_exceeded_err += 1;
            tracing::debug!(qpn = self.qpn, psn = %self.comp.oldest_unacked_psn, "retry count exceeded");
            self.complete_front(ctx, WcStatus::RetryExcErr);
            self.fail(ctx);
            return;
        }
        self.comp.retry_left -= 1;
        ctx.counters.completer_retry_err += 1;
        tracing::debug!(qpn = self.qpn, psn = %self.comp.oldest_unacked_psn, ?reason, "go-back-N retry");
        self.comp.started_retry = true;
        // (Every advance of `oldest_unacked_psn` went through `on_progress`, which grew
        // the window already.)
        let full = self.full_window();
        self.comp.shrink_window(full);
        tracing::trace!(
            qpn = self.qpn,
            window = self.comp.send_window(full),
            "send window after a loss"
        );
        self.rewind_to(self.comp.oldest_unacked_psn);
        let deadline = ack_timeout(self.attr.timeout).map(|t| ctx.now + t);
        self.timers.set(Timer::AckTimeout, deadline);
    }

    /// A response packet (ACK, atomic ACK or read response) for this QP's requester.
    pub(crate) fn handle_response(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            ctx.counters.rx_bad_state += 1;
            return;
        }
        let psn = rx.bth.psn;
        if psn.distance(self.req.first_unsent_psn()) >= 0 {
            ctx.counters.rx_ghost_ack += 1;
            tracing::trace!(qpn = self.qpn, %psn, "ghost ACK ignored");
            return;
        }
        if psn.before(self.comp.oldest_unacked_psn) {
            ctx.counters.rx_duplicate_ack += 1;
            return;
        }
        let op = rx.bth.opcode;
        match op.operation() {
            Operation::Acknowledge => {
                let Some(aeth) = rx.ext.aeth else {
                    ctx.counters.rx_malformed += 1;
                    return;
                };
                match aeth.syndrome {
                    Syndrome::Ack { .. } => {
                        if self.ack_through(ctx, psn) == AckOutcome::NeedRetry {
                            self.start_retry(ctx, RetryReason::Implicit);
                        }
                    }
                    Syndrome::RnrNak { timer } => self.on_rnr_nak(ctx, psn, timer),
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        if self.ack_through(ctx, psn.sub(1)) == AckOutcome::Failed {
                            return;
                        }
                        ctx.counters.rcvd_seq_err += 1;
                        self.start_retry(ctx, RetryReason::Nak);
                    }
                    Syndrome::Nak(code) => {
                        if self.ack_through(ctx, psn.sub(1)) == AckOutcome::Failed {
                            return;
                        }
                        let status = match code {
                            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                            NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                            NakCode::PsnSequenceError => WcStatus::BadRespErr,
                        };
                        tracing::debug!(qpn = self.qpn, %psn, ?code, "NAK received");
                        self.complete_front(ctx, status);
                        self.fail(ctx);
                    }
                }
            }
            Operation::AtomicAcknowledge => self.on_atomic_ack(ctx, rx),
            Operation::RdmaReadResponse => self.on_read_response(ctx, rx),
            _ => ctx.counters.rx_unexpected_response += 1,
        }
    }

    fn on_rnr_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, timer: u8) {
        match self.ack_through(ctx, psn.sub(1)) {
            AckOutcome::Failed => return,
            AckOutcome::NeedRetry => return self.start_retry(ctx, RetryReason::Implicit),
            AckOutcome::Done => {}
        }
        ctx.counters.rcvd_rnr_err += 1;
        if self.attr.rnr_retry != 7 {
            if self.comp.rnr_left == 0 {
                ctx.counters.retry_rnr_exceeded_err += 1;
                tracing::debug!(qpn = self.qpn, %psn, "RNR retry count exceeded");
                self.complete_front(ctx, WcStatus::RnrRetryExcErr);
                self.fail(ctx);
                return;
            }
            self.comp.rnr_left -= 1;
        }
        let wait = Duration::from_micros(u64::from(RNR_TIMER_US[usize::from(timer & 0x1f)]));
        tracing::debug!(qpn = self.qpn, %psn, ?wait, "RNR NAK: waiting");
        self.timers.set(Timer::RnrWait, Some(ctx.now + wait));
        self.timers.stop(Timer::AckTimeout);
        self.rewind_to(self.comp.oldest_unacked_psn);
    }

    fn on_atomic_ack(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        match self.ack_through(ctx, psn.sub(1)) {
            AckOutcome::Failed => return,
            AckOutcome::NeedRetry => return self.start_retry(ctx, RetryReason::Implicit),
            AckOutcome::Done => {}
        }
        let (Some(w), Some(ack)) = (self.sq.front(), rx.ext.atomic_ack_eth) else {
            ctx.counters.rx_unexpected_response += 1;
            return;
        };
        if !w.wr.opcode.is_atomic() || w.first_psn != psn || !w.sent_all {
            ctx.counters.rx_unexpected_response += 1;
            return;
        }
        let sge = w.wr.sg_list.first().copied();
        let placed = match sge {
            Some(s) => ctx.mrs.scatter(self.pd, &[s], 0, &ack.orig.to_le_bytes()),
            None => Ok(()),
        };
        self.comp.oldest_unacked_psn = psn.add(1);
        if let Err(e) = placed {
            tracing::debug!(qpn = self.qpn, %e, "atomic result placement failed");
            self.complete_front(ctx, WcStatus::LocProtErr);
            self.fail(ctx);
            return;
        }
        self.complete_front(ctx, WcStatus::Success);
        self.on_progress(ctx);
        self.complete_local_errors(ctx);
    }

    fn on_read_response(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        match self.ack_through(ctx, psn.sub(1)) {
            AckOutcome::Failed => return,
            AckOutcome::NeedRetry => return self.start_retry(ctx, RetryReason::Implicit),
            AckOutcome::Done => {}
        }
        let mtu = self.mtu();
        let Some(w) = self.sq.front() else {
            ctx.counters.rx_unexpected_response += 1;
            return;
        };
        let sent = w.sent_all;
        if w.wr.opcode != WrOpcode::RdmaRead
            || !sent
            || psn.before(w.first_psn)
            || psn.after(w.last_psn())
        {
            ctx.counters.rx_unexpected_response += 1;
            return;
        }
        if psn != self.comp.oldest_unacked_psn {
            // Responses before this one were lost: resend the READ from the gap.
            return self.start_retry(ctx, RetryReason::Implicit);
        }
        let k = psn.distance(w.first_psn) as u32;
        let offset = k * mtu;
        let expect = (w.len - offset.min(w.len)).min(mtu) as usize;
        let last = psn == w.last_psn();
        let pos_last = matches!(rx.bth.opcode.position(), Position::Last | Position::Only);
        if rx.payload.len() != expect || last != pos_last {
            tracing::debug!(qpn = self.qpn, %psn, len = rx.payload.len(), expect, "bad read response");
            self.complete_front(ctx, WcStatus::BadRespErr);
            self.fail(ctx);
            return;
        }
        let placed = ctx
            .mrs
            .scatter(self.pd, &w.wr.sg_list, u64::from(offset), rx.payload);
        if let Err(e) = placed {
            tracing::debug!(qpn = self.qpn, %e, "read response placement failed");
            self.complete_front(ctx, WcStatus::LocProtErr);
            self.fail(ctx);
            return;
        }
        self.comp.oldest_unacked_psn = psn.add(1);
        if last {
            self.complete_front(ctx, WcStatus::Success);
        }
        self.on_progress(ctx);
        self.complete_local_errors(ctx);
    }

    /// `Timer::RnrWait` expired: resend from the oldest unacknowledged PSN.
    pub(super) fn rnr_wait_over(&mut self, ctx: &mut Ctx<'_>) {
        self.timers.stop(Timer::RnrWait);
        tracing::debug!(qpn = self.qpn, psn = %self.comp.oldest_unacked_psn, "RNR wait over: resending");
        self.rewind_to(self.comp.oldest_unacked_psn);
        let deadline = ack_timeout(self.attr.timeout).map(|d| ctx.now + d);
        self.timers.set(Timer::AckTimeout, deadline);
    }

    /// `Timer::AckTimeout` expired: go-back-N if anything is still outstanding.
    pub(super) fn ack_timeout_expired(&mut self, ctx: &mut Ctx<'_>) {
        if !self.outstanding() {
            self.timers.stop(Timer::AckTimeout);
            return;
        }
        ctx.counters.ack_timeouts += 1;
        tracing::debug!(qpn = self.qpn, psn = %self.comp.oldest_unacked_psn, "local ACK timeout");
        self.comp.timeouts_in_a_row = self.comp.timeouts_in_a_row.saturating_add(1);
        self.start_retry(ctx, RetryReason::Timeout);
    }
}
