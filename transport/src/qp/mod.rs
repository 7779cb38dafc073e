//! The queue pair: its identity, attributes, queues and the `modify` state machine,
//! holding one of each role.
//!
//! The three roles of the IB spec each own their state, in their own files:
//! [`requester`] turns send WQEs into request packets, [`responder`] executes requests
//! and answers them, and [`completer`] matches responses against outstanding WQEs.
//! Their timers share one table ([`timers`]); [`congestion`] is the QP's side of DCQCN;
//! [`post`] checks and queues work requests.
//! A role's fields are private to its file; the others go through its `pub(super)`
//! methods.

mod completer;
mod congestion;
mod post;
mod requester;
mod responder;
mod timers;

use std::collections::VecDeque;
use std::time::Duration;

use core::net::Ipv6Addr;

use ferroce_wire::{BthRepr, ExtRepr, Psn};

use crate::counters::Counters;
use crate::cq::CqTable;
use crate::error::{Error, Result};
use crate::mr::{Access, MrTable};
use crate::time::Instant;
use crate::verbs::{
    CqId, Mtu, PdId, QpAttr, QpAttrMask, QpCap, QpState, QpType, RecvWr, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};
use completer::Completer;
pub(crate) use congestion::CnpOut;
use congestion::QpCc;
use requester::Requester;
use responder::Responder;
use timers::{Timer, Timers};

/// Most READs/atomics a QP may keep outstanding or accept (max_qp_rd_atom of the device).
pub const MAX_RD_ATOMIC: u8 = 16;
/// Bytes of payload a requester sends beyond the oldest unacknowledged packet, as a
/// count of packets at the QP's path MTU (see [`Qp::full_window`]). rxe stops at 128
/// packets; over a link that joins packets into 64 KiB super-frames (61 packets at MTU
/// 1024) that is two super-frames in flight, and a sender waiting for ACKs between
/// transmit batches of 128 packets. A fixed 512 packets was too little at MTU 1024 and
/// too much at 4096: in alternating runs of 64 KiB WRITEs between two namespaces
/// (`scripts/bench/ab.sh`), 1024 packets of 1 KiB moved 5% more than 512 at veth MTU
/// 1500, and at 9000 256 packets of 4 KiB cost 10% less CPU per GB than 512 (1024 cost
/// 5% more): what is in flight is also what the caches hold. Go-back-N resends at most
/// the window after a loss. Losses halve it, down to [`MIN_SEND_WINDOW`], and
/// acknowledged packets win it back.
const SEND_WINDOW_BYTES: u32 = 1 << 20;
/// The most packets in flight, whatever the MTU (a small MTU's window in bytes would be
/// thousands of packets, each a go-back-N resend after a loss).
const SEND_WINDOW: i32 = 1024;
/// A requester asks for an ACK at least this often within a long message.
const MAX_PKTS_PER_ACK: u32 = 64;
/// The send window after repeated losses: no narrower than the ACK-request interval.
const MIN_SEND_WINDOW: i32 = MAX_PKTS_PER_ACK as i32;
// A window narrower than the ACK-request interval stalls a long message until the
// retransmit timer fires: the requester stops before asking, and the responder waits for
// the request (measured: 64 KiB WRITEs at MTU 1024 fell to 8 Mb/s with a window of 48).
const _: () = assert!(SEND_WINDOW >= MIN_SEND_WINDOW);
/// Bound on queued responder packets (ACKs coalesce, so this is rarely reached).
const MAX_RESP_QUEUE: usize = 64;

/// Borrowed endpoint state a QP needs while it works.
pub(crate) struct Ctx<'a> {
    pub mrs: &'a mut MrTable,
    pub srqs: &'a mut crate::srq::SrqTable,
    pub cqs: &'a mut CqTable,
    pub counters: &'a mut Counters,
    /// Asynchronous events raised while handling this call.
    pub events: &'a mut Vec<crate::verbs::AsyncEvent>,
    pub now: Instant,
}

