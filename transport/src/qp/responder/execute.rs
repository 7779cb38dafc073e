//! Executing the expected request: the opcode sequence and length rules, then one
//! function per operation (`execute_send`, `execute_write`, `execute_read`,
//! `execute_atomic`, `execute_atomic_write`) sharing one QP access check, one R_Key check
//! and one MSN advance.

use ferroce_wire::{NakCode, Operation, Position};

use super::{InMsg, ReadRes, Refuse, Resource, RespOut, INVALID_REQUEST};
use crate::mr::{sge_total, Access, AtomicOp, KeyKind};
use crate::qp::requester::packets;
use crate::qp::{Ctx, Qp, Rx};
use crate::verbs::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// The longest message the IB spec allows (2^31 bytes); a DMA length beyond it is an
/// invalid request.
pub(crate) const MAX_DMA_LEN: u32 = 1 << 31;

impl Qp {
    /// Opcode sequence and length rules shared by RC and UC.
    pub(super) fn check_sequence(&self, rx: &Rx<'_>) -> Result<(), Refuse> {
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
    pub(super) fn execute(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) -> Result<(), Refuse> {
        self.check_sequence(rx)?;
        match rx.bth.opcode.operation() {
            Operation::Send => self.execute_send(ctx, rx),
            Operation::RdmaWrite => self.execute_write(ctx, rx),
            Operation::RdmaReadRequest => self.execute_read(ctx, rx),
            Operation::CompareSwap | Operation::FetchAdd => self.execute_atomic(ctx, rx),
            Operation::AtomicWrite => self.execute_atomic_write(ctx, rx),
            _ => Err(INVALID_REQUEST),
        }
    }

    /// The QP's access flags allow remote `right` (else an invalid request).
    fn qp_allows(&self, right: Access) -> Result<(), Refuse> {
        if self.attr.qp_access_flags.contains(right) {
            Ok(())
        } else {
            Err(INVALID_REQUEST)
        }
    }

    /// How this QP's responder presents R_Keys to the memory table (a type 2 memory
    /// window answers only the QP it is bound to).
    pub(super) fn remote_key(&self) -> KeyKind {
        KeyKind::Remote { qpn: self.qpn }
    }

    /// The one R_Key check of WRITE and READ: `rkey` grants `right` over `len` bytes at
    /// `va` in this QP's PD. A zero-length request names no memory and is not checked
    /// (C9-88).
    fn check_rkey(
        &self,
        ctx: &Ctx<'_>,
        rkey: u32,
        va: u64,
        len: u32,
        right: Access,
    ) -> Result<(), Refuse> {
        if len == 0 {
            return Ok(());
        }
        ctx.mrs
            .check(rkey, self.remote_key(), self.pd, va, u64::from(len), right)
            .map(|_| ())
            .map_err(|e| {
                tracing::debug!(qpn = self.qpn, %e, ?right, "remote access refused");
                Refuse::Nak(NakCode::RemoteAccessError, None)
            })
    }

    /// SEND: places the payload in the receive WQE (taken at the first packet) and
    /// completes it at the last.
    fn execute_send(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) -> Result<(), Refuse> {
        let pos = rx.bth.opcode.position();
        let end = matches!(pos, Position::Last | Position::Only);
        if matches!(pos, Position::First | Position::Only) {
            let wqe = self.take_recv(ctx).ok_or(Refuse::Rnr)?;
            self.resp.cur = Some(InMsg::Send { wqe, offset: 0 });
        }
        let Some(InMsg::Send { wqe, offset }) = &mut self.resp.cur else {
            return Err(INVALID_REQUEST);
        };
        let total = sge_total(&wqe.sg_list).unwrap_or(0);
        let n = rx.payload.len() as u32;
        if offset.checked_add(n).is_none_or(|e| e > total) {
            return Err(Refuse::Nak(
                NakCode::InvalidRequest,
                Some(WcStatus::LocLenErr),
            ));
        }
        if let Err(e) = ctx
            .mrs
            .scatter(self.pd, &wqe.sg_list, u64::from(*offset), rx.payload)
        {
            tracing::debug!(qpn = self.qpn, %e, "receive WQE scatter failed");
            return Err(Refuse::Nak(
                NakCode::RemoteOperationalError,
                Some(WcStatus::LocProtErr),
            ));
        }
        *offset += n;
        if !end {
            return Ok(());
        }
        let mut flags = WcFlags::empty();
        let mut inv_rkey = 0;
        if let Some(ieth) = rx.ext.ieth {
            if let Err(e) = ctx.mrs.invalidate(self.pd, self.qpn, ieth.rkey) {
                ctx.counters.rx_invalidate_refused += 1;
                tracing::debug!(qpn = self.qpn, %e, "invalidate refused");
                return Err(Refuse::Nak(
                    NakCode::InvalidRequest,
                    Some(WcStatus::RemInvReqErr),
                ));
            }
            flags |= WcFlags::WITH_INV;
            inv_rkey = ieth.rkey;
        }
        let Some(InMsg::Send { wqe, offset }) = self.resp.cur.take() else {
            return Err(INVALID_REQUEST);
        };
        let mut wc = WorkCompletion::new(self.qpn, wqe.wr_id, WcOpcode::Recv, WcStatus::Success);
        wc.byte_len = offset;
        if let Some(imm) = rx.ext.immdt {
            flags |= WcFlags::WITH_IMM;
            wc.imm_data = imm.imm;
        }
        wc.invalidated_rkey = inv_rkey;
        wc.wc_flags = flags;
        ctx.cqs
            .push_solicited(self.recv_cq, wc, rx.bth.solicited, ctx.counters);
        self.resp.advance_msn();
        Ok(())
    }

    /// RDMA WRITE: checks the R_Key at the first packet, places every packet's payload,
    /// and with immediate data completes a receive WQE at the last.
    fn execute_write(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) -> Result<(), Refuse> {
        let pos = rx.bth.opcode.position();
        let end = matches!(pos, Position::Last | Position::Only);
        let starts = matches!(pos, Position::First | Position::Only);
        if starts {
            self.qp_allows(Access::REMOTE_WRITE)?;
        }
        // WRITE with immediate consumes a receive WQE at its last packet: with none, the
        // RNR NAK comes before anything changes (rxe checks resources after the QP's
        // access and before the R_Key too), so that the packet's resend finds the
        // responder as this one did. A WRITE ONLY begun here before the NAK made its
        // resend look like a new WRITE inside the one begun: an invalid request.
        if end && rx.ext.immdt.is_some() && !self.has_recv(ctx) {
            return Err(Refuse::Rnr);
        }
        if starts {
            let reth = rx.ext.reth.ok_or(INVALID_REQUEST)?;
            if reth.dma_len > MAX_DMA_LEN {
                ctx.counters.rx_dma_len_too_long += 1;
                return Err(INVALID_REQUEST);
            }
            // A WRITE ONLY carrying its whole DMA length and no immediate is checked
            // once, where its payload is written below: same key, range and right, and
            // no other refusal can come first. (Split WRITEs make every packet such a
            // WRITE ONLY, and this was a second region lookup for each.)
            let written_whole = pos == Position::Only
                && rx.ext.immdt.is_none()
                && rx.payload.len() as u64 == u64::from(reth.dma_len);
            if !written_whole {
                self.check_rkey(ctx, reth.rkey, reth.va, reth.dma_len, Access::REMOTE_WRITE)?;
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
            return Err(INVALID_REQUEST);
        };
        let n = rx.payload.len() as u32;
        if n > resid || (end && n != resid) {
            return Err(INVALID_REQUEST);
        }
        if n > 0 {
            let at = va.wrapping_add(u64::from(total - resid));
            ctx.mrs
                .write(
                    rkey,
                    self.remote_key(),
                    self.pd,
                    at,
                    Access::REMOTE_WRITE,
                    rx.payload,
                )
                .map_err(|e| {
                    tracing::debug!(qpn = self.qpn, %e, "remote write refused");
                    Refuse::Nak(NakCode::RemoteAccessError, None)
                })?;
        }
        if let Some(InMsg::Write { resid, .. }) = &mut self.resp.cur {
            *resid -= n;
        }
        if !end {
            return Ok(());
        }
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
                ctx.cqs
                    .push_solicited(self.recv_cq, wc, rx.bth.solicited, ctx.counters);
            }
        }
        self.resp.advance_msn();
        Ok(())
    }

