//! Responder: checks and executes incoming requests, and owes the requester ACKs, NAKs,
//! read responses and atomic ACKs (queued in order in `Responder::out`,
//! sent by `responder_tx`).
//!
//! Executing a request is `execute.rs`; sending what is owed is `reply.rs`.
//!
//! RC follows the IB spec's PSN rules: the expected PSN executes; a duplicate is answered
//! again (SEND/WRITE re-ACKed, READ re-executed from the duplicate PSN, atomics from the
//! result cache, never re-executed); a PSN ahead of the expected one gets one sequence
//! NAK until the gap closes. Fatal errors NAK and move the QP to ERR. UC drops
//! incomplete messages; UD checks the Q_Key and prepends the 40-byte GRH area.

mod execute;
mod reply;

use std::collections::VecDeque;

use ferroce_wire::{NakCode, Operation, Position, Psn, Syndrome};

use crate::mr::sge_total;
use crate::qp::requester::packets;
use crate::qp::{Ctx, Qp, Rx, MAX_RESP_QUEUE};
use crate::verbs::{QpState, QpType, RecvWr, WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// The responder's own state: what it expects next, the message it is in, and what it
/// owes the requester.
#[derive(Debug, Clone, Default)]
pub(crate) struct Responder {
    /// The PSN the next new request must carry; earlier ones are duplicates, later ones
    /// mean packets were lost.
    expected_psn: Psn,
    /// Message sequence number: messages completed, echoed in every AETH so the
    /// requester can tell which ones finished.
    msn: u32,
    /// A NAK for the current gap (sequence error or RNR) was sent: one per gap.
    nak_sent: bool,
    /// The multi-packet message in progress, if any.
    cur: Option<InMsg>,
    /// Packets owed to the requester, in order.
    out: VecDeque<RespOut>,
    /// READs and atomics executed, kept to answer duplicates (max_dest_rd_atomic).
    res: Vec<Resource>,
    /// Counter handing out resource ages, to recycle the oldest slot first.
    res_age: u64,
}

impl Responder {
    /// The PSN the next new request must carry (RQ_PSN).
    pub(super) fn set_expected_psn(&mut self, psn: Psn) {
        self.expected_psn = psn;
    }

    /// Room for `n` READ/atomic resources (MAX_DEST_RD_ATOMIC); READ responses owed
    /// from the old slots are dropped.
    pub(super) fn size_resources(&mut self, n: usize) {
        self.res = vec![Resource::Free; n];
        self.out.retain(|o| !matches!(o, RespOut::Read { .. }));
    }

    /// The default resources of a QP leaving RESET without MAX_DEST_RD_ATOMIC.
    pub(super) fn ensure_resources(&mut self) {
        if self.res.is_empty() {
            self.res = vec![Resource::Free; 4];
        }
    }

    /// Abandons the message in progress; returns its receive WQE if it had one.
    pub(super) fn abandon_message(&mut self) -> Option<RecvWr> {
        match self.cur.take() {
            Some(InMsg::Send { wqe, .. }) => Some(wqe),
            _ => None,
        }
    }

    /// Drops every packet owed (the QP entered ERR).
    pub(super) fn clear_owed(&mut self) {
        self.out.clear();
    }

    /// A READ response waits to be sent (paced work for DCQCN).
    pub(super) fn read_response_waiting(&self) -> bool {
        matches!(self.out.front(), Some(RespOut::Read { .. }))
    }

    /// One more message completed.
    fn advance_msn(&mut self) {
        self.msn = self.msn.wrapping_add(1) & Psn::MASK;
    }

    fn next_age(&mut self) -> u64 {
        self.res_age += 1;
        self.res_age
    }

    /// READs whose responses are still being sent.
    fn active_reads(&self) -> usize {
        self.res
            .iter()
            .filter(|r| matches!(r, Resource::Read(ReadRes { pending: true, .. })))
            .count()
    }

    /// Stops one replay still being sent, so that a new READ or atomic can have its
    /// resource: true if there was one. A requester sends a new request only when it
    /// counts fewer than max_dest_rd_atomic outstanding, so a new request that finds
    /// them all in use means one of them answers a retry the requester no longer needs
    /// (rxe resends a READ whose responses it has but not yet processed); if it does
    /// need it, it retries again.
    fn cancel_a_replay(&mut self) -> bool {
        let Some(i) = self.res.iter().position(|r| {
            matches!(
                r,
                Resource::Read(ReadRes {
                    pending: true,
                    replay: true,
                    ..
                })
            )
        }) else {
            return false;
        };
        if let Resource::Read(r) = &mut self.res[i] {
            r.pending = false;
        }
        self.out.retain(|o| *o != RespOut::Read { res: i });
        true
    }

    /// A free resource slot, else the oldest one not being sent.
    fn free_resource(&mut self) -> usize {
        let mut best: Option<(usize, u64)> = None;
        for (i, r) in self.res.iter().enumerate() {
            let age = match r {
                Resource::Free => return i,
                Resource::Read(ReadRes { pending: true, .. }) => continue,
                Resource::Read(ReadRes { age, .. }) | Resource::Atomic { age, .. } => *age,
            };
            if best.is_none_or(|(_, a)| age < a) {
                best = Some((i, age));
            }
        }
        match best {
            Some((i, _)) => i,
            None => {
                // Only reachable with more pending reads than slots, which `active_reads`
                // prevents; grow rather than corrupt a pending stream.
                self.res.push(Resource::Free);
                self.res.len() - 1
            }
        }
    }
}

/// A message the responder is in the middle of.
#[derive(Debug, Clone)]
enum InMsg {
    /// A SEND: its receive WQE and the bytes placed so far.
    Send { wqe: RecvWr, offset: u32 },
    /// An RDMA WRITE: where it goes and the bytes still to come.
    Write {
        va: u64,
        rkey: u32,
        resid: u32,
        total: u32,
    },
}

/// A READ or atomic the responder executed, kept to answer duplicates.
#[derive(Debug, Clone, Copy)]
enum Resource {
    Free,
    Read(ReadRes),
    Atomic { psn: Psn, orig: u64, age: u64 },
}

/// An RDMA READ the responder executed: the original request (fixed once checked), and
/// the one response stream now owed for it (the original, or a duplicate's replay).
#[derive(Debug, Clone, Copy)]
struct ReadRes {
    /// PSN range of the original request's responses.
    first_psn: Psn,
    last_psn: Psn,
    /// The original request: a duplicate may replay only inside it.
    va: u64,
    rkey: u32,
    len: u32,
    /// The stream being sent: its first PSN, the address and length it covers (the
    /// original's, or a duplicate's tail of it), and the index of its next packet
    /// counted from `start_psn` (an index, never a PSN distance, so it cannot wrap).
    start_psn: Psn,
    cur_va: u64,
    cur_len: u32,
    next: u32,
    /// Responses remain to be sent.
    pending: bool,
    /// The stream answers a duplicate (a retry), not the original request.
    replay: bool,
    /// Replays of this READ so far ([`crate::Transmit::silences`]).
    replays: u8,
    age: u64,
}

impl ReadRes {
    /// The PSN of the stream's next packet.
    fn next_psn(&self) -> Psn {
        self.start_psn.add(self.next)
    }

    /// Whether `psn` is one of the original's response PSNs.
    fn covers(&self, psn: Psn) -> bool {
        offset(psn, self.first_psn) <= offset(self.last_psn, self.first_psn)
    }
}

/// How far `psn` is past `from`, modulo 2^24 (0..2^24, never negative).
fn offset(psn: Psn, from: Psn) -> u32 {
    psn.value().wrapping_sub(from.value()) & Psn::MASK
}

/// A packet the responder owes the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RespOut {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
    },
    /// Read responses of resource `res`.
    Read {
        res: usize,
    },
}

