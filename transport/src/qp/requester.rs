//! Requester: turns send WQEs into request packets, one per `poll_transmit` call.
//!
//! Segments messages by the path MTU, gathers payload straight from registered memory,
//! assigns PSNs (a READ consumes one per response packet), sets AckReq on the last packet
//! of a message and every [`MAX_PKTS_PER_ACK`] packets, and holds back for the send
//! window, `max_rd_atomic`, fences, SQD and RNR waits. Go-back-N is just the completer
//! moving the requester's position back (see `Qp::rewind_to`).
//!
//! Sending one packet is four steps: `Qp::decide` picks the WQE and packet (or holds
//! back), `Qp::headers` builds its headers, `Qp::payload` writes it with its payload,
//! and `Qp::commit` advances the requester past it.

use core::net::Ipv6Addr;

use ferroce_wire::icrc_fold::{self, PayloadCrc};
use ferroce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtRepr, IethRepr, ImmDtRepr, Opcode, Operation, Position,
    Psn, RethRepr, Service,
};

use crate::mr::Access;
use crate::qp::timers::Timer;
use crate::qp::{ack_timeout, Ctx, Qp, MAX_PKTS_PER_ACK};
use crate::tx::{ip_udp_len, write_ib_folding, TxMeta};
use crate::verbs::{QpState, QpType, SendFlags, WcStatus, WrOpcode};

/// The requester's own state: where it is in the send queue and which PSNs it used.
#[derive(Debug, Clone, Default)]
pub(crate) struct Requester {
    /// Index in the send queue of the WQE being sent (WQEs before it are sent and wait
    /// for their acknowledgement).
    idx: usize,
    /// Bytes of that WQE already sent (READ: already requested), so a message resumes
    /// mid-way after the window or the pacer held it.
    offset: u32,
    /// The PSN the next packet carries (a rewind moves it back for go-back-N).
    next_psn: Psn,
    /// One past the highest PSN ever sent: the end of the outstanding range, which
    /// tells a resend from a first send and a ghost ACK from a real one.
    first_unsent_psn: Psn,
    /// Packets sent since the last one asking for an ACK.
    noack_pkts: u32,
}

impl Requester {
    /// A requester at the start of the send queue whose next packet carries `psn`.
    pub(super) fn starting_at(psn: Psn) -> Requester {
        Requester {
            next_psn: psn,
            first_unsent_psn: psn,
            ..Requester::default()
        }
    }

    /// Both PSNs moved to `psn` (SQ_PSN), the position in the queue kept.
    pub(super) fn set_psn(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.first_unsent_psn = psn;
    }

    /// The PSN the next packet carries.
    pub(super) fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// One past the highest PSN ever sent.
    pub(super) fn first_unsent_psn(&self) -> Psn {
        self.first_unsent_psn
    }

    /// Whether WQEs of a `sq_len`-long send queue wait to be sent (or resent).
    pub(super) fn has_unsent(&self, sq_len: usize) -> bool {
        sq_len > self.idx
    }

    /// The oldest WQE left the send queue: indices shift down by one.
    pub(super) fn front_completed(&mut self) {
        if self.idx > 0 {
            self.idx -= 1;
        } else {
            self.offset = 0;
        }
    }
}

/// One request packet as `Qp::headers` builds it.
#[derive(Debug)]
struct Request {
    /// The WQE's index in the send queue.
    idx: usize,
    /// Byte offset of this packet's payload in the message.
    offset: u32,
    operation: Operation,
    payload_len: u32,
    /// PSNs the packet consumes (a READ request: one per response packet).
    consumed: u32,
    /// Last (or only) packet of its message.
    end: bool,
    /// `None` only for a WR that should not have passed `post_send`.
    opcode: Option<Opcode>,
    bth: BthRepr,
    ext: ExtRepr,
    dst: Ipv6Addr,
    src: Ipv6Addr,
    traffic_class: u8,
    flow_label: u32,
}

/// Position of packet `k` of an `n`-packet message.
pub(crate) fn position(k: u32, n: u32) -> Position {
    match (k, n) {
        (_, 0 | 1) => Position::Only,
        (0, _) => Position::First,
        (k, n) if k + 1 >= n => Position::Last,
        _ => Position::Middle,
    }
}

