//! Requester: turns send WQEs into request packets, one per `poll_transmit` call.
//!
//! Segments messages by the path MTU, gathers payload straight from registered memory,
//! assigns PSNs (a READ consumes one per response packet), sets AckReq on the last packet
//! of a message and every [`MAX_PKTS_PER_ACK`] packets, and holds back for the send
//! window, `max_rd_atomic`, fences, SQD and RNR waits. Go-back-N is just the completer
//! moving the requester's position back (see `Qp::rewind_to`).

use core::net::Ipv6Addr;

use ferroce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtRepr, IethRepr, ImmDtRepr, Opcode, Operation, Position,
    Psn, RethRepr, Service,
};

use crate::mr::Access;
use crate::qp::{ack_timeout, Ctx, Qp, MAX_PKTS_PER_ACK, SEND_WINDOW};
use crate::tx::{ip_udp_len, write_ib, TxMeta};
use crate::verbs::{QpState, QpType, WcStatus, WrOpcode};

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
    pub(crate) fn requester_tx(
        &mut self,
        ctx: &mut Ctx<'_>,
        gids: &[Ipv6Addr],
        buf: &mut [u8],
    ) -> Option<TxMeta> {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            return None;
        }
        if self.comp.rnr_until.is_some() {
            return None;
        }
        let idx = self.req.idx;
        let mtu = self.mtu();
        let resending = self.req.psn.before(self.req.max_sent);
        let wqe = self.sq.get(idx)?;
        if wqe.local_err.is_some() {
            // Waits for the WQEs before it to complete; then it fails in order.
            return None;
        }
        let op = wqe.wr.opcode;

        if self.req.offset == 0 {
            // Starting (or restarting) a message.
            if self.state() == QpState::Sqd && !resending {
                return None;
            }
            let earlier_rd_atomic = self
                .sq
                .iter()
                .take(idx)
                .filter(|w| w.wr.opcode.is_read_or_atomic())
                .count();
            if wqe.wr.flags.contains(crate::verbs::SendFlags::FENCE) && earlier_rd_atomic > 0 {
                return None;
            }
            if op.is_read_or_atomic()
                && earlier_rd_atomic >= usize::from(self.attr.max_rd_atomic.max(1))
            {
                return None;
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
            let psn = self.req.psn;
            let w = &mut self.sq[idx];
            w.first_psn = psn;
            w.npkts = npkts;
            w.assigned = true;
        }
        if self.qp_type == QpType::Rc && self.req.psn.distance(self.comp.psn) >= SEND_WINDOW {
            return None;
        }

        let w = &self.sq[idx];
        let k = self.req.offset / mtu;
        let pos = position(k, w.npkts);
        let end = matches!(pos, Position::Last | Position::Only);
        let psn = self.req.psn;
        let svc = self.service();
        let mut ext = ExtRepr::default();
        let (operation, payload_len, consumed) = match op {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => {
                let n = (w.len - self.req.offset).min(mtu);
                (Operation::Send, n, 1)
            }
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                let n = (w.len - self.req.offset).min(mtu);
                if matches!(pos, Position::First | Position::Only) {
                    ext.reth = Some(RethRepr {
                        va: w.wr.remote_addr,
                        rkey: w.wr.rkey,
                        dma_len: w.len,
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
        let Some(opcode) = Opcode::lookup(svc, operation, opcode_pos, imm, inv) else {
            // Not reachable for WRs that passed post_send; fail the WQE rather than panic.
            self.local_error(ctx, WcStatus::LocQpOpErr);
            return None;
        };
        let ack_req =
            self.qp_type == QpType::Rc && (end || self.req.noack_pkts + 1 >= MAX_PKTS_PER_ACK);
        let bth = BthRepr {
            solicited: end && w.wr.flags.contains(crate::verbs::SendFlags::SOLICITED),
            ack_req,
            ..BthRepr::new(opcode, dest_qp, psn)
        };
        let hl = ip_udp_len(&dst);
        let offset = self.req.offset;
        let pd = self.pd;
        let res = write_ib(
            buf.get_mut(hl..)?,
            bth,
            ext,
            payload_len as usize,
            |out| match &w.inline {
                Some(data) => {
                    let s = offset as usize;
                    out.copy_from_slice(&data[s..s + out.len()]);
                    Ok(())
                }
                None => ctx.mrs.gather(pd, &w.wr.sg_list, u64::from(offset), out),
            },
        );
        let ib_len = match res {
            Ok(Some(n)) => n,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(qpn = self.qpn, %e, "gather failed");
                self.local_error(ctx, WcStatus::LocProtErr);
                return None;
            }
        };

        // Committed: advance.
        if psn.before(self.req.max_sent) {
            ctx.counters.retransmitted_pkts += 1;
        } else if offset == 0
            && matches!(operation, Operation::RdmaWrite | Operation::RdmaReadRequest)
        {
            ctx.counters.rdma_sends += 1;
        }
        self.req.noack_pkts = if ack_req { 0 } else { self.req.noack_pkts + 1 };
        self.req.psn = psn.add(consumed);
        if self.req.psn.after(self.req.max_sent) {
            self.req.max_sent = self.req.psn;
        }
        let len = self.sq[idx].len;
        if end || operation == Operation::RdmaReadRequest {
            self.sq[idx].sent_all = true;
            self.req.idx += 1;
            self.req.offset = 0;
        } else {
            self.req.offset += payload_len;
            debug_assert!(self.req.offset < len);
        }
        match self.qp_type {
            QpType::Rc => {
                if self.comp.timer.is_none() {
                    if let Some(t) = ack_timeout(self.attr.timeout) {
                        self.comp.timer = Some(ctx.now + t);
                    }
                }
            }
            // Unacknowledged services complete a WQE once its last packet is out.
            QpType::Uc | QpType::Ud => {
                if end {
                    self.comp.psn = self.req.psn;
                    self.complete_front(ctx, WcStatus::Success);
                }
            }
        }
        Some(TxMeta {
            dst,
            src,
            traffic_class: tc,
            flow_label: flow,
            sport: self.sport,
            ib_len,
            ecn: None,
            paced: true,
        })
    }

    /// The WQE at the requester's position failed locally: it will complete with
    /// `status` once everything before it has, then the QP enters ERR (RC) or SQE.
    pub(crate) fn local_error(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        if let Some(w) = self.sq.get_mut(self.req.idx) {
            w.local_err = Some(status);
        }
        self.complete_local_errors(ctx);
    }

    /// Completes a locally failed WQE once it is the oldest one.
    pub(crate) fn complete_local_errors(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(status) = self.sq.front().and_then(|w| w.local_err) {
            self.complete_front(ctx, status);
            if self.qp_type == QpType::Rc {
                self.enter_error(ctx);
            } else {
                self.enter_sq_error(ctx);
            }
        }
    }

    /// Moves the requester back (or forward) to resend from `psn`: go-back-N.
    pub(crate) fn rewind_to(&mut self, psn: Psn) {
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
            self.req.psn = w.first_psn.add(k);
            if self.req.offset == 0 {
                self.req.psn = w.first_psn;
            }
            self.req.noack_pkts = 0;
            return;
        }
        self.req.idx = i;
        self.req.offset = 0;
        self.req.psn = psn;
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
