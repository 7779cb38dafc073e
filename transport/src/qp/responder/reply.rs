//! Sending what the responder owes: ACKs and NAKs, atomic ACKs and READ responses
//! (read from registered memory as they go out), in the order they were queued.

use core::net::Ipv6Addr;

use ferroce_wire::icrc_fold;
use ferroce_wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, ExtRepr, NakCode, Opcode, Operation, Position, Service,
    Syndrome,
};

use super::{ReadRes, Resource, RespOut};
use crate::mr::Access;
use crate::qp::requester::{packets, position};
use crate::qp::{Ctx, Qp};
use crate::tx::{ip_udp_len, write_ib, write_ib_folding, TxMeta};
use crate::verbs::{QpState, QpType};

impl Qp {
    /// Writes the next responder packet (ACK, NAK, read response, atomic ACK). READ
    /// responses wait while `allow_paced` is false (the QP's DCQCN pacer holds them).
    pub(in crate::qp) fn responder_tx(
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
        // A replayed READ stream answers a repeated request: its sending before was lost.
        let mut silences = 0;
        let mut payload_crc = None;
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
                let Some(Resource::Read(r @ ReadRes { pending: true, .. })) =
                    self.resp.res.get(res).copied()
                else {
                    self.resp.out.pop_front();
                    return self.responder_tx(ctx, gids, buf, allow_paced);
                };
                let (va, rkey, len) = (r.cur_va, r.rkey, r.cur_len);
                silences = r.replays;
                let next_psn = r.next_psn();
                let mtu = self.mtu();
                let n = packets(len, mtu);
                let k = r.next;
                let pos = position(k, n);
                // k < n <= 2^23 and mtu <= 4096: the offset fits in u64 and is <= len.
                let off = u64::from(k) * u64::from(mtu);
                let plen = (u64::from(len).saturating_sub(off)).min(u64::from(mtu)) as u32;
                let mut ext = ExtRepr::default();
                if pos != Position::Middle {
                    ext.aeth = Some(ack(credits));
                }
                let opcode =
                    Opcode::lookup(Service::Rc, Operation::RdmaReadResponse, pos, false, false)?;
                let bth = BthRepr::new(opcode, dest_qp, next_psn);
                let pd = self.pd;
                let key_kind = self.remote_key();
                let at = va.wrapping_add(off);
                let fold = icrc_fold::for_payload(plen as usize);
                let r = write_ib_folding(out, bth, ext, plen as usize, |o| {
                    if o.is_empty() {
                        // A zero-length READ names no memory: its R_Key and VA were not
                        // checked (C9-88) and are not used.
                        return Ok(None);
                    }
                    match fold {
                        Some(f) => ctx
                            .mrs
                            .read_folding(rkey, key_kind, pd, at, Access::REMOTE_READ, o, !0, f)
                            .map(Some),
                        None => ctx
                            .mrs
                            .read(rkey, key_kind, pd, at, Access::REMOTE_READ, o)
                            .map(|()| None),
                    }
                });
                match r {
                    Ok(Some((n, folded))) => {
                        payload_crc = folded;
                        let done = matches!(pos, Position::Last | Position::Only);
                        if let Some(Resource::Read(r)) = self.resp.res.get_mut(res) {
                            r.next += 1;
                            r.pending = !done;
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
                        self.fail(ctx);
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
            silences,
            payload_crc,
        })
    }
}