/// A posted send work request plus its transport bookkeeping.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    wr: SendWr,
    /// The gathered bytes of an inline send, copied at post time.
    inline: Option<Vec<u8>>,
    /// Message length in bytes.
    len: u32,
    signaled: bool,
    /// First PSN, valid once the requester started the WQE.
    first_psn: Psn,
    /// PSNs the message consumes (READ: one per response packet).
    npkts: u32,
    /// A local error found when starting the WQE; it completes with it in order.
    local_err: Option<WcStatus>,
    /// PSNs were assigned (the WQE was started at least once; a rewind keeps them).
    assigned: bool,
    /// Every packet was sent at least once, so an ACK may cover the whole message.
    sent_all: bool,
}

impl SendWqe {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
}

/// One received, ICRC-checked packet as the QP roles see it.
#[derive(Debug)]
pub(crate) struct Rx<'a> {
    pub bth: BthRepr,
    pub ext: ExtRepr,
    pub payload: &'a [u8],
    pub src_gid: Ipv6Addr,
    /// The IP header bytes (for the UD GRH area).
    pub ip_header: &'a [u8],
}

/// One queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub sq_sig_all: bool,
    pub cap: QpCap,
    pub attr: QpAttr,
    /// UDP source port of every packet (derived from the QP numbers as rxe does).
    sport: u16,
    /// Send WQEs posted and not completed, oldest first (the requester sends them, the
    /// completer retires them).
    sq: VecDeque<SendWqe>,
    /// Gather lists of retired send WQEs, emptied, for the next posts to fill: one
    /// allocation per post, freed on the driver's thread, was 1.7% of all CPU of a 4 KiB
    /// WRITE stream (malloc's slow path on the posting thread). At most `max_send_wr`.
    spare_sg_lists: Vec<Vec<Sge>>,
    /// Receive WQEs posted, oldest first (the responder consumes them).
    rq: VecDeque<RecvWr>,
    /// Receive WQEs come from this SRQ instead of `rq`.
    pub srq: Option<crate::verbs::SrqId>,
    /// Requester role: send WQEs into request packets.
    req: Requester,
    /// Completer role: responses against outstanding WQEs, retries.
    comp: Completer,
    /// Responder role: requests executed and answered.
    resp: Responder,
    /// Every timer of the QP.
    timers: Timers,
    /// DCQCN notification and reaction point.
    cc: QpCc,
    /// The endpoint's schedule entries for this QP.
    pub(crate) sched: crate::schedule::Mark,
}

impl crate::schedule::Scheduled for Qp {
    fn qpn(&self) -> u32 {
        self.qpn
    }
    fn mark(&mut self) -> &mut crate::schedule::Mark {
        &mut self.sched
    }
    fn deadline(&self) -> Option<Instant> {
        self.poll_timeout()
    }
    fn waits_for_time(&self) -> bool {
        self.waits_for_pacer()
    }
}

/// UDP source port of an RC/UC QP, as rxe 6.1 derives it from both QP numbers.
pub fn rc_src_port(local_qpn: u32, remote_qpn: u32) -> u16 {
    let v = u64::from(local_qpn) * u64::from(remote_qpn);
    let fl = (v ^ (v >> 20) ^ (v >> 40)) & 0xf_ffff;
    0xc000 | (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) as u16)
}

/// UDP source port of a UD QP, as rxe derives it from the QP number.
pub fn ud_src_port(qpn: u32) -> u16 {
    0xc000u16.wrapping_add((qpn.wrapping_mul(0x61c8_8647) >> 18) as u16)
}

/// Local ACK timeout of the IB encoding: 4.096 µs × 2^t; `None` for 0 (wait forever).
pub fn ack_timeout(t: u8) -> Option<Duration> {
    (t != 0).then(|| Duration::from_nanos(4096u64 << t.min(31)))
}