/// Packets of a `len`-byte message at `mtu` (a zero-byte message is one packet).
pub(crate) fn packets(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

impl Qp {
    fn service(&self) -> Service {
        match self.qp_type {
            QpType::Rc => Service::Rc,
            QpType::Uc => Service::Uc,
            QpType::Ud => Service::Ud,
        }
    }

    /// Writes the next request packet into `buf` (IB part after the IP/UDP headers).
    pub(super) fn requester_tx(
        &mut self,
        ctx: &mut Ctx<'_>,
        gids: &[Ipv6Addr],
        split_writes: bool,
        buf: &mut [u8],
    ) -> Option<TxMeta> {
        let idx = self.decide(ctx)?;
        let mut req = self.headers(idx, gids, split_writes)?;
        let Some(opcode) = req.opcode else {
            // Not reachable for WRs that passed post_send; fail the WQE rather than panic.
            self.local_error(ctx, WcStatus::LocQpOpErr);
            return None;
        };
        req.bth.opcode = opcode;
        let hl = ip_udp_len(&req.dst);
        let (ib_len, payload_crc) = self.payload(ctx, &req, buf.get_mut(hl..)?)?;
        self.commit(ctx, &req);
        Some(TxMeta {
            dst: req.dst,
            src: req.src,
            traffic_class: req.traffic_class,
            flow_label: req.flow_label,
            sport: self.sport,
            ib_len,
            ecn: None,
            paced: true,
            silences: self.comp.timeouts_in_a_row(),
            payload_crc,
        })
    }

    /// Decide: the send-queue index of the WQE whose next packet goes now, or `None` to
    /// hold back (state, RNR wait, fence, `max_rd_atomic`, SQD, send window). Starting a
    /// message assigns its PSNs and checks its local keys.
    fn decide(&mut self, ctx: &mut Ctx<'_>) -> Option<usize> {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            return None;
        }
        if self.timers.is_armed(Timer::RnrWait) {
            return None;
        }
        self.run_local_ops(ctx);
        let idx = self.req.idx;
        let mtu = self.mtu();
        let resending = self.req.next_psn.before(self.req.first_unsent_psn);
        let wqe = self.sq.get(idx)?;
        if wqe.local_err.is_some() || wqe.wr.opcode.is_local() {
            // A failed WQE waits for the WQEs before it to complete, then fails in order;
            // a local operation still here waits for a fence or SQD to end.
            return None;
        }
        let op = wqe.wr.opcode;

        if self.req.offset == 0 {
            // Starting (or restarting) a message.
            if self.state() == QpState::Sqd && !resending {
                return None;
            }
            // Only a fence and a READ or atomic wait for earlier ones: a plain WRITE or
            // SEND skips the walk over the send queue (0.6% of all CPU of a 4 KiB WRITE
            // stream, 128 WQEs deep, when every message walked it).
            let fenced = wqe.wr.flags.contains(SendFlags::FENCE);
            if fenced || op.is_read_or_atomic() {
                let earlier_rd_atomic = self.earlier_rd_atomic(idx);
                if fenced && earlier_rd_atomic > 0 {
                    return None;
                }
                if op.is_read_or_atomic()
                    && earlier_rd_atomic >= usize::from(self.attr.max_rd_atomic.max(1))
                {
                    return None;
                }
            }
            let need = if op.is_read_or_atomic() {
                Access::LOCAL_WRITE
            } else {
                Access::empty()
            };
            if wqe.inline.is_none() {
                if let Err(e) = ctx.mrs.check_sges(self.pd, &wqe.wr.sg_list, need) {
                    tracing::debug!(qpn = self.qpn, wr_id = wqe.wr.wr_id, %e, "local protection error");
                    self.local_error(ctx, WcStatus::LocProtErr);
                    return None;
                }
            }
            let npkts = if op.is_atomic() || self.qp_type == QpType::Ud {
                1
            } else {
                packets(wqe.len, mtu)
            };
            let psn = self.req.next_psn;
            let w = &mut self.sq[idx];
            w.first_psn = psn;
            w.npkts = npkts;
            w.assigned = true;
        }
        if self.qp_type == QpType::Rc
            && self.req.next_psn.distance(self.comp.oldest_unacked_psn())
                >= self.comp.send_window(self.full_window())
        {
            return None;
        }
        Some(idx)
    }

    /// Local operations (memory window binds, local invalidations) at the requester's
    /// position take effect now, in send-queue order: after every WQE before them was
    /// sent, before any after them is. They send nothing and consume no PSN; each
    /// completes once everything before it has. A go-back-N rewind passes over them
    /// (`assigned`): they take effect once.
    fn run_local_ops(&mut self, ctx: &mut Ctx<'_>) {
        let start = self.req.idx;
        while let Some(w) = self.sq.get(self.req.idx) {
            if !w.wr.opcode.is_local() || self.req.offset != 0 || w.local_err.is_some() {
                break;
            }
            if !w.assigned {
                if self.state() == QpState::Sqd {
                    break;
                }
                let fenced = w.wr.flags.contains(SendFlags::FENCE)
                    && self.earlier_rd_atomic(self.req.idx) > 0;
                if fenced {
                    break;
                }
                let (res, fail) = match (w.wr.opcode, &w.wr.bind_mw) {
                    (WrOpcode::BindMw, Some(b)) => (
                        ctx.mrs.bind_mw(self.pd, self.qpn, b).map(|_| ()),
                        WcStatus::MwBindErr,
                    ),
                    _ => (
                        ctx.mrs
                            .invalidate_window(self.pd, None, w.wr.invalidate_rkey),
                        WcStatus::LocQpOpErr,
                    ),
                };
                if let Err(e) = res {
                    tracing::debug!(qpn = self.qpn, wr_id = w.wr.wr_id, %e, "local operation failed");
                    // The local operations before it that took effect complete first, so
                    // that the failed one is the oldest and fails (with the QP) now.
                    self.complete_local_ops(ctx);
                    self.local_error(ctx, fail);
                    return;
                }
                let psn = self.req.next_psn;
                let w = &mut self.sq[self.req.idx];
                w.first_psn = psn;
                w.npkts = 0;
                w.assigned = true;
                w.sent_all = true;
            }
            self.req.idx += 1;
        }
        if self.req.idx != start {
            self.complete_local_ops(ctx);
        }
    }

    /// READs and atomics among the send queue's first `idx` WQEs (outstanding ones: a
    /// fence and `max_rd_atomic` wait for them).
    fn earlier_rd_atomic(&self, idx: usize) -> usize {
        self.sq
            .iter()
            .take(idx)
            .filter(|w| w.wr.opcode.is_read_or_atomic())
            .count()
    }

    /// Headers: the BTH and extension headers, addresses and payload length of the next
    /// packet of WQE `idx`; `None` when it cannot be addressed (no UD destination or
    /// source GID).
    fn headers(&self, idx: usize, gids: &[Ipv6Addr], split_writes: bool) -> Option<Request> {
        let mtu = self.mtu();
        let w = &self.sq[idx];
        let op = w.wr.opcode;
        let k = self.req.offset / mtu;
        // Split: each packet its own WRITE ONLY (see `Endpoint::set_split_writes`). RC
        // only: its go-back-N delivers every packet in order, while a UC responder that
        // loses one packet of a message must drop the rest, not write it.
        let split =
            split_writes && self.qp_type == QpType::Rc && op == WrOpcode::RdmaWrite && w.npkts > 1;
        let pos = if split {
            Position::Only
        } else {
            position(k, w.npkts)
        };
        let end = k + 1 >= w.npkts;
        let psn = self.req.next_psn;
        let mut ext = ExtRepr::default();
        let (operation, payload_len, consumed) = match op {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => {
                let n = (w.len - self.req.offset).min(mtu);
                (Operation::Send, n, 1)
            }
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                let n = (w.len - self.req.offset).min(mtu);
                if matches!(pos, Position::First | Position::Only) {
                    // The RETH names the bytes its message carries from here: the whole
                    // WQE (a FIRST or ONLY starts at offset 0), or, split, this packet.
                    ext.reth = Some(RethRepr {
                        va: w.wr.remote_addr.wrapping_add(u64::from(self.req.offset)),
                        rkey: w.wr.rkey,
                        dma_len: if split { n } else { w.len },
                    });
                }
                (Operation::RdmaWrite, n, 1)
            }
            WrOpcode::RdmaRead => {
                let off = self.req.offset;
                ext.reth = Some(RethRepr {
                    va: w.wr.remote_addr.wrapping_add(u64::from(off)),
                    rkey: w.wr.rkey,
                    dma_len: w.len - off,
                });
                (Operation::RdmaReadRequest, 0, w.npkts - k)
            }
            // Never here: `decide` does not pick local operations.
            WrOpcode::BindMw | WrOpcode::LocalInv => return None,
            WrOpcode::AtomicWrite => {
                // One packet: the RETH names the 8 bytes, the payload is the value (taken
                // at post time, as inline data).
                ext.reth = Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.len,
                });
                (Operation::AtomicWrite, w.len, 1)
            }
            WrOpcode::AtomicCmpSwp | WrOpcode::AtomicFetchAdd => {
                ext.atomic_eth = Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: if op == WrOpcode::AtomicCmpSwp {
                        w.wr.swap
                    } else {
                        w.wr.compare_add
                    },
                    compare: if op == WrOpcode::AtomicCmpSwp {
                        w.wr.compare_add
                    } else {
                        0
                    },
                });
                let o = if op == WrOpcode::AtomicCmpSwp {
                    Operation::CompareSwap
                } else {
                    Operation::FetchAdd
                };
                (o, 0, 1)
            }
        };
        let imm = end && matches!(op, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
        let inv = end && op == WrOpcode::SendWithInv;
        if imm {
            ext.immdt = Some(ImmDtRepr { imm: w.wr.imm_data });
        }
        if inv {
            ext.ieth = Some(IethRepr {
                rkey: w.wr.invalidate_rkey,
            });
        }
        let opcode_pos = if matches!(
            operation,
            Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd
        ) {
            Position::Only
        } else {
            pos
        };
        let (dest_qp, dst, sgid_idx, tc, flow) = if self.qp_type == QpType::Ud {
            let ud = w.wr.ud?;
            ext.deth = Some(DethRepr {
                qkey: if ud.qkey & 0x8000_0000 != 0 {
                    self.attr.qkey
                } else {
                    ud.qkey
                },
                src_qp: self.qpn,
            });
            (
                ud.dest_qpn,
                ud.av.dest_gid,
                ud.av.sgid_index,
                ud.av.traffic_class,
                ud.av.flow_label,
            )
        } else {
            let av = &self.attr.av;
            (
                self.attr.dest_qp_num,
                av.dest_gid,
                av.sgid_index,
                av.traffic_class,
                av.flow_label,
            )
        };
        let src = *gids.get(usize::from(sgid_idx))?;
        let opcode = Opcode::lookup(self.service(), operation, opcode_pos, imm, inv);
        let ack_req =
            self.qp_type == QpType::Rc && (end || self.req.noack_pkts + 1 >= MAX_PKTS_PER_ACK);
        let bth = BthRepr {
            solicited: end && w.wr.flags.contains(SendFlags::SOLICITED),
            ack_req,
            // The opcode is filled in once `opcode` is known to exist.
            ..BthRepr::new(opcode.unwrap_or(Opcode::RC_SEND_ONLY), dest_qp, psn)
        };
        Some(Request {
            idx,
            offset: self.req.offset,
            operation,
            payload_len,
            consumed,
            end,
            opcode,
            bth,
            ext,
            dst,
            src,
            traffic_class: tc,
            flow_label: flow,
        })
    }

    /// Payload: writes the packet into `out` (IB headers, then the payload gathered
    /// from registered memory or the inline copy); returns its IB length and, where the
    /// payload was folded into a CRC as it was gathered ([`icrc_fold`]), that CRC. A
    /// gather failure is a local protection error of the WQE.
    fn payload(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: &Request,
        out: &mut [u8],
    ) -> Option<(usize, Option<PayloadCrc>)> {
        let w = &self.sq[req.idx];
        let offset = req.offset;
        let pd = self.pd;
        let fold = icrc_fold::for_payload(req.payload_len as usize);
        let res = write_ib_folding(
            out,
            req.bth,
            req.ext,
            req.payload_len as usize,
            |out| match (&w.inline, fold) {
                (Some(data), _) => {
                    let s = offset as usize;
                    out.copy_from_slice(&data[s..s + out.len()]);
                    Ok(None)
                }
                (None, Some(f)) => ctx
                    .mrs
                    .gather_folding(pd, &w.wr.sg_list, u64::from(offset), out, f)
                    .map(Some),
                (None, None) => ctx
                    .mrs
                    .gather(pd, &w.wr.sg_list, u64::from(offset), out)
                    .map(|()| None),
            },
        );
        match res {
            Ok(Some(w)) => Some(w),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(qpn = self.qpn, %e, "gather failed");
                self.local_error(ctx, WcStatus::LocProtErr);
                None
            }
        }
    }

    /// Commit: the packet is written, so the requester moves past it (PSN, position,
    /// ACK request count), the ACK timeout is armed (RC), and an unacknowledged service
    /// completes the WQE once its last packet is out.
    fn commit(&mut self, ctx: &mut Ctx<'_>, req: &Request) {
        let psn = req.bth.psn;
        if psn.before(self.req.first_unsent_psn) {
            ctx.counters.retransmitted_pkts += 1;
        } else if req.offset == 0
            && matches!(
                req.operation,
                Operation::RdmaWrite | Operation::RdmaReadRequest
            )
        {
            ctx.counters.rdma_sends += 1;
        }
        self.req.noack_pkts = if req.bth.ack_req {
            0
        } else {
            self.req.noack_pkts + 1
        };
        self.req.next_psn = psn.add(req.consumed);
        if self.req.next_psn.after(self.req.first_unsent_psn) {
            self.req.first_unsent_psn = self.req.next_psn;
        }
        let idx = req.idx;
        let len = self.sq[idx].len;
        if req.end || req.operation == Operation::RdmaReadRequest {
            self.sq[idx].sent_all = true;
            self.req.idx += 1;
            self.req.offset = 0;
        } else {
            self.req.offset += req.payload_len;
            debug_assert!(self.req.offset < len);
        }
        match self.qp_type {
            QpType::Rc => {
                if !self.timers.is_armed(Timer::AckTimeout) {
                    if let Some(t) = ack_timeout(self.attr.timeout) {
                        self.timers.set(Timer::AckTimeout, Some(ctx.now + t));
                    }
                }
            }
            // Unacknowledged services complete a WQE once its last packet is out.
            QpType::Uc | QpType::Ud => {
                if req.end {
                    self.comp.set_oldest_unacked_psn(self.req.next_psn);
                    self.complete_front(ctx, WcStatus::Success);
                    self.complete_local_ops(ctx);
                }
            }
        }
    }

    /// The WQE at the requester's position failed locally: it will complete with
    /// `status` once everything before it has, then the QP enters ERR (RC) or SQE.
    pub(super) fn local_error(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        if let Some(w) = self.sq.get_mut(self.req.idx) {
            w.local_err = Some(status);
        }
        self.complete_local_errors(ctx);
    }

    /// Completes a locally failed WQE once it is the oldest one.
    pub(super) fn complete_local_errors(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(status) = self.sq.front().and_then(|w| w.local_err) {
            self.complete_front(ctx, status);
            if self.qp_type == QpType::Rc {
                self.fail(ctx);
            } else {
                self.enter_sq_error(ctx);
            }
        }
    }

    /// Moves the requester back (or forward) to resend from `psn`: go-back-N.
    pub(super) fn rewind_to(&mut self, psn: Psn) {
        let mtu = self.mtu();
        let mut i = 0;
        while i < self.sq.len() {
            let w = &self.sq[i];
            if !w.assigned {
                break;
            }
            if psn.distance(w.last_psn()) > 0 {
                i += 1;
                continue;
            }
            let k = psn.distance(w.first_psn).max(0) as u32;
            self.req.idx = i;
            self.req.offset = (k * mtu).min(w.len);
            self.req.next_psn = w.first_psn.add(k);
            if self.req.offset == 0 {
                self.req.next_psn = w.first_psn;
            }
            self.req.noack_pkts = 0;
            return;
        }
        self.req.idx = i;
        self.req.offset = 0;
        self.req.next_psn = psn;
        self.req.noack_pkts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_packet_counts() {
        assert_eq!(packets(0, 256), 1);
        assert_eq!(packets(256, 256), 1);
        assert_eq!(packets(257, 256), 2);
        assert_eq!(position(0, 1), Position::Only);
        assert_eq!(position(0, 3), Position::First);
        assert_eq!(position(1, 3), Position::Middle);
        assert_eq!(position(2, 3), Position::Last);
    }
}