    /// A new READ or atomic needs a resource: more than max_dest_rd_atomic at once is an
    /// invalid request, unless one of those in use only replays a retry (then that stops).
    fn room_for_rd_atomic(&mut self) -> Result<(), Refuse> {
        if self.resp.active_reads() < usize::from(self.attr.max_dest_rd_atomic) {
            return Ok(());
        }
        if self.resp.cancel_a_replay() {
            tracing::debug!(qpn = self.qpn, "a new READ/atomic took a replay's resource");
            return Ok(());
        }
        tracing::debug!(
            qpn = self.qpn,
            max = self.attr.max_dest_rd_atomic,
            "READ/atomic over max_dest_rd_atomic"
        );
        Err(INVALID_REQUEST)
    }

    /// RDMA READ request: checks it, keeps it as a resource and queues its responses
    /// (sent by `responder_tx`); the expected PSN skips one per response packet.
    fn execute_read(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) -> Result<(), Refuse> {
        self.qp_allows(Access::REMOTE_READ)?;
        let reth = rx.ext.reth.ok_or(INVALID_REQUEST)?;
        self.room_for_rd_atomic()?;
        if reth.dma_len > MAX_DMA_LEN {
            // C9-?: messages are at most 2^31 bytes; also keeps the response count
            // (at most 2^23 at MTU 256) inside the PSN space.
            ctx.counters.rx_dma_len_too_long += 1;
            return Err(INVALID_REQUEST);
        }
        self.check_rkey(ctx, reth.rkey, reth.va, reth.dma_len, Access::REMOTE_READ)?;
        let psn = rx.bth.psn;
        let n = packets(reth.dma_len, self.mtu());
        let last_psn = psn.add(n - 1);
        let age = self.resp.next_age();
        let slot = self.resp.free_resource();
        self.resp.res[slot] = Resource::Read(ReadRes {
            first_psn: psn,
            last_psn,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
            start_psn: psn,
            cur_va: reth.va,
            cur_len: reth.dma_len,
            next: 0,
            pending: true,
            replay: false,
            replays: 0,
            age,
        });
        self.push_resp(ctx, RespOut::Read { res: slot });
        self.resp.expected_psn = last_psn.add(1);
        self.resp.advance_msn();
        ctx.counters.rdma_recvs += 1;
        Ok(())
    }