/// How far ahead of the expected PSN a request may be and still earn a sequence NAK.
/// A real gap is the packets a requester had in flight when one was lost: ferroce's
/// requester keeps at most 128 unacknowledged, rxe 128, NICs a few thousand (a lost
/// READ request also skips its response PSNs; the requester's timer recovers that
/// case). Anything further is dropped without a NAK, so a spoofer guessing PSNs at
/// random triggers one with probability 2^-12 instead of 1/2 per packet.
const NAK_WINDOW: i32 = 1 << 12;

/// The answer to a request that breaks the protocol's rules.
const INVALID_REQUEST: Refuse = Refuse::Nak(NakCode::InvalidRequest, None);

/// Why a request is not executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refuse {
    /// No receive WQE: RNR NAK (RC) or drop (UC).
    Rnr,
    /// NAK with this code; the current receive WQE (if any) completes with the status.
    Nak(NakCode, Option<WcStatus>),
}

impl Qp {
    /// A request packet (not a response) for this QP.
    pub(crate) fn handle_request(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        if !matches!(
            self.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            ctx.counters.rx_bad_state += 1;
            return;
        }
        match self.qp_type {
            QpType::Rc => self.rc_request(ctx, rx),
            QpType::Uc => self.uc_request(ctx, rx),
            QpType::Ud => self.ud_request(ctx, rx),
        }
    }

