//! Responder: checks and executes incoming requests, and owes the requester ACKs, NAKs,
//! read responses and atomic ACKs (queued in order in `resp.out`, sent by
//! `responder_tx`).
//!
//! RC follows the IB spec's PSN rules: the expected PSN executes; a duplicate is answered
//! again (SEND/WRITE re-ACKed, READ re-executed from the duplicate PSN, atomics from the
//! result cache, never re-executed); a PSN ahead of the expected one gets one sequence
//! NAK until the gap closes. Fatal errors NAK and move the QP to ERR. UC drops
//! incomplete messages; UD checks the Q_Key and prepends the 40-byte GRH area.

use core::net::Ipv6Addr;

use ferroce_wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, ExtRepr, NakCode, Opcode, Operation, Position, Psn,
    Service, Syndrome,
};

use crate::mr::{sge_total, Access, AtomicOp, KeyKind};
use crate::qp::{Ctx, InMsg, Qp, Resource, RespOut};
use crate::requester::{packets, position};
use crate::tx::{ip_udp_len, write_ib, TxMeta};
use crate::verbs::{QpState, QpType, RecvWr, WcFlags, WcOpcode, WcStatus, WorkCompletion};

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
        let expected = self.resp.psn;
        let d = psn.distance(expected);
        if d < 0 {
            ctx.counters.duplicate_request += 1;
            return self.rc_duplicate(ctx, rx);
        }
        if d > 0 {
            ctx.counters.out_of_seq_request += 1;
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
                if matches!(op, Operation::Send | Operation::RdmaWrite) {
                    ctx.counters.rcvd_data_bytes += rx.payload.len() as u64;
                    self.resp.psn = psn.add(1);
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
                // Responses owed for earlier requests still go out, then the NAK.
                let owed = core::mem::take(&mut self.resp.out);
                self.enter_error(ctx);
                self.resp.out = owed;
                self.push_nak(ctx, psn, code);
            }
        }
    }

    /// Opcode sequence and length rules shared by RC and UC.
    fn check_sequence(&self, rx: &Rx<'_>) -> Result<(), Refuse> {
        let op = rx.bth.opcode;
        let pos = op.position();
        let inv = Refuse::Nak(NakCode::InvalidRequest, None);
        let in_send = matches!(self.resp.cur, Some(InMsg::Send { .. }));
        let in_write = matches!(self.resp.cur, Some(InMsg::Write { .. }));
        let continues = matches!(pos, Position::Middle | Position::Last);
        let ok = match (in_send, in_write) {
            (true, _) => op.operation() == Operation::Send && continues,
            (_, true) => op.operation() == Operation::RdmaWrite && continues,
            _ => !continues,
        };
        if !ok {
            return Err(inv);
        }
        let mtu = self.mtu() as usize;
        let n = rx.payload.len();
        let len_ok = match pos {
            Position::Only => n <= mtu,
            Position::First | Position::Middle => n == mtu,
            Position::Last => (1..=mtu).contains(&n),
        };
        if !len_ok && op.has_payload() {
            return Err(inv);
        }
        Ok(())
    }

    /// Executes the expected request. On success the responder state moved on (READ
    /// and atomic also advance the expected PSN and queue their responses).
    fn execute(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) -> Result<(), Refuse> {
        self.check_sequence(rx)?;
        let op = rx.bth.opcode;
        let pos = op.position();
        let end = matches!(pos, Position::Last | Position::Only);
        let inv_req = Refuse::Nak(NakCode::InvalidRequest, None);
        let access = self.attr.qp_access_flags;
        match op.operation() {
            Operation::Send => {
                if matches!(pos, Position::First | Position::Only) {
                    let wqe = self.take_recv(ctx).ok_or(Refuse::Rnr)?;
                    self.resp.cur = Some(InMsg::Send { wqe, offset: 0 });
                }
                let Some(InMsg::Send { wqe, offset }) = &mut self.resp.cur else {
                    return Err(inv_req);
                };
                let total = sge_total(&wqe.sg_list).unwrap_or(0);
                let n = rx.payload.len() as u32;
                if offset.checked_add(n).is_none_or(|e| e > total) {
                    return Err(Refuse::Nak(
                        NakCode::InvalidRequest,
                        Some(WcStatus::LocLenErr),
                    ));
                }
                if let Err(e) =
                    ctx.mrs
                        .scatter(self.pd, &wqe.sg_list, u64::from(*offset), rx.payload)
                {
                    tracing::debug!(qpn = self.qpn, %e, "receive WQE scatter failed");
                    return Err(Refuse::Nak(
                        NakCode::RemoteOperationalError,
                        Some(WcStatus::LocProtErr),
                    ));
                }
                *offset += n;
                if end {
                    let mut flags = WcFlags::empty();
                    let mut inv_rkey = 0;
                    if let Some(ieth) = rx.ext.ieth {
                        if let Err(e) = ctx.mrs.invalidate(self.pd, ieth.rkey) {
                            tracing::debug!(qpn = self.qpn, %e, "invalidate failed");
                            return Err(Refuse::Nak(
                                NakCode::InvalidRequest,
                                Some(WcStatus::RemInvReqErr),
                            ));
                        }
                        flags |= WcFlags::WITH_INV;
                        inv_rkey = ieth.rkey;
                    }
                    let Some(InMsg::Send { wqe, offset }) = self.resp.cur.take() else {
                        return Err(inv_req);
                    };
                    let mut wc =
                        WorkCompletion::new(self.qpn, wqe.wr_id, WcOpcode::Recv, WcStatus::Success);
                    wc.byte_len = offset;
                    if let Some(imm) = rx.ext.immdt {
                        flags |= WcFlags::WITH_IMM;
                        wc.imm_data = imm.imm;
                    }
                    wc.invalidated_rkey = inv_rkey;
                    wc.wc_flags = flags;
                    ctx.cqs.push(self.recv_cq, wc, ctx.counters);
                    self.resp.msn = self.resp.msn.wrapping_add(1) & Psn::MASK;
                }
                Ok(())
            }
            Operation::RdmaWrite => {
                if matches!(pos, Position::First | Position::Only) {
                    if !access.contains(Access::REMOTE_WRITE) {
                        return Err(inv_req);
                    }
                    let reth = rx.ext.reth.ok_or(inv_req)?;
                    if reth.dma_len > 0 {
                        ctx.mrs
                            .check(
                                reth.rkey,
                                KeyKind::Remote,
                                self.pd,
                                reth.va,
                                u64::from(reth.dma_len),
                                Access::REMOTE_WRITE,
                            )
                            .map_err(|e| {
                                tracing::debug!(qpn = self.qpn, %e, "RDMA WRITE refused");
                                Refuse::Nak(NakCode::RemoteAccessError, None)
                            })?;
                    }
                    self.resp.cur = Some(InMsg::Write {
                        va: reth.va,
                        rkey: reth.rkey,
                        resid: reth.dma_len,
                        total: reth.dma_len,
                    });
                }
                let Some(InMsg::Write {
                    va,
                    rkey,
                    resid,
                    total,
                }) = self.resp.cur.clone()
                else {
                    return Err(inv_req);
                };
                let n = rx.payload.len() as u32;
                if n > resid || (end && n != resid) {
                    return Err(inv_req);
                }
                // WRITE with immediate consumes a receive WQE: check before placing data.
                if end && rx.ext.immdt.is_some() && !self.has_recv(ctx) {
                    return Err(Refuse::Rnr);
                }
                if n > 0 {
                    let at = va.wrapping_add(u64::from(total - resid));
                    ctx.mrs
                        .write(
                            rkey,
                            KeyKind::Remote,
                            self.pd,
                            at,
                            Access::REMOTE_WRITE,
                            rx.payload,
                        )
                        .map_err(|_| Refuse::Nak(NakCode::RemoteAccessError, None))?;
                }
                if let Some(InMsg::Write { resid, .. }) = &mut self.resp.cur {
                    *resid -= n;
                }
                if end {
                    self.resp.cur = None;
                    ctx.counters.rdma_recvs += 1;
                    if let Some(imm) = rx.ext.immdt {
                        if let Some(wqe) = self.take_recv(ctx) {
                            let mut wc = WorkCompletion::new(
                                self.qpn,
                                wqe.wr_id,
                                WcOpcode::RecvRdmaWithImm,
                                WcStatus::Success,
                            );
                            wc.byte_len = total;
                            wc.imm_data = imm.imm;
                            wc.wc_flags = WcFlags::WITH_IMM;
                            ctx.cqs.push(self.recv_cq, wc, ctx.counters);
                        }
                    }
                    self.resp.msn = self.resp.msn.wrapping_add(1) & Psn::MASK;
                }
                Ok(())
            }
            Operation::RdmaReadRequest => {
                if !access.contains(Access::REMOTE_READ) {
                    return Err(inv_req);
                }
                let reth = rx.ext.reth.ok_or(inv_req)?;
                if self.active_reads() >= usize::from(self.attr.max_dest_rd_atomic) {
                    return Err(inv_req);
                }
                if reth.dma_len > 0 {
                    ctx.mrs
                        .check(
                            reth.rkey,
                            KeyKind::Remote,
                            self.pd,
                            reth.va,
                            u64::from(reth.dma_len),
                            Access::REMOTE_READ,
                        )
                        .map_err(|e| {
                            tracing::debug!(qpn = self.qpn, %e, "RDMA READ refused");
                            Refuse::Nak(NakCode::RemoteAccessError, None)
                        })?;
                }
                let psn = rx.bth.psn;
                let n = packets(reth.dma_len, self.mtu());
                let last_psn = psn.add(n - 1);
                let age = self.next_age();
                let slot = self.free_resource();
                self.resp.res[slot] = Resource::Read {
                    first_psn: psn,
                    last_psn,
                    start_psn: psn,
                    va: reth.va,
                    rkey: reth.rkey,
                    len: reth.dma_len,
                    next_psn: psn,
                    pending: true,
                    age,
                };
                self.push_resp(ctx, RespOut::Read { res: slot });
                self.resp.psn = last_psn.add(1);
                self.resp.msn = self.resp.msn.wrapping_add(1) & Psn::MASK;
                ctx.counters.rdma_recvs += 1;
                Ok(())
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                if !access.contains(Access::REMOTE_ATOMIC) {
                    return Err(inv_req);
                }
                let a = rx.ext.atomic_eth.ok_or(inv_req)?;
                if self.active_reads() >= usize::from(self.attr.max_dest_rd_atomic) {
                    return Err(inv_req);
                }
                if a.va % 8 != 0 {
                    return Err(inv_req);
                }
                let aop = if op.operation() == Operation::CompareSwap {
                    AtomicOp::CmpSwp {
                        compare: a.compare,
                        swap: a.swap_add,
                    }
                } else {
                    AtomicOp::FetchAdd(a.swap_add)
                };
                let orig = ctx.mrs.atomic(a.rkey, self.pd, a.va, aop).map_err(|e| {
                    tracing::debug!(qpn = self.qpn, %e, "atomic refused");
                    Refuse::Nak(NakCode::RemoteAccessError, None)
                })?;
                let psn = rx.bth.psn;
                let age = self.next_age();
                let slot = self.free_resource();
                self.resp.res[slot] = Resource::Atomic { psn, orig, age };
                self.push_resp(ctx, RespOut::AtomicAck { psn, orig });
                self.resp.psn = psn.add(1);
                self.resp.msn = self.resp.msn.wrapping_add(1) & Psn::MASK;
                Ok(())
            }
            _ => Err(inv_req),
        }
    }

    fn next_age(&mut self) -> u64 {
        self.resp.res_age += 1;
        self.resp.res_age
    }

    /// READs whose responses are still being sent.
    fn active_reads(&self) -> usize {
        self.resp
            .res
            .iter()
            .filter(|r| matches!(r, Resource::Read { pending: true, .. }))
            .count()
    }

    /// A free resource slot, else the oldest one not being sent.
    fn free_resource(&mut self) -> usize {
        let mut best: Option<(usize, u64)> = None;
        for (i, r) in self.resp.res.iter().enumerate() {
            let age = match r {
                Resource::Free => return i,
                Resource::Read { pending: true, .. } => continue,
                Resource::Read { age, .. } | Resource::Atomic { age, .. } => *age,
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
                self.resp.res.push(Resource::Free);
                self.resp.res.len() - 1
            }
        }
    }

    fn rc_duplicate(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        match rx.bth.opcode.operation() {
            Operation::Send | Operation::RdmaWrite => {
                // C9-105: acknowledge again with the last PSN executed.
                let syndrome = Syndrome::Ack {
                    credits: self.credits(),
                };
                let last = self.resp.psn.sub(1);
                self.push_resp(
                    ctx,
                    RespOut::Ack {
                        psn: last,
                        syndrome,
                    },
                );
            }
            Operation::RdmaReadRequest => {
                let Some(reth) = rx.ext.reth else {
                    ctx.counters.rx_malformed += 1;
                    return;
                };
                let mtu = self.mtu();
                let found = self.resp.res.iter().position(|r| {
                    matches!(r, Resource::Read { first_psn, last_psn, .. }
                        if !psn.before(*first_psn) && !psn.after(*last_psn))
                });
                let Some(i) = found else {
                    ctx.counters.rx_dup_unknown += 1;
                    return;
                };
                let Resource::Read { last_psn, .. } = self.resp.res[i] else {
                    return;
                };
                let n = packets(reth.dma_len, mtu);
                if psn.add(n - 1) != last_psn {
                    // A retried READ must end where the original did.
                    ctx.counters.rx_dup_unknown += 1;
                    return;
                }
                tracing::debug!(qpn = self.qpn, %psn, "duplicate READ: re-executing");
                if let Resource::Read {
                    start_psn,
                    va,
                    rkey,
                    len,
                    next_psn,
                    pending,
                    ..
                } = &mut self.resp.res[i]
                {
                    *start_psn = psn;
                    *va = reth.va;
                    *rkey = reth.rkey;
                    *len = reth.dma_len;
                    *next_psn = psn;
                    *pending = true;
                }
                if !self.resp.out.contains(&RespOut::Read { res: i }) {
                    self.push_resp(ctx, RespOut::Read { res: i });
                }
            }
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

    /// UC: no ACKs; a message with a lost packet is dropped whole.
    fn uc_request(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) {
        let psn = rx.bth.psn;
        let pos = rx.bth.opcode.position();
        let starts = matches!(pos, Position::First | Position::Only);
        if psn != self.resp.psn && self.resp.cur.is_some() {
            // Lost packets: abandon the message in progress.
            self.uc_abort(ctx);
        }
        self.resp.psn = psn.add(1);
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
        ctx.cqs.push(self.recv_cq, wc, ctx.counters);
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

    /// Writes the next responder packet (ACK, NAK, read response, atomic ACK). READ
    /// responses wait while `allow_paced` is false (the QP's DCQCN pacer holds them).
    pub(crate) fn responder_tx(
        &mut self,
        ctx: &mut Ctx<'_>,
        gids: &[Ipv6Addr],
        buf: &mut [u8],
        allow_paced: bool,
    ) -> Option<TxMeta> {
        if self.qp_type != QpType::Rc || self.state() == QpState::Reset {
            return None;
        }
        let item = *self.resp.out.front()?;
        let paced = matches!(item, RespOut::Read { .. });
        if paced && !allow_paced {
            return None;
        }
        let av = self.attr.av;
        let src = *gids.get(usize::from(av.sgid_index))?;
        let hl = ip_udp_len(&av.dest_gid);
        let dest_qp = self.attr.dest_qp_num;
        let msn = self.resp.msn;
        let ack = |syndrome| AethRepr { syndrome, msn };
        let credits = Syndrome::Ack {
            credits: self.credits(),
        };
        let out = buf.get_mut(hl..)?;
        let ib_len = match item {
            RespOut::Ack { psn, syndrome } => {
                self.resp.out.pop_front();
                let syndrome = match syndrome {
                    Syndrome::Ack { .. } => credits,
                    s => s,
                };
                let ext = ExtRepr {
                    aeth: Some(ack(syndrome)),
                    ..Default::default()
                };
                let bth = BthRepr::new(Opcode::RC_ACKNOWLEDGE, dest_qp, psn);
                write_ib(out, bth, ext, 0, |_| Ok::<(), ()>(())).ok()??
            }
            RespOut::AtomicAck { psn, orig } => {
                self.resp.out.pop_front();
                let ext = ExtRepr {
                    aeth: Some(ack(credits)),
                    atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
                    ..Default::default()
                };
                let bth = BthRepr::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, dest_qp, psn);
                write_ib(out, bth, ext, 0, |_| Ok::<(), ()>(())).ok()??
            }
            RespOut::Read { res } => {
                let Some(Resource::Read {
                    start_psn,
                    va,
                    rkey,
                    len,
                    next_psn,
                    pending: true,
                    ..
                }) = self.resp.res.get(res).copied()
                else {
                    self.resp.out.pop_front();
                    return self.responder_tx(ctx, gids, buf, allow_paced);
                };
                let mtu = self.mtu();
                let n = packets(len, mtu);
                let k = next_psn.distance(start_psn).max(0) as u32;
                let pos = position(k, n);
                let off = k * mtu;
                let plen = (len - off.min(len)).min(mtu);
                let mut ext = ExtRepr::default();
                if pos != Position::Middle {
                    ext.aeth = Some(ack(credits));
                }
                let opcode =
                    Opcode::lookup(Service::Rc, Operation::RdmaReadResponse, pos, false, false)?;
                let bth = BthRepr::new(opcode, dest_qp, next_psn);
                let pd = self.pd;
                let at = va.wrapping_add(u64::from(off));
                let r = write_ib(out, bth, ext, plen as usize, |o| {
                    if o.is_empty() {
                        // A zero-length READ names no memory: its R_Key and VA were not
                        // checked (C9-88) and are not used.
                        return Ok(());
                    }
                    ctx.mrs
                        .read(rkey, KeyKind::Remote, pd, at, Access::REMOTE_READ, o)
                });
                match r {
                    Ok(Some(n)) => {
                        let done = matches!(pos, Position::Last | Position::Only);
                        if let Some(Resource::Read {
                            next_psn, pending, ..
                        }) = self.resp.res.get_mut(res)
                        {
                            *next_psn = next_psn.add(1);
                            *pending = !done;
                        }
                        if done {
                            self.resp.out.pop_front();
                        }
                        n
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        // The region changed under a READ in progress.
                        tracing::debug!(qpn = self.qpn, %e, "read response source gone");
                        self.enter_error(ctx);
                        self.push_nak(ctx, next_psn, NakCode::RemoteAccessError);
                        // Send the NAK now: `None` would tell the caller nothing is queued.
                        return self.responder_tx(ctx, gids, buf, allow_paced);
                    }
                }
            }
        };
        Some(TxMeta {
            dst: av.dest_gid,
            src,
            traffic_class: av.traffic_class,
            flow_label: av.flow_label,
            sport: self.sport,
            ib_len,
            ecn: None,
            paced,
        })
    }
}
