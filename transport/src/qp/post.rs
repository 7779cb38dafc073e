//! Posting work requests: every check `ibv_post_send` / `ibv_post_recv` make before a
//! WR is queued, and the inline copy taken at post time.

use core::net::Ipv6Addr;

use ferroce_wire::Psn;

use crate::error::{Error, Result};
use crate::qp::{check_av, Ctx, Qp, SendWqe};
use crate::verbs::{
    Mtu, QpState, QpType, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

impl Qp {
    /// Queues a send WR (the endpoint checked the QP state allows it).
    pub(crate) fn post_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        wr: &SendWr,
        gids: &[Ipv6Addr],
        port_mtu: Mtu,
    ) -> Result<()> {
        use crate::verbs::WrOpcode as Op;
        match self.state() {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => {}
            s => return Err(Error::InvalidState(s)),
        }
        if self.sq.len() >= self.cap.max_send_wr as usize {
            return Err(Error::QueueFull);
        }
        let local = wr.opcode.is_local();
        // A local operation carries no data: its gather list and INLINE flag mean nothing.
        let inline = wr.flags.contains(SendFlags::INLINE) && !local;
        // An atomic write carries its value in the WR (`ibv_wr_atomic_write`), not a list.
        let atomic_write = wr.opcode == Op::AtomicWrite;
        if wr.sg_list.len() > self.cap.max_send_sge as usize && !inline && !local && !atomic_write {
            return Err(Error::TooManySge);
        }
        let len = if local {
            0
        } else if atomic_write {
            8
        } else {
            crate::mr::sge_total(&wr.sg_list).ok_or(Error::MessageTooLarge)?
        };
        if wr.opcode == Op::BindMw && wr.bind_mw.is_none() {
            return Err(Error::InvalidWr("BIND_MW without a bind"));
        }
        if len > 1 << 31 {
            return Err(Error::MessageTooLarge);
        }
        match (self.qp_type, wr.opcode) {
            (QpType::Ud, Op::Send | Op::SendWithImm) => {
                let ud = wr
                    .ud
                    .as_ref()
                    .ok_or(Error::InvalidWr("UD send without a destination"))?;
                check_av(&ud.av, gids)?;
                if ud.dest_qpn > 0xff_ffff {
                    return Err(Error::InvalidWr("dest_qpn"));
                }
                if len > port_mtu.bytes() {
                    return Err(Error::MessageTooLarge);
                }
            }
            (QpType::Ud, _) => return Err(Error::InvalidWr("opcode not supported on UD")),
            (QpType::Uc, op)
                if op.is_read_or_atomic() || op == Op::SendWithInv || op == Op::AtomicWrite =>
            {
                return Err(Error::InvalidWr("opcode not supported on UC"))
            }
            _ => {}
        }
        if wr.opcode.is_atomic() && (len != 8 || wr.sg_list.len() != 1) {
            return Err(Error::InvalidWr("atomics take one 8-byte SGE"));
        }
        // Atomics and atomic writes alike name one aligned 8-byte word.
        if (wr.opcode.is_atomic() || atomic_write) && !wr.remote_addr.is_multiple_of(8) {
            return Err(Error::InvalidWr("atomic remote address not 8-byte aligned"));
        }
        let inline_bytes = if atomic_write {
            // The value travels as the packet's payload, as inline data does.
            Some(wr.compare_add.to_ne_bytes().to_vec())
        } else if inline {
            if wr.opcode.is_read_or_atomic() {
                return Err(Error::InvalidWr("inline READ or atomic"));
            }
            if len > self.cap.max_inline_data {
                return Err(Error::InlineTooLarge);
            }
            let mut buf = vec![0u8; len as usize];
            // Inline data is gathered now; a bad key is a post-time error.
            ctx.mrs
                .gather(self.pd, &wr.sg_list, 0, &mut buf)
                .map_err(|_| Error::InvalidWr("inline gather failed (bad lkey or range)"))?;
            Some(buf)
        } else {
            None
        };
        let mut sg_list = self.take_sg_list();
        if !(inline || local || atomic_write) {
            sg_list.extend_from_slice(&wr.sg_list);
        }
        // Every field but the gather list, which goes into a reused allocation.
        let stored = SendWr {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            sg_list,
            flags: wr.flags,
            imm_data: wr.imm_data,
            invalidate_rkey: wr.invalidate_rkey,
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
            compare_add: wr.compare_add,
            swap: wr.swap,
            ud: wr.ud,
            bind_mw: wr.bind_mw,
        };
        self.sq.push_back(SendWqe {
            wr: stored,
            inline: inline_bytes,
            len,
            signaled: self.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED),
            first_psn: Psn::new(0),
            npkts: 0,
            local_err: None,
            assigned: false,
            sent_all: false,
        });
        if matches!(self.state(), QpState::Err | QpState::Sqe) {
            self.flush_sq(ctx);
        }
        Ok(())
    }

    /// Queues a receive WR.
    pub(crate) fn post_recv(&mut self, ctx: &mut Ctx<'_>, wr: &RecvWr) -> Result<()> {
        if self.srq.is_some() {
            return Err(Error::InvalidWr("this QP receives from an SRQ: post there"));
        }
        if self.state() == QpState::Reset {
            return Err(Error::InvalidState(QpState::Reset));
        }
        if self.rq.len() >= self.cap.max_recv_wr as usize {
            return Err(Error::QueueFull);
        }
        if wr.sg_list.len() > self.cap.max_recv_sge as usize {
            return Err(Error::TooManySge);
        }
        crate::mr::sge_total(&wr.sg_list).ok_or(Error::MessageTooLarge)?;
        if self.state() == QpState::Err {
            let wc = WorkCompletion::new(self.qpn, wr.wr_id, WcOpcode::Recv, WcStatus::WrFlushErr);
            ctx.cqs.push(self.recv_cq, wc, ctx.counters);
            return Ok(());
        }
        self.rq.push_back(wr.clone());
        Ok(())
    }
}