    /// Atomic: executes it once (the memory table checks the R_Key and alignment),
    /// caches the original value for duplicates and queues the atomic ACK.
    fn execute_atomic(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) -> Result<(), Refuse> {
        self.qp_allows(Access::REMOTE_ATOMIC)?;
        let a = rx.ext.atomic_eth.ok_or(INVALID_REQUEST)?;
        self.room_for_rd_atomic()?;
        if a.va % 8 != 0 {
            return Err(INVALID_REQUEST);
        }
        let aop = if rx.bth.opcode.operation() == Operation::CompareSwap {
            AtomicOp::CmpSwp {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd(a.swap_add)
        };
        let orig = ctx
            .mrs
            .atomic(a.rkey, self.qpn, self.pd, a.va, aop)
            .map_err(|e| {
                tracing::debug!(qpn = self.qpn, %e, "atomic refused");
                Refuse::Nak(NakCode::RemoteAccessError, None)
            })?;
        let psn = rx.bth.psn;
        let age = self.resp.next_age();
        let slot = self.resp.free_resource();
        self.resp.res[slot] = Resource::Atomic { psn, orig, age };
        self.push_resp(ctx, RespOut::AtomicAck { psn, orig });
        self.resp.expected_psn = psn.add(1);
        self.resp.advance_msn();
        Ok(())
    }

    /// Atomic write (IBA 1.5, A19.4): the RETH names exactly 8 bytes at an 8-byte aligned
    /// address, the payload is their new value, stored in one atomic operation under the
    /// rights of an RDMA WRITE (the QP's and the region's REMOTE_WRITE), as rxe checks
    /// them. It is acknowledged like a WRITE (by the caller), and a duplicate is
    /// acknowledged again without storing: no resource is kept, so it needs no room among
    /// the READs and atomics.
    fn execute_atomic_write(&mut self, ctx: &mut Ctx<'_>, rx: &Rx<'_>) -> Result<(), Refuse> {
        self.qp_allows(Access::REMOTE_WRITE)?;
        let reth = rx.ext.reth.ok_or(INVALID_REQUEST)?;
        let value: [u8; 8] = rx.payload.try_into().map_err(|_| INVALID_REQUEST)?;
        if reth.dma_len != 8 || !reth.va.is_multiple_of(8) {
            return Err(INVALID_REQUEST);
        }
        ctx.mrs
            .atomic(
                reth.rkey,
                self.qpn,
                self.pd,
                reth.va,
                AtomicOp::Store(u64::from_le_bytes(value)),
            )
            .map_err(|e| {
                tracing::debug!(qpn = self.qpn, %e, "atomic write refused");
                Refuse::Nak(NakCode::RemoteAccessError, None)
            })?;
        self.resp.advance_msn();
        ctx.counters.rdma_recvs += 1;
        Ok(())
    }
}