    fn rc_request(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        let expected = self.resp.expected_psn;
        let d = psn.distance(expected);
        if d < 0 {
            ctx.counters.duplicate_request += 1;
            return self.rc_duplicate(ctx, rx);
        }
        if d > 0 {
            ctx.counters.out_of_seq_request += 1;
            if d > NAK_WINDOW {
                // No requester can be this far ahead of us with packets in flight that we
                // lost: a blind spoofer's guess. NAKing would make the real requester
                // resend its whole window.
                ctx.counters.rx_psn_out_of_window += 1;
                return;
            }
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                self.push_nak(ctx, expected, NakCode::PsnSequenceError);
            }
            return;
        }
        match self.execute(ctx, rx) {
            Ok(()) => {
                self.resp.nak_sent = false;
                let op = rx.bth.opcode.operation();
                if matches!(
                    op,
                    Operation::Send | Operation::RdmaWrite | Operation::AtomicWrite
                ) {
                    ctx.counters.rcvd_data_bytes += rx.payload.len() as u64;
                    self.resp.expected_psn = psn.add(1);
                    if rx.bth.ack_req {
                        let syndrome = Syndrome::Ack {
                            credits: self.credits(),
                        };
                        self.push_resp(ctx, RespOut::Ack { psn, syndrome });
                    } else {
                        ctx.counters.ack_deferred += 1;
                    }
                }
            }
            Err(Refuse::Rnr) => {
                ctx.counters.send_rnr_err += 1;
                tracing::debug!(qpn = self.qpn, %psn, "no receive WQE: RNR NAK");
                self.resp.nak_sent = true;
                let timer = self.attr.min_rnr_timer;
                self.push_resp(
                    ctx,
                    RespOut::Ack {
                        psn,
                        syndrome: Syndrome::RnrNak { timer },
                    },
                );
            }
            Err(Refuse::Nak(code, status)) => {
                if let (Some(status), Some(InMsg::Send { wqe, offset })) =
                    (status, self.resp.cur.take())
                {
                    let mut wc = WorkCompletion::new(self.qpn, wqe.wr_id, WcOpcode::Recv, status);
                    wc.byte_len = offset;
                    ctx.cqs.push(self.recv_cq, wc, ctx.counters);
                }
                self.refuse_fatal(ctx, psn, code);
            }
        }
    }

    fn rc_duplicate(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        match rx.bth.opcode.operation() {
            Operation::Send | Operation::RdmaWrite | Operation::AtomicWrite => {
                // C9-105: acknowledge again with the last PSN executed.
                let syndrome = Syndrome::Ack {
                    credits: self.credits(),
                };
                let last = self.resp.expected_psn.sub(1);
                self.push_resp(
                    ctx,
                    RespOut::Ack {
                        psn: last,
                        syndrome,
                    },
                );
            }
            Operation::RdmaReadRequest => self.rc_duplicate_read(ctx, rx),
            Operation::CompareSwap | Operation::FetchAdd => {
                let found = self.resp.res.iter().find_map(|r| match r {
                    Resource::Atomic { psn: p, orig, .. } if *p == psn => Some(*orig),
                    _ => None,
                });
                match found {
                    Some(orig) => {
                        tracing::debug!(qpn = self.qpn, %psn, "duplicate atomic: cached result");
                        self.push_resp(ctx, RespOut::AtomicAck { psn, orig });
                    }
                    None => ctx.counters.rx_dup_unknown += 1,
                }
            }
            _ => ctx.counters.rx_bad_opcode += 1,
        }
    }

    /// A duplicate RDMA READ (a requester's retry). It must name a READ still held as a
    /// resource and lie inside it: same R_Key, its bytes a tail of the original's
    /// starting at the packet its PSN names, ending on the original's last PSN. Then the
    /// responses restart at its PSN, from its address. Anything else asks for memory the
    /// original never covered: NAK invalid request (the spec's rule for a duplicate
    /// READ outside the original). While the READ's response stream is still being sent
    /// a duplicate is dropped: there is one stream per READ, and a requester that lost
    /// part of it retries again once it ends, so a flood of duplicates cannot multiply
    /// the bytes sent (each replay is at most the original's length).
    fn rc_duplicate_read(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        let Some(reth) = rx.ext.reth else {
            ctx.counters.rx_malformed += 1;
            return;
        };
        let found = self.resp.res.iter().position(|r| match r {
            Resource::Read(rr) => rr.covers(psn),
            _ => false,
        });
        let Some(i) = found else {
            ctx.counters.rx_dup_unknown += 1;
            return;
        };
        let Resource::Read(orig) = self.resp.res[i] else {
            return;
        };
        let mtu = self.mtu();
        let k = offset(psn, orig.first_psn);
        // Bytes of the original before packet k; k < packets(len) <= 2^23, so this fits.
        let skip = u64::from(k) * u64::from(mtu);
        let inside = reth.rkey == orig.rkey
            && skip <= u64::from(orig.len)
            && reth.va == orig.va.wrapping_add(skip)
            && u64::from(reth.dma_len) == u64::from(orig.len) - skip
            && psn.add(packets(reth.dma_len, mtu) - 1) == orig.last_psn;
        if !inside {
            ctx.counters.rx_dup_read_outside += 1;
            tracing::debug!(qpn = self.qpn, %psn, "duplicate READ outside the original");
            return self.refuse_fatal(ctx, psn, NakCode::InvalidRequest);
        }
        if orig.pending {
            ctx.counters.rx_dup_read_busy += 1;
            return;
        }
        tracing::debug!(qpn = self.qpn, %psn, "duplicate READ: replaying");
        if let Resource::Read(r) = &mut self.resp.res[i] {
            r.start_psn = psn;
            r.cur_va = reth.va;
            r.cur_len = reth.dma_len;
            r.next = 0;
            r.pending = true;
            r.replay = true;
            r.replays = r.replays.saturating_add(1);
        }
        if !self.resp.out.contains(&RespOut::Read { res: i }) {
            self.push_resp(ctx, RespOut::Read { res: i });
        }
    }

    /// A request the QP cannot go on from: responses owed for earlier requests still go
    /// out, then the NAK, and the QP is in ERR.
    fn refuse_fatal(&mut self, ctx: &mut Ctx<'_>, psn: Psn, code: NakCode) {
        let owed = core::mem::take(&mut self.resp.out);
        self.fail(ctx);
        self.resp.out = owed;
        self.push_nak(ctx, psn, code);
    }

    /// UC: no ACKs; a message with a lost packet is dropped whole.
    fn uc_request(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        let pos = rx.bth.opcode.position();
        let starts = matches!(pos, Position::First | Position::Only);
        if psn != self.resp.expected_psn && self.resp.cur.is_some() {
            // Lost packets: abandon the message in progress.
            self.uc_abort(ctx);
        }
        self.resp.expected_psn = psn.add(1);
        if starts && self.resp.cur.is_some() {
            // A new message while one is open: the old one lost its end.
            self.uc_abort(ctx);
        }
        if !starts && self.resp.cur.is_none() {
            ctx.counters.rx_uc_dropped += 1;
            return;
        }
        match self.execute(ctx, rx) {
            Ok(()) => ctx.counters.rcvd_data_bytes += rx.payload.len() as u64,
            Err(Refuse::Rnr) => {
                ctx.counters.rx_no_recv_wqe += 1;
                self.uc_abort(ctx);
            }
            Err(Refuse::Nak(code, status)) => {
                tracing::debug!(qpn = self.qpn, %psn, ?code, "UC message dropped");
                if let Some(status) = status {
                    if let Some(InMsg::Send { wqe, offset }) = self.resp.cur.take() {
                        let mut wc =
                            WorkCompletion::new(self.qpn, wqe.wr_id, WcOpcode::Recv, status);
                        wc.byte_len = offset;
                        ctx.cqs.push(self.recv_cq, wc, ctx.counters);
                    }
                }
                self.uc_abort(ctx);
            }
        }
    }

    /// Drops the UC message in progress; its receive WQE is reused for the next one.
    fn uc_abort(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(m) = self.resp.cur.take() {
            ctx.counters.rx_uc_dropped += 1;
            if let InMsg::Send { wqe, .. } = m {
                self.return_recv(ctx, wqe);
            }
        }
    }

    /// UD: one-packet SENDs with a DETH; the receive buffer gets the GRH area first.
    fn ud_request(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let Some(deth) = rx.ext.deth else {
            ctx.counters.rx_malformed += 1;
            return;
        };
        if deth.qkey != self.attr.qkey {
            ctx.counters.rx_bad_qkey += 1;
            tracing::trace!(qpn = self.qpn, qkey = deth.qkey, "UD Q_Key mismatch");
            return;
        }
        if rx.payload.len() > self.mtu() as usize {
            ctx.counters.rx_malformed += 1;
            return;
        }
        let Some(wqe) = self.take_recv(ctx) else {
            ctx.counters.rx_no_recv_wqe += 1;
            return;
        };
        let wc = self.ud_place(ctx, &wqe, rx, deth.src_qp);
        ctx.cqs
            .push_solicited(self.recv_cq, wc, rx.bth.solicited, ctx.counters);
    }

    fn ud_place(
        &self,
        ctx: &mut Ctx<'_>,
        wqe: &RecvWr,
        rx: &Rx<'_>,
        src_qp: u32,
    ) -> WorkCompletion {
        const GRH: usize = 40;
        let total = sge_total(&wqe.sg_list).unwrap_or(0) as usize;
        let mut wc = WorkCompletion::new(self.qpn, wqe.wr_id, WcOpcode::Recv, WcStatus::Success);
        if total < GRH + rx.payload.len() {
            wc.status = WcStatus::LocLenErr;
            return wc;
        }
        // As rdma-core apps expect: an IPv6 header fills the 40 bytes; an IPv4 header
        // sits in the last 20, after 20 zero bytes.
        let mut grh = [0u8; GRH];
        let ip = rx.ip_header;
        if ip.len() >= 40 && ip[0] >> 4 == 6 {
            grh.copy_from_slice(&ip[..40]);
        } else if ip.len() >= 20 {
            grh[20..].copy_from_slice(&ip[..20]);
        }
        let placed = ctx
            .mrs
            .scatter(self.pd, &wqe.sg_list, 0, &grh)
            .and_then(|()| {
                ctx.mrs
                    .scatter(self.pd, &wqe.sg_list, GRH as u64, rx.payload)
            });
        if placed.is_err() {
            wc.status = WcStatus::LocProtErr;
            return wc;
        }
        wc.byte_len = (GRH + rx.payload.len()) as u32;
        wc.src_qp = src_qp;
        wc.src_gid = Some(rx.src_gid);
        wc.wc_flags = WcFlags::GRH;
        if let Some(imm) = rx.ext.immdt {
            wc.wc_flags |= WcFlags::WITH_IMM;
            wc.imm_data = imm.imm;
        }
        wc
    }
}