/// The (required, optional) attributes of a transition, or `None` if it is not allowed
/// (the table of ibv_modify_qp / the kernel's `ib_modify_qp_is_ok`).
fn transition(cur: QpState, next: QpState, t: QpType) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    let ud = t == QpType::Ud;
    let rc = t == QpType::Rc;
    Some(match (cur, next) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) | (Init, Init) => {
            let m = if ud {
                M::PKEY_INDEX | M::PORT | M::QKEY
            } else {
                M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
            };
            if cur == Reset {
                (m, none)
            } else {
                (none, m)
            }
        }
        (Init, Rtr) => {
            if ud {
                (none, M::PKEY_INDEX | M::QKEY)
            } else {
                let mut req = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
                if rc {
                    req |= M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
                }
                (req, M::ACCESS_FLAGS | M::PKEY_INDEX | M::ALT_PATH)
            }
        }
        (Rtr, Rts) => {
            if ud {
                (M::SQ_PSN, M::CUR_STATE | M::QKEY)
            } else if rc {
                (
                    M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
                    M::CUR_STATE
                        | M::ACCESS_FLAGS
                        | M::ALT_PATH
                        | M::PATH_MIG_STATE
                        | M::MIN_RNR_TIMER,
                )
            } else {
                (
                    M::SQ_PSN,
                    M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
                )
            }
        }
        (Rts, Rts) | (Sqd, Rts) => {
            if ud {
                (none, M::CUR_STATE | M::QKEY)
            } else {
                let mut opt = M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE;
                if rc {
                    opt |= M::MIN_RNR_TIMER;
                }
                (none, opt)
            }
        }
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => {
            if ud {
                (none, M::PKEY_INDEX | M::QKEY)
            } else if rc {
                (
                    none,
                    M::PORT
                        | M::AV
                        | M::TIMEOUT
                        | M::RETRY_CNT
                        | M::RNR_RETRY
                        | M::MAX_QP_RD_ATOMIC
                        | M::MAX_DEST_RD_ATOMIC
                        | M::ALT_PATH
                        | M::ACCESS_FLAGS
                        | M::PKEY_INDEX
                        | M::MIN_RNR_TIMER
                        | M::PATH_MIG_STATE,
                )
            } else {
                (
                    none,
                    M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE,
                )
            }
        }
        (Sqe, Rts) if !rc => {
            if ud {
                (none, M::CUR_STATE | M::QKEY)
            } else {
                (none, M::CUR_STATE | M::ACCESS_FLAGS)
            }
        }
        _ => return None,
    })
}

impl Qp {
    pub(crate) fn new(
        qpn: u32,
        qp_type: QpType,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> Qp {
        Qp {
            qpn,
            qp_type,
            pd,
            send_cq,
            recv_cq,
            sq_sig_all,
            cap,
            attr: QpAttr {
                cap,
                ..QpAttr::default()
            },
            sport: if qp_type == QpType::Ud {
                ud_src_port(qpn)
            } else {
                0
            },
            sq: VecDeque::new(),
            spare_sg_lists: Vec::new(),
            rq: VecDeque::new(),
            srq: None,
            req: Requester::default(),
            comp: Completer::default(),
            resp: Responder::default(),
            timers: Timers::default(),
            cc: QpCc::default(),
            sched: crate::schedule::Mark::default(),
        }
    }

    pub(crate) fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// The path MTU in bytes (UD uses the port MTU, stored in `path_mtu` at creation).
    pub(crate) fn mtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// The whole send window in packets at this QP's path MTU: [`SEND_WINDOW_BYTES`] of
    /// payload, at most [`SEND_WINDOW`] and at least [`MIN_SEND_WINDOW`] packets (1024
    /// at MTU 1024, 256 at 4096).
    pub(crate) fn full_window(&self) -> i32 {
        let packets = SEND_WINDOW_BYTES / self.mtu().max(1);
        (packets as i32).clamp(MIN_SEND_WINDOW, SEND_WINDOW)
    }

    /// Validates and applies an ibv_modify_qp call.
    pub(crate) fn modify(
        &mut self,
        ctx: &mut Ctx<'_>,
        attr: &QpAttr,
        mask: QpAttrMask,
        gids: &[Ipv6Addr],
        max_mtu: Mtu,
    ) -> Result<()> {
        use QpAttrMask as M;
        let cur = self.state();
        let next = if mask.contains(M::STATE) {
            attr.qp_state
        } else {
            cur
        };
        if mask.contains(M::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(Error::StateMismatch {
                expected: attr.cur_qp_state,
                actual: cur,
            });
        }
        let (required, optional) =
            transition(cur, next, self.qp_type).ok_or(Error::InvalidTransition {
                from: cur,
                to: next,
            })?;
        let given = mask.difference(M::STATE);
        let missing = required.difference(given);
        if !missing.is_empty() {
            return Err(Error::MissingAttr(missing));
        }
        let extra = given.difference(required | optional | M::CUR_STATE);
        if !extra.is_empty() {
            return Err(Error::UnexpectedAttr(extra));
        }
        if given.intersects(M::ALT_PATH | M::PATH_MIG_STATE) {
            return Err(Error::Unsupported("automatic path migration"));
        }
        Self::check_values(attr, given, gids, max_mtu)?;

        // Apply the attributes.
        let a = &mut self.attr;
        if given.contains(M::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if given.contains(M::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if given.contains(M::PORT) {
            a.port_num = attr.port_num;
        }
        if given.contains(M::QKEY) {
            a.qkey = attr.qkey;
        }
        if given.contains(M::AV) {
            a.av = attr.av;
        }
        if given.contains(M::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if given.contains(M::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if given.contains(M::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            self.comp.set_retry_left(attr.retry_cnt);
        }
        if given.contains(M::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            self.comp.set_rnr_left(attr.rnr_retry);
        }
        if given.contains(M::RQ_PSN) {
            a.rq_psn = attr.rq_psn & Psn::MASK;
            self.resp.set_expected_psn(Psn::new(attr.rq_psn));
        }
        if given.contains(M::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if given.contains(M::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if given.contains(M::SQ_PSN) {
            a.sq_psn = attr.sq_psn & Psn::MASK;
            let p = Psn::new(attr.sq_psn);
            self.req.set_psn(p);
            self.comp.set_oldest_unacked_psn(p);
        }
        if given.contains(M::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
            let n = 2 * usize::from(attr.max_dest_rd_atomic.max(1)) + 2;
            self.resp.size_resources(n);
        }
        if given.contains(M::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if given.contains(M::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if self.qp_type != QpType::Ud && given.intersects(M::DEST_QPN) {
            self.sport = rc_src_port(self.qpn, self.attr.dest_qp_num);
        }

        if next != cur {
            tracing::debug!(qpn = self.qpn, from = ?cur, to = ?next, "modify_qp");
        }
        match next {
            QpState::Reset => self.reset(),
            QpState::Err => self.enter_error(ctx),
            _ => {
                self.resp.ensure_resources();
                self.attr.qp_state = next;
            }
        }
        Ok(())
    }

    fn check_values(
        attr: &QpAttr,
        given: QpAttrMask,
        gids: &[Ipv6Addr],
        max_mtu: Mtu,
    ) -> Result<()> {
        use QpAttrMask as M;
        let bad = |cond: bool, what: &'static str| {
            if cond {
                Err(Error::InvalidAttr(what))
            } else {
                Ok(())
            }
        };
        if given.contains(M::PKEY_INDEX) {
            bad(attr.pkey_index != 0, "pkey_index")?;
        }
        if given.contains(M::PORT) {
            bad(attr.port_num != 1, "port_num")?;
        }
        if given.contains(M::ACCESS_FLAGS) {
            let all = Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC;
            bad(
                !attr.qp_access_flags.difference(all).is_empty(),
                "qp_access_flags",
            )?;
        }
        if given.contains(M::PATH_MTU) {
            bad(attr.path_mtu > max_mtu, "path_mtu")?;
        }
        if given.contains(M::TIMEOUT) {
            bad(attr.timeout > 31, "timeout")?;
        }
        if given.contains(M::RETRY_CNT) {
            bad(attr.retry_cnt > 7, "retry_cnt")?;
        }
        if given.contains(M::RNR_RETRY) {
            bad(attr.rnr_retry > 7, "rnr_retry")?;
        }
        if given.contains(M::MIN_RNR_TIMER) {
            bad(attr.min_rnr_timer > 31, "min_rnr_timer")?;
        }
        if given.contains(M::MAX_QP_RD_ATOMIC) {
            bad(attr.max_rd_atomic > MAX_RD_ATOMIC, "max_rd_atomic")?;
        }
        if given.contains(M::MAX_DEST_RD_ATOMIC) {
            bad(
                attr.max_dest_rd_atomic > MAX_RD_ATOMIC,
                "max_dest_rd_atomic",
            )?;
        }
        if given.contains(M::DEST_QPN) {
            bad(attr.dest_qp_num > 0xff_ffff, "dest_qp_num")?;
        }
        if given.contains(M::AV) {
            check_av(&attr.av, gids)?;
        }
        Ok(())
    }

    /// Back to RESET: queues emptied without completions, transport state cleared.
    fn reset(&mut self) {
        self.sq.clear();
        self.rq.clear();
        self.req = Requester::default();
        self.comp = Completer::default();
        self.resp = Responder::default();
        self.timers = Timers::default();
        self.cc.clear();
        self.attr = QpAttr {
            cap: self.cap,
            ..QpAttr::default()
        };
    }

    /// A transport error moves the QP to ERR by itself: that is an asynchronous event
    /// (QP fatal) besides the flushed work requests.
    pub(crate) fn fail(&mut self, ctx: &mut Ctx<'_>) {
        if self.state() != QpState::Err {
            ctx.events.push(crate::verbs::AsyncEvent::QpFatal(self.qpn));
        }
        self.enter_error(ctx);
    }

    /// Moves to ERR: every outstanding send and receive WQE completes with WrFlushErr.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        if self.state() != QpState::Err {
            tracing::debug!(qpn = self.qpn, from = ?self.state(), "QP -> ERR");
        }
        self.attr.qp_state = QpState::Err;
        self.flush_sq(ctx);
        if let Some(wqe) = self.resp.abandon_message() {
            if self.srq.is_some() {
                // Taken from the SRQ by this QP: it completes here, flushed.
                let wc =
                    WorkCompletion::new(self.qpn, wqe.wr_id, WcOpcode::Recv, WcStatus::WrFlushErr);
                ctx.cqs.push(self.recv_cq, wc, ctx.counters);
            } else {
                self.rq.push_front(wqe);
            }
        }
        while let Some(r) = self.rq.pop_front() {
            let wc = WorkCompletion::new(self.qpn, r.wr_id, WcOpcode::Recv, WcStatus::WrFlushErr);
            ctx.cqs.push(self.recv_cq, wc, ctx.counters);
        }
        self.resp.clear_owed();
        self.timers.stop(Timer::AckTimeout);
        self.timers.stop(Timer::RnrWait);
    }

    /// Send-side error of UC/UD: flush the send queue, keep receiving (SQE).
    pub(crate) fn enter_sq_error(&mut self, ctx: &mut Ctx<'_>) {
        tracing::debug!(qpn = self.qpn, "QP -> SQE");
        self.attr.qp_state = QpState::Sqe;
        self.flush_sq(ctx);
    }

    fn flush_sq(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(w) = self.sq.pop_front() {
            let wc = WorkCompletion::new(
                self.qpn,
                w.wr.wr_id,
                w.wr.opcode.into(),
                WcStatus::WrFlushErr,
            );
            ctx.cqs.push(self.send_cq, wc, ctx.counters);
            self.keep_sg_list(w.wr.sg_list);
        }
        let psn = self.req.next_psn();
        self.req = Requester::starting_at(psn);
        self.comp.restart_at(psn);
        self.timers.stop(Timer::AckTimeout);
        self.timers.stop(Timer::RnrWait);
    }

    /// Completes the oldest send WQE with `status` (a completion is generated for errors
    /// and for signaled successes).
    pub(crate) fn complete_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        self.req.front_completed();
        if status != WcStatus::Success {
            ctx.counters.send_err += 1;
            tracing::debug!(
                qpn = self.qpn,
                wr_id = w.wr.wr_id,
                ?status,
                "send WQE failed"
            );
        }
        if status != WcStatus::Success || w.signaled {
            let mut wc = WorkCompletion::new(self.qpn, w.wr.wr_id, w.wr.opcode.into(), status);
            if status == WcStatus::Success {
                wc.byte_len = w.len;
            }
            ctx.cqs.push(self.send_cq, wc, ctx.counters);
        }
        self.keep_sg_list(w.wr.sg_list);
    }

    /// Keeps a retired WQE's gather list for a later post (see `spare_sg_lists`).
    fn keep_sg_list(&mut self, mut list: Vec<Sge>) {
        if list.capacity() > 0 && self.spare_sg_lists.len() < self.cap.max_send_wr as usize {
            list.clear();
            self.spare_sg_lists.push(list);
        }
    }

    /// An empty gather list, reused if one is spare.
    fn take_sg_list(&mut self) -> Vec<Sge> {
        self.spare_sg_lists.pop().unwrap_or_default()
    }

    /// Completes the local operations (binds, invalidations) that took effect and are
    /// now the oldest WQEs: they wait for nothing but their predecessors.
    pub(crate) fn complete_local_ops(&mut self, ctx: &mut Ctx<'_>) {
        while self
            .sq
            .front()
            .is_some_and(|w| w.wr.opcode.is_local() && w.assigned && w.local_err.is_none())
        {
            self.complete_front(ctx, WcStatus::Success);
        }
    }

    /// Send WQEs posted and not completed yet.
    pub(crate) fn sq_outstanding(&self) -> usize {
        self.sq.len()
    }
}

/// What [`check_av`] refuses an address vector whose two GIDs are of different IP
/// versions with (`InvalidAttr`'s text), so that callers can say what to do about it.
pub const GID_FAMILIES: &str = "av: source and destination GID families differ";

/// An address vector must name an existing source GID of the same IP family.
pub(crate) fn check_av(av: &crate::verbs::AddressVector, gids: &[Ipv6Addr]) -> Result<()> {
    let sgid = gids
        .get(usize::from(av.sgid_index))
        .ok_or(Error::InvalidAttr("sgid_index"))?;
    if sgid.to_ipv4_mapped().is_some() != av.dest_gid.to_ipv4_mapped().is_some() {
        return Err(Error::InvalidAttr(GID_FAMILIES));
    }
    if av.dest_gid.is_unspecified() {
        return Err(Error::InvalidAttr("av: unspecified destination GID"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ports_match_rxe() {
        assert_eq!(rc_src_port(0x11, 0x11), 0xc121);
        assert_eq!(rc_src_port(0x1c, 0x1c), 0xc310);
        assert_eq!(ud_src_port(0x14), 0xe8ea);
    }

    #[test]
    fn ack_timeout_encoding() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8192)));
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4096 << 14)));
    }

    #[test]
    fn transition_table_basics() {
        use QpAttrMask as M;
        assert!(transition(QpState::Reset, QpState::Rtr, QpType::Rc).is_none());
        assert!(transition(QpState::Rtr, QpState::Rtr, QpType::Rc).is_none());
        assert!(transition(QpState::Sqe, QpState::Rts, QpType::Rc).is_none());
        let (req, _) = transition(QpState::Init, QpState::Rtr, QpType::Rc).unwrap();
        assert!(req.contains(M::MAX_DEST_RD_ATOMIC | M::AV));
        let (req, _) = transition(QpState::Init, QpState::Rtr, QpType::Ud).unwrap();
        assert!(req.is_empty());
    }
}