impl Qp {
    /// The next receive WQE: from the SRQ if the QP has one, else its own queue.
    fn take_recv(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvWr> {
        match self.srq {
            Some(id) => ctx.srqs.get_mut(id)?.queue.pop_front(),
            None => self.rq.pop_front(),
        }
    }

    /// Puts back a receive WQE taken for a message that was then abandoned.
    fn return_recv(&mut self, ctx: &mut Ctx<'_>, wqe: RecvWr) {
        match self.srq {
            Some(id) => {
                if let Some(s) = ctx.srqs.get_mut(id) {
                    s.queue.push_front(wqe);
                }
            }
            None => self.rq.push_front(wqe),
        }
    }

    /// Whether a receive WQE is available.
    fn has_recv(&self, ctx: &Ctx<'_>) -> bool {
        match self.srq {
            Some(id) => ctx.srqs.get(id).is_some_and(|s| !s.queue.is_empty()),
            None => !self.rq.is_empty(),
        }
    }

    /// The AETH credit code for the receive WQEs posted now; "no limit" (31) for a QP on
    /// an SRQ, whose WQEs other QPs may take at any time.
    fn credits(&self) -> u8 {
        if self.srq.is_some() {
            return ferroce_wire::Syndrome::UNLIMITED_CREDITS;
        }
        let n = self.rq.len() as u32;
        ferroce_wire::aeth::CREDITS
            .iter()
            .rposition(|&c| c <= n)
            .unwrap_or(0) as u8
    }

    /// Queues a responder packet; consecutive plain ACKs coalesce into the newest.
    fn push_resp(&mut self, ctx: &mut Ctx<'_>, item: RespOut) {
        if let (
            RespOut::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            },
            Some(RespOut::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            }),
        ) = (item, self.resp.out.back())
        {
            if let Some(b) = self.resp.out.back_mut() {
                *b = item;
            }
            return;
        }
        if self.resp.out.len() >= MAX_RESP_QUEUE {
            ctx.counters.tx_queue_full += 1;
            return;
        }
        if let RespOut::Ack {
            syndrome: Syndrome::Nak(_) | Syndrome::RnrNak { .. },
            ..
        } = item
        {
            ctx.counters.naks_sent += 1;
        }
        self.resp.out.push_back(item);
    }

    /// Queues a NAK.
    fn push_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, code: NakCode) {
        tracing::debug!(qpn = self.qpn, %psn, ?code, "NAK");
        self.push_resp(
            ctx,
            RespOut::Ack {
                psn,
                syndrome: Syndrome::Nak(code),
            },
        );
    }
}
